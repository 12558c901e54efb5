#pragma once
// What both sides need to hold a plugin worker to its bounds: the processes a plugin started
// (found through /proc, so that a child that left the worker's process group with setsid is
// still found while the worker lives), and the worker's memory limit (RLIMIT_AS: sizes, the
// default, and the builds in which an address-space limit cannot apply).
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attn::plugin {

// The live (not zombie) children of `parent`, from a scan of /proc.
std::vector<pid_t> children_of(pid_t parent);
// Every live descendant of `root`, parents before their children.
std::vector<pid_t> descendants_of(pid_t root);
// "pid 1234 (sleep)" with its command line where readable.
std::string describe_process(pid_t pid);

// Kills `root`'s process group and every descendant of `root` found while it lives (SIGKILL), so
// that neither a child in the group nor one that left it outlives the worker. Does not reap root.
void kill_process_tree(pid_t root);

// "512M", "8G", "1.5G", "1073741824" (bytes), binary units K M G T; "0" or "none": no limit.
// nullopt when the text is none of these.
std::optional<std::uint64_t> parse_byte_size(std::string_view text);
// "1 GiB", "512 MiB", "11.7 GiB".
std::string format_bytes(std::uint64_t bytes);

// The default per-worker limit: half of the memory this machine gives us (its physical memory,
// or a smaller memory cgroup limit), with the words that say so.
struct DefaultMemoryLimit {
  std::uint64_t bytes = 0;
  std::string basis;  // "half of the 23.4 GiB of physical memory"
};
DefaultMemoryLimit default_memory_limit();

// Why RLIMIT_AS cannot be applied in this build, or nullptr when it can. ASan, TSan and MSan
// reserve terabytes of address space for their shadow memory at start, so an address-space limit
// of any useful size would make the worker fail before it loads the plugin.
constexpr const char* address_space_limit_unavailable() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return "a sanitizer build (ASan/TSan reserve terabytes of address space, which RLIMIT_AS would refuse)";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
  return "a sanitizer build (ASan/TSan/MSan reserve terabytes of address space, which RLIMIT_AS would refuse)";
#else
  return nullptr;
#endif
#else
  return nullptr;
#endif
}

}  // namespace attn::plugin

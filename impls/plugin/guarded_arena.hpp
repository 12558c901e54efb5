#pragma once
// The memory a plugin call works in: one shared-memory file (memfd) that the harness fills and
// the worker process maps, so tensors cross the process boundary without a copy through the pipe.
//
//   [status page][guard][slack | buffer 0][guard][slack | buffer 1][guard] ...
//
// Every buffer ends exactly at a page boundary followed by a guard page, which the worker maps
// PROT_NONE: one byte written (or read) past the end faults at once, and the worker's signal
// handler records the faulting offset in the status page before the process dies, so the harness
// can say which buffer was overrun and by how much. The slack before a buffer (the rest of its
// first page) holds canary bytes, checked after the call: a write just before the start shows
// there, and further before it the previous guard page catches it. The layout is plain data
// (JSON) so the worker rebuilds the same picture from the request.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace attn::plugin {

inline constexpr std::uint8_t canary_byte = 0xA5;

// Written by the worker's SIGSEGV/SIGBUS handler into the status page (offset 0).
struct FaultRecord {
  static constexpr std::uint64_t valid = 0x61747466'61756C74ULL;  // "attfault"
  std::uint64_t magic = 0;
  std::uint64_t offset = 0;  // of the faulting address from the arena's start
  std::int32_t signal = 0;
  std::int32_t access = 0;   // 0 unknown, 1 read, 2 write
};
// What the worker was doing, also in the status page (after the FaultRecord): a crash names it.
// returned: the call returned and its buffers are read-only in the worker; a fault recorded then
// is a write after run() returned (a thread of the call that outlived it).
enum class Phase : std::int32_t { idle = 0, supports = 1, run = 2, bench = 3, returned = 4 };
// The memory evidence a failure under the worker's memory limit is read from: the worker's peak
// address space (VmPeak, written after each call and by its SIGSEGV/SIGBUS/SIGABRT handlers and
// at exit), and whether an operator new failed in it.
struct StatusPage {
  FaultRecord fault;
  Phase phase = Phase::idle;
  std::int32_t allocation_failed = 0;
  std::uint64_t vm_peak_kib = 0;
  // The calls the sandbox refused during this call ("; "-separated, NUL-terminated): the harness
  // reads them when the worker died before it could reply.
  char refusals[1024] = {};
};

struct ArenaBuffer {
  std::string name;          // "q", "out", ...
  std::size_t offset = 0;    // of the first byte of data
  std::size_t bytes = 0;
  std::size_t slack = 0;     // canary bytes right before offset
  std::size_t element_bytes = 1;
};

struct ArenaLayout {
  std::size_t page = 4096;
  std::size_t total = 0;
  std::vector<ArenaBuffer> buffers;
  std::vector<std::size_t> guards;  // offsets of the guard pages

  // Buffers in order, each (name, bytes, element bytes); zero-byte buffers get one page all slack.
  static ArenaLayout plan(const std::vector<ArenaBuffer>& buffers, std::size_t page);
  const ArenaBuffer& buffer(std::string_view name) const;  // throws std::out_of_range
  bool in_guard(std::size_t offset) const;
  // "wrote past the end of out: guard page hit 0 bytes after its last element (element 64 of a
  // 64-element buffer)", or nullopt when the offset is in no guard page.
  std::optional<std::string> describe_fault(std::size_t offset, int access) const;
  // The first canary byte before a buffer that changed, as a description; nullopt when intact.
  std::optional<std::string> check_slack(const std::byte* base, const ArenaBuffer& buffer) const;
};

void to_json(nlohmann::json& j, const ArenaLayout& layout);
void from_json(const nlohmann::json& j, ArenaLayout& layout);

// The harness's side: an anonymous shared-memory file of layout.total bytes, mapped read-write,
// the status page zeroed and every slack filled with canaries. The fd goes to the worker.
class SharedArena {
 public:
  explicit SharedArena(ArenaLayout layout);  // throws std::runtime_error naming the failed call
  ~SharedArena();
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;
  const ArenaLayout& layout() const { return layout_; }
  int fd() const { return fd_; }
  std::byte* base() { return base_; }
  const std::byte* base() const { return base_; }
  std::byte* data(const ArenaBuffer& buffer) { return base_ + buffer.offset; }
  const StatusPage& status() const { return *reinterpret_cast<const StatusPage*>(base_); }

 private:
  ArenaLayout layout_;
  int fd_ = -1;
  std::byte* base_ = nullptr;
};

}  // namespace attn::plugin

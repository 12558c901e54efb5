#include "impls/plugin/worker_process.hpp"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

namespace attn::plugin {
namespace {

struct ProcessEntry {
  pid_t pid = 0;
  pid_t parent = 0;
  char state = '?';
};

// Every process /proc shows: (pid, parent, state). The comm field may hold spaces and
// parentheses, so the fields after it are found from its last ')'.
std::vector<ProcessEntry> scan_processes() {
  std::vector<ProcessEntry> out;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return out;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    std::string text;
    if (!std::getline(in, text)) continue;
    const auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 1));
    ProcessEntry e;
    long parent = 0;
    if (!(rest >> e.state >> parent)) continue;
    e.pid = pid_t(pid);
    e.parent = pid_t(parent);
    out.push_back(e);
  }
  ::closedir(dir);
  return out;
}

std::uint64_t read_number(const char* path) {
  std::ifstream in(path);
  std::uint64_t value = 0;
  if (in >> value) return value;
  return 0;
}

}  // namespace

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : scan_processes())
    if (e.parent == parent && e.state != 'Z' && e.state != 'X') out.push_back(e.pid);
  return out;
}

std::vector<pid_t> descendants_of(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  for (const auto& e : scan_processes())
    if (e.state != 'Z' && e.state != 'X') children.emplace(e.parent, e.pid);
  std::vector<pid_t> out;
  std::vector<pid_t> frontier{root};
  while (!frontier.empty() && out.size() < 100000) {
    const pid_t p = frontier.back();
    frontier.pop_back();
    for (auto [it, end] = children.equal_range(p); it != end; ++it) {
      out.push_back(it->second);
      frontier.push_back(it->second);
    }
  }
  return out;
}

std::string describe_process(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!cmdline.empty() && cmdline.back() == '\0') cmdline.pop_back();
  for (char& c : cmdline)
    if (c == '\0') c = ' ';
  for (char& c : cmdline)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  if (cmdline.size() > 80) cmdline = cmdline.substr(0, 77) + "...";
  return cmdline.empty() ? fmt::format("pid {}", pid) : fmt::format("pid {} ({})", pid, cmdline);
}

void kill_process_tree(pid_t root) {
  if (root <= 0) return;
  // Stopped first, so that nothing in the group forks between the scan and the kill; then every
  // descendant (those that left the group too) and the group itself. A second pass catches what
  // was forked while the first ran.
  ::kill(-root, SIGSTOP);
  for (int pass = 0; pass < 2; ++pass) {
    for (pid_t p : descendants_of(root)) ::kill(p, SIGKILL);
    ::kill(-root, SIGKILL);
  }
  ::kill(root, SIGKILL);
}

std::optional<std::uint64_t> parse_byte_size(std::string_view text) {
  if (text == "none") return 0;
  std::string s(text);
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno != 0 || !(value >= 0) || !std::isfinite(value)) return std::nullopt;
  std::string_view unit(end);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.remove_suffix(1);
  if (unit.size() == 2 && (unit[1] == 'i' || unit[1] == 'I')) unit.remove_suffix(1);
  double scale = 1;
  if (unit.empty()) {
    scale = 1;
  } else if (unit.size() == 1) {
    switch (unit[0]) {
      case 'k': case 'K': scale = 0x1p10; break;
      case 'm': case 'M': scale = 0x1p20; break;
      case 'g': case 'G': scale = 0x1p30; break;
      case 't': case 'T': scale = 0x1p40; break;
      default: return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  const double bytes = std::floor(value * scale);
  if (bytes >= 0x1p63) return std::nullopt;
  return std::uint64_t(bytes);
}

std::string format_bytes(std::uint64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} bytes", bytes);
  return v == std::floor(v) ? fmt::format("{:.0f} {}", v, units[u]) : fmt::format("{:.1f} {}", v, units[u]);
}

DefaultMemoryLimit default_memory_limit() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  std::uint64_t machine = pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page) : 0;
  std::string what = "physical memory";
  // A container's memory cgroup may give us less than the machine has (v2, then v1; an
  // unlimited cgroup reads as "max" or a huge number, both ignored here).
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    const std::uint64_t cgroup = read_number(path);
    if (cgroup > 0 && (machine == 0 || cgroup < machine)) {
      machine = cgroup;
      what = fmt::format("memory its cgroup allows ({})", path);
    }
  }
  if (machine == 0) return {std::uint64_t(8) << 30, "8 GiB (this machine's memory size could not be read)"};
  return {machine / 2, fmt::format("half of the {} of {}", format_bytes(machine), what)};
}

}  // namespace attn::plugin

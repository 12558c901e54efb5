#include "benchmarks/memory_probe.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <fstream>
#include <new>
#include <sstream>

namespace attn::bench {
namespace {

bool reset_peak_rss() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  if (!clear_refs) return false;
  clear_refs << "5";
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

}  // namespace

std::int64_t read_status_bytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string prefix = key + ":";
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::istringstream fields(line.substr(prefix.size()));
    std::int64_t value = -1;
    std::string unit;
    fields >> value >> unit;
    if (!fields || value < 0) return -1;
    return unit == "kB" ? value * 1024 : value;
  }
  return -1;
}

MemoryProbe::MemoryProbe() {
  static const bool can_reset = reset_peak_rss() && read_status_bytes("VmHWM") >= 0;
  peak_reset_ = can_reset;
}

void MemoryProbe::start() {
  if (peak_reset_) reset_peak_rss();
  baseline_ = read_status_bytes("VmRSS");
}

std::int64_t MemoryProbe::growth_bytes() const {
  if (baseline_ < 0) return 0;
  const std::int64_t now = read_status_bytes(peak_reset_ ? "VmHWM" : "VmRSS");
  return now < 0 ? 0 : std::max<std::int64_t>(0, now - baseline_);
}

std::string MemoryProbe::method() const {
  return peak_reset_ ? "VmHWM after a clear_refs peak reset, minus VmRSS before" : "VmRSS after minus VmRSS before (peak reset not permitted)";
}

PageBuffer::PageBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<std::byte*>(p);
  mapped_ = bytes;
}

PageBuffer::~PageBuffer() {
  if (data_ != nullptr) munmap(data_, mapped_);
}

}  // namespace attn::bench

#pragma once
// Peak resident memory growth of this process over a stretch of code, and workspace buffers
// whose pages are fresh (untouched until the implementation writes them), so that growth
// counts what an implementation really touches.
//
// Where Linux allows it, the peak (VmHWM) is reset by writing "5" to /proc/self/clear_refs and
// the growth is VmHWM at the end minus VmRSS at the start: transient allocations count. Where
// it does not, the growth is VmRSS at the end minus VmRSS at the start.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace attn::bench {

// A value in bytes from /proc/self/status ("VmRSS", "VmHWM"); -1 when unavailable.
std::int64_t read_status_bytes(const std::string& key);

class MemoryProbe {
 public:
  // Tries the peak reset once per process; the method is fixed from then on.
  MemoryProbe();
  void start();
  std::int64_t growth_bytes() const;  // since start(); 0 when unavailable
  bool peak_reset() const { return peak_reset_; }
  // "VmHWM after a clear_refs peak reset" or "VmRSS difference (no peak reset)".
  std::string method() const;

 private:
  bool peak_reset_ = false;
  std::int64_t baseline_ = 0;
};

// Anonymous mapped memory, page-aligned, not touched here: the first write to each page is the
// implementation's, so resident growth measures what it uses. Zero bytes is a valid empty buffer.
class PageBuffer {
 public:
  explicit PageBuffer(std::size_t bytes);
  ~PageBuffer();
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  std::span<std::byte> span() { return {data_, bytes_}; }

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t mapped_ = 0;
};

}  // namespace attn::bench

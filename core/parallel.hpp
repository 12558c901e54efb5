#pragma once
// A minimal parallel loop over [0, n) on std::threads. Work is split into contiguous ranges,
// so callers that need determinism must not depend on which thread ran an index.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace attn {

inline int default_thread_count() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

template <class Body>  // Body: void(std::int64_t begin, std::int64_t end)
void parallel_for_ranges(std::int64_t n, Body body, int threads = default_thread_count(), std::int64_t min_per_thread = 1) {
  const std::int64_t workers = std::clamp<std::int64_t>(std::min<std::int64_t>(threads, n / std::max<std::int64_t>(min_per_thread, 1)), 1, 1024);
  if (workers <= 1) {
    if (n > 0) body(0, n);
    return;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(workers));
  for (std::int64_t w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      try {
        body(n * w / workers, n * (w + 1) / workers);
      } catch (...) {
        errors[static_cast<std::size_t>(w)] = std::current_exception();
      }
    });
  }
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace attn

#pragma once
// A minimal parallel loop over [0, n). Work is split into contiguous ranges, so callers that
// need determinism must not depend on which thread ran an index.
//
// The threads are parked between calls (core/parallel.cpp) rather than started for each: a
// forward pass at n = 512 takes about 2 ms, and starting and joining threads on this kind of
// virtual machine cost 50 to 250 us of it, enough to bend the fitted O(n^2) exponent.
#include <algorithm>
#include <cstdint>
#include <atomic>
#include <functional>

namespace attn {

int default_thread_count();

// Returns once `value` differs from `old`. With spin_first it spins for up to ~200 us before it
// sleeps (a futex): on this kind of virtual machine a sleeping thread takes tens of microseconds
// to wake, a cost that work handed between threads every few microseconds cannot absorb. Spin
// only with no more threads than cores, or the spinner holds the core a working thread needs.
void wait_for_change(const std::atomic<std::uint32_t>& value, std::uint32_t old, bool spin_first);

namespace detail {
// Runs task(w) for every w in [0, workers), the caller running w = 0, and returns when all
// have; rethrows the first exception a task threw.
void run_on_workers(int workers, const std::function<void(int)>& task);
}  // namespace detail

template <class Body>  // Body: void(std::int64_t begin, std::int64_t end)
void parallel_for_ranges(std::int64_t n, Body body, int threads = default_thread_count(), std::int64_t min_per_thread = 1) {
  const std::int64_t workers = std::clamp<std::int64_t>(std::min<std::int64_t>(threads, n / std::max<std::int64_t>(min_per_thread, 1)), 1, 1024);
  if (workers <= 1) {
    if (n > 0) body(0, n);
    return;
  }
  detail::run_on_workers(static_cast<int>(workers), [&](int w) { body(n * w / workers, n * (w + 1) / workers); });
}

}  // namespace attn

#include "core/parallel.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

namespace attn {

int default_thread_count() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

namespace detail {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins on `value` until it differs from `old` for up to ~200 us, then sleeps on it (a futex):
// back-to-back calls, as in a benchmark loop, never pay for a wake-up, and an idle process
// does not burn a core for longer than that. With more threads than cores a spinning thread
// would hold the core a working one needs, so then it sleeps at once.
template <class T>
void wait_while_equal(const std::atomic<T>& value, T old, bool spin_first) {
  using clock = std::chrono::steady_clock;
  const auto give_up = clock::now() + std::chrono::microseconds(200);
  for (unsigned spin = 1; spin_first; ++spin) {
    if (value.load(std::memory_order_acquire) != old) return;
    cpu_relax();
    if (spin % 256 == 0 && clock::now() > give_up) break;
  }
  while (value.load(std::memory_order_acquire) == old) value.wait(old, std::memory_order_acquire);
}

void run_on_new_threads(int workers, const std::function<void(int)>& task) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(workers));
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w)
    threads.emplace_back([&, w] {
      try {
        task(w);
      } catch (...) {
        errors[static_cast<std::size_t>(w)] = std::current_exception();
      }
    });
  try {
    task(0);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

thread_local bool on_pool_thread = false;

// Threads started once and parked between jobs. One job at a time: a call made while another
// runs (another caller thread, or a task that itself calls parallel_for_ranges) starts its own
// threads instead, as does a forked child, which inherits the pool's state but not its threads.
class WorkerPool {
 public:
  // Never destroyed: the parked threads end with the process. A destructor would have to join
  // them, and in a forked child that exits normally the threads it would join do not exist.
  static WorkerPool& instance() {
    static WorkerPool* pool = new WorkerPool;
    return *pool;
  }

  bool try_run(int workers, const std::function<void(int)>& task) {
    if (on_pool_thread || getpid() != owner_) return false;
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    while (static_cast<int>(threads_.size()) < workers - 1) {
      const int index = static_cast<int>(threads_.size()) + 1;
      threads_.emplace_back([this, index, seen = generation_.load()] { work(index, seen); });
    }
    task_ = &task;
    workers_ = workers;
    spin_.store(static_cast<int>(threads_.size()) + 1 <= default_thread_count(), std::memory_order_relaxed);
    errors_.assign(static_cast<std::size_t>(workers), nullptr);
    // Every pooled thread acknowledges every job, needed or not, so none can still be reading
    // this job's fields when the next one writes them.
    const int pooled = static_cast<int>(threads_.size());
    pending_.store(pooled, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    run_slot(0);
    for (int left = pending_.load(std::memory_order_acquire); left != 0; left = pending_.load(std::memory_order_acquire))
      wait_while_equal(pending_, left, spin_.load(std::memory_order_relaxed));
    for (auto& e : errors_)
      if (e) std::rethrow_exception(e);
    return true;
  }

 private:
  WorkerPool() : owner_(getpid()) {}

  void run_slot(int w) {
    try {
      (*task_)(w);
    } catch (...) {
      errors_[static_cast<std::size_t>(w)] = std::current_exception();
    }
  }

  void work(int index, std::uint32_t seen) {
    on_pool_thread = true;
    for (;;) {  // until the process ends
      wait_while_equal(generation_, seen, spin_.load(std::memory_order_relaxed));
      seen = generation_.load(std::memory_order_acquire);
      if (index < workers_) run_slot(index);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_all();
    }
  }

  const pid_t owner_;
  std::mutex mutex_;  // held by the caller for the whole job
  std::vector<std::thread> threads_;
  const std::function<void(int)>* task_ = nullptr;
  int workers_ = 0;
  std::vector<std::exception_ptr> errors_;
  std::atomic<std::uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> spin_{true};  // no more threads than cores
};

}  // namespace

}  // namespace detail

void wait_for_change(const std::atomic<std::uint32_t>& value, std::uint32_t old, bool spin_first) { detail::wait_while_equal(value, old, spin_first); }

namespace detail {

void run_on_workers(int workers, const std::function<void(int)>& task) {
  if (workers <= 1) {
    task(0);
    return;
  }
  if (!WorkerPool::instance().try_run(workers, task)) run_on_new_threads(workers, task);
}

}  // namespace detail
}  // namespace attn

// core/parallel: every index exactly once, exceptions reach the caller, and the parked workers
// stay usable from nested calls, from several caller threads and in a forked child.
#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/parallel.hpp"

namespace attn {
namespace {

std::vector<int> visits(std::int64_t n, int threads) {
  std::vector<std::atomic<int>> seen(static_cast<std::size_t>(n));
  parallel_for_ranges(n, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) seen[static_cast<std::size_t>(i)]++;
  }, threads);
  std::vector<int> counts;
  for (auto& s : seen) counts.push_back(s.load());
  return counts;
}

TEST(Parallel, EveryIndexOnceForAnyThreadCount) {
  for (int threads : {1, 2, 3, 8})
    for (std::int64_t n : {0, 1, 2, 7, 1000}) {
      const auto counts = visits(n, threads);
      for (std::size_t i = 0; i < counts.size(); ++i) ASSERT_EQ(counts[i], 1) << "n=" << n << " threads=" << threads << " i=" << i;
    }
}

TEST(Parallel, ManyBackToBackCallsReuseTheWorkers) {
  std::atomic<std::int64_t> total{0};
  for (int call = 0; call < 2000; ++call)
    parallel_for_ranges(4, [&](std::int64_t begin, std::int64_t end) { total += end - begin; }, 4);
  EXPECT_EQ(total.load(), 8000);
}

TEST(Parallel, AnExceptionInAnyRangeReachesTheCaller) {
  for (int thrower : {0, 1, 3}) {
    EXPECT_THROW(parallel_for_ranges(4, [&](std::int64_t begin, std::int64_t) {
      if (begin == thrower) throw std::runtime_error("range failed");
    }, 4), std::runtime_error);
  }
  EXPECT_EQ(visits(100, 4)[99], 1);  // still usable afterwards
}

TEST(Parallel, NestedCallsComplete) {
  std::atomic<std::int64_t> total{0};
  parallel_for_ranges(4, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      parallel_for_ranges(10, [&](std::int64_t b, std::int64_t e) { total += e - b; }, 2);
  }, 4);
  EXPECT_EQ(total.load(), 40);
}

TEST(Parallel, SeveralCallerThreadsAtOnce) {
  std::atomic<std::int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      for (int call = 0; call < 200; ++call)
        parallel_for_ranges(6, [&](std::int64_t begin, std::int64_t end) { total += end - begin; }, 3);
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 3 * 200 * 6);
}

TEST(Parallel, AForkedChildCanStillRunInParallel) {
  EXPECT_EQ(visits(10, 2)[9], 1);  // the pool exists in the parent
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const auto counts = visits(1000, 2);
    for (int c : counts)
      if (c != 1) _exit(1);
    std::exit(0);  // a normal exit, static destructors included, must not wait on the parent's threads
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace attn

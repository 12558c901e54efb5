#pragma once
// How `attnbench bench` times a GPU family (an implementation whose describe().device is "cuda"):
// the problem is prepared on the device once (Implementation::prepare_device_run: inputs
// uploaded, output and workspace allocated), a few enqueues warm it up and check_output() checks
// it (an unwritten or non-finite output is the benchmark's error, not a fast result); then each
// iteration is one DeviceRun::enqueue on a dedicated stream between two CUDA events, reported to
// Google Benchmark as manual time. Before each iteration, outside the events: with --l2 cold a
// device buffer of twice the L2 size is written (cudaMemsetAsync on the same stream), and the
// stream is held by a host function until the timed work is enqueued, so the host's launch
// latency stays off the clock.
//
// No CUDA types here: the definitions are in gpu_timing.cpp where CUDA is built, and in
// gpu_unavailable.cpp (which throws) where it is not.
#include <memory>
#include <string>

#include "benchmarks/device_plan.hpp"
#include "benchmarks/problem_list.hpp"

namespace benchmark {
class State;
}

namespace attn::bench {

class GpuTimer {
 public:
  // Creates the stream, the events and (cold) the flush buffer on the current device. Throws
  // naming the failed CUDA call.
  explicit GpuTimer(L2Mode mode);
  ~GpuTimer();
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;

  // The benchmark body of one size of a GPU family. Errors go to state.SkipWithError. Counters:
  // gflops_exact, gflops_published, gbytes_per_second, peak_fraction (of roofline_gflops, when
  // positive) and workspace_bytes (DeviceRun::workspace_bytes).
  void run(benchmark::State& state, const FamilySpec& family, double roofline_gflops);
  // Prepares the problem, enqueues it once and checks the output; returns the failure or "".
  std::string try_once(const FamilySpec& family, std::int64_t n);
  // Frees the prepared problem's device memory.
  void release();
  // One line: how an iteration is timed, for the console and the JSON.
  std::string method() const;

 private:
  struct Resources;
  std::unique_ptr<Resources> resources_;
};

}  // namespace attn::bench

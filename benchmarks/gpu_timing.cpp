// The GPU families' timing (see gpu_timing.hpp). CUDA builds only; plain C++ against the CUDA
// runtime.
#include "benchmarks/gpu_timing.hpp"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "core/inputs.hpp"
#include "impls/cuda_support/cuda_support.hpp"
#include "impls/cuda_support/device_resources.hpp"

namespace attn::bench {

using cuda::check;

namespace {

constexpr int warmup_enqueues = 3;
constexpr std::size_t flush_bytes_without_l2_size = std::size_t{256} << 20;

}  // namespace

// Holds a stream until opened: a host function enqueued before the start event waits for the
// flag, so everything the host enqueues after it (the start event, the timed work, the stop
// event) is queued before the GPU reaches the start event; the host's launch latency is then
// not timed. The wait is bounded (10 s) so that a host that never opens it (an enqueue that
// synchronises the stream, which DeviceRun::enqueue must not) cannot hang the run; the timed-out
// iteration is then an error, not a time.
struct StreamGate {
  std::atomic<bool> open{true};
  std::atomic<bool> timed_out{false};

  static void CUDART_CB wait(void* self) {
    auto& gate = *static_cast<StreamGate*>(self);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!gate.open.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() > deadline) {
        gate.timed_out.store(true, std::memory_order_release);
        return;
      }
      std::this_thread::yield();
    }
  }
};

// (StreamGate is outside the anonymous namespace: Resources holds one, and in a unity build a
// member of a type with internal linkage is an error under -Werror=subobject-linkage.)
struct GpuTimer::Resources {
  explicit Resources(L2Mode m) : mode(m) {
    if (mode == L2Mode::cold) {
      const std::int64_t l2 = gpu_device_info().l2_bytes;
      flush = cuda::DeviceBuffer(l2 > 0 ? 2 * static_cast<std::size_t>(l2) : flush_bytes_without_l2_size);
    }
  }

  // The prepared problem (one at a time: Google Benchmark calls a body several times per size).
  DeviceRun& prepared(const FamilySpec& family, const Problem& p) {
    if (!run || family.implementation != run_implementation || !(run_problem == p)) {
      run.reset();  // free the previous problem's device memory first
      run_implementation = nullptr;
      const CaseInputs inputs = generate_inputs(p);
      run = family.implementation->prepare_device_run(p, inputs);
      if (!run) throw std::runtime_error("prepare_device_run returned no device run (not a device implementation?)");
      run_implementation = family.implementation;
      run_problem = p;
    }
    return *run;
  }

  // Enqueues warmup_enqueues passes, then checks the output (check_output synchronises).
  void warm_up(DeviceRun& r) {
    for (int i = 0; i < warmup_enqueues; ++i) r.enqueue(stream.get());
    r.check_output();
  }

  // One timed iteration: seconds between the events around one enqueue.
  double time_once(DeviceRun& r) {
    if (mode == L2Mode::cold) check(cudaMemsetAsync(flush.data(), 0, flush.bytes(), stream.get()), "cudaMemsetAsync (L2 flush)");
    gate.open.store(false, std::memory_order_release);
    gate.timed_out.store(false, std::memory_order_release);
    // Opens the gate on every path; after a failure also waits for the stream, so the host
    // function is done with the gate before it is used again.
    struct Opener {
      StreamGate& gate;
      cudaStream_t stream;
      bool done = false;
      ~Opener() {
        gate.open.store(true, std::memory_order_release);
        if (!done) cudaStreamSynchronize(stream);
      }
    } opener{gate, stream.get()};
    check(cudaLaunchHostFunc(stream.get(), &StreamGate::wait, &gate), "cudaLaunchHostFunc");
    check(cudaEventRecord(start.get(), stream.get()), "cudaEventRecord");
    r.enqueue(stream.get());
    check(cudaEventRecord(stop.get(), stream.get()), "cudaEventRecord");
    gate.open.store(true, std::memory_order_release);
    const double seconds = cuda::elapsed_seconds(start, stop);
    opener.done = true;
    if (gate.timed_out.load(std::memory_order_acquire))
      throw std::runtime_error("the stream was held for 10 s without the timed work enqueued: did DeviceRun::enqueue synchronise?");
    return seconds;
  }

  L2Mode mode;
  cuda::Stream stream;
  cuda::Event start, stop;
  cuda::DeviceBuffer flush;
  StreamGate gate;
  std::unique_ptr<DeviceRun> run;
  const Implementation* run_implementation = nullptr;
  Problem run_problem;
};

GpuTimer::GpuTimer(L2Mode mode) : resources_(std::make_unique<Resources>(mode)) {}

GpuTimer::~GpuTimer() = default;

void GpuTimer::release() {
  resources_->run.reset();
  resources_->run_implementation = nullptr;
}

std::string GpuTimer::method() const {
  std::string l2 = resources_->mode == L2Mode::cold
                       ? fmt::format("L2 cold: a {:.0f} MiB cudaMemsetAsync on the same stream before each iteration, outside the events",
                                     static_cast<double>(resources_->flush.bytes()) / (1 << 20))
                       : "L2 hot: nothing between iterations";
  return fmt::format("CUDA events around one DeviceRun::enqueue per iteration on a dedicated stream (Google Benchmark manual time); "
                     "{} enqueues and an output check before timing; the stream is held until the work is enqueued (launch latency "
                     "not timed); {}",
                     warmup_enqueues, l2);
}

std::string GpuTimer::try_once(const FamilySpec& family, std::int64_t n) {
  try {
    resources_->warm_up(resources_->prepared(family, family.problem(n)));
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

void GpuTimer::run(benchmark::State& state, const FamilySpec& family, double roofline_gflops) {
  const Implementation& impl = *family.implementation;
  const std::int64_t n = state.range(0);
  const Problem p = family.problem(n);
  auto fail = [&](const std::string& what) { state.SkipWithError(fmt::format("{}: {}", impl.name(), what).c_str()); };

  DeviceRun* r = nullptr;
  try {
    r = &resources_->prepared(family, p);
    resources_->warm_up(*r);  // untimed; an unwritten or non-finite output throws
  } catch (const std::exception& e) {
    fail(fmt::format("n={}: {}", n, e.what()));
    return;
  }
  double seconds = 0;
  for (auto _ : state) {
    try {
      const double t = resources_->time_once(*r);
      state.SetIterationTime(t);
      seconds += t;
    } catch (const std::exception& e) {
      fail(e.what());
      break;
    }
  }
  if (state.error_occurred()) return;

  // Rates over the summed event times (what Google Benchmark reports as the manual time).
  using benchmark::Counter;
  const double iterations = static_cast<double>(state.iterations());
  const double per_second = seconds > 0 ? iterations / seconds : 0;
  state.counters["gflops_exact"] = p.flops() * per_second / 1e9;
  state.counters["gflops_published"] = p.flops_published() * per_second / 1e9;
  state.counters["gbytes_per_second"] = p.bytes_min() * per_second / 1e9;
  if (roofline_gflops > 0) state.counters["peak_fraction"] = p.flops() * per_second / (roofline_gflops * 1e9);
  state.counters["workspace_bytes"] = Counter(static_cast<double>(r->workspace_bytes()), Counter::kDefaults, Counter::kIs1024);
  state.SetComplexityN(n);
}

}  // namespace attn::bench

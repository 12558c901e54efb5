#pragma once
// The benchmark bodies of the CPU families and of implementations that time themselves (a
// plugin, in its worker): inputs generated once per problem, a checked untimed warm-up (an
// unwritten or non-finite output is the benchmark's error, never a fast time), then the timed
// loop and the counters. The GPU families' body is GpuTimer::run (gpu_timing.hpp).
#include <memory>
#include <string>

#include "benchmarks/gpu_timing.hpp"
#include "benchmarks/problem_list.hpp"
#include "core/inputs.hpp"

namespace benchmark {
class State;
}

namespace attn::bench {

// Families whose iteration times are set by hand (SetIterationTime): the GPU's events, or an
// implementation that times itself.
bool uses_manual_time(const Implementation& impl);

// One problem's inputs and output, generated once and kept while its benchmark runs (Google
// Benchmark calls a body several times while it settles the iteration count).
// A backward problem's too: dO, the forward's LSE (its O in `out`) and the gradients.
struct Fixture {
  explicit Fixture(const Problem& p);
  Problem problem;
  CaseInputs inputs;
  Tensor out;
  Tensor d_o, lse;
  Gradients gradients;
};

struct Environment {
  int threads = 1;
  double roofline_gflops = 0;
  std::unique_ptr<Fixture> fixture;
  std::unique_ptr<GpuTimer> gpu;  // when a GPU family runs
  Fixture& fixture_for(const Problem& p);
};

// One untimed call of a family's size n (its forward first when it times the backward), buffers
// included; returns the failure, or an empty string.
std::string try_once(const FamilySpec& family, std::int64_t n, Environment& env);

// The body of one size of a CPU family (any pass: a backward is fed the O and LSE of a forward run
// before the timing): wall-clock time, counters gflops_exact,
// gflops_published, gbytes_per_second, peak_fraction, workspace_bytes, rss_growth_bytes.
void run_benchmark(benchmark::State& state, const FamilySpec& family, Environment& env);
// The body for an implementation that times itself: each iteration's manual time is one call's
// time as the implementation measured it, fetched in batches.
void run_self_timed_benchmark(benchmark::State& state, const FamilySpec& family, Environment& env);

}  // namespace attn::bench

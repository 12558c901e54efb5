#include "benchmarks/bench_bodies.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "benchmarks/device_plan.hpp"
#include "benchmarks/memory_probe.hpp"

namespace attn::bench {

bool uses_manual_time(const Implementation& impl) { return runs_on_gpu(impl) || impl.times_itself(); }

Fixture::Fixture(const Problem& p) : problem(p), inputs(generate_inputs(p)), out(make_output(p)) {
  if (p.operation != Operation::backward) return;
  d_o = generate_d_o(p);
  lse = make_lse(p);
  gradients = make_gradients(p);
}

Fixture& Environment::fixture_for(const Problem& p) {
  if (!fixture || !(fixture->problem == p)) {
    fixture.reset();  // free the previous problem's buffers first
    fixture = std::make_unique<Fixture>(p);
  }
  return *fixture;
}

namespace {

// The first output element left poisoned or not finite, or -1. A kernel that skips work must
// not be timed as fast.
std::int64_t first_bad_output(const Tensor& out) {
  for (std::int64_t i = 0; i < out.numel(); ++i)
    if (out.is_poisoned(i) || !std::isfinite(out.get(i))) return i;
  return -1;
}

// Runs once and checks the output; returns the failure, or an empty string.
std::string run_checked(const Implementation& impl, const RunArgs& args) {
  Tensor& out = args.tensors.required_output(Role::o);
  out.poison();
  try {
    impl.run(args);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "run threw something that is not a std::exception";
  }
  if (const std::int64_t bad = first_bad_output(out); bad >= 0)
    return fmt::format("output element {} is unwritten or not finite after the run", bad);
  return {};
}

// A family's timed call on a fixture: the forward, the backward (fed the fixture's O and LSE),
// or both. A backward's forward problem is the same problem as a forward pass.
struct PassCall {
  const Implementation& impl;
  Pass pass;
  Problem forward;
  RunArgs forward_args, backward_args;
  PassCall(const Implementation& impl, Pass pass, Fixture& f, std::span<std::byte> workspace, int threads, bool returns_lse)
      : impl(impl),
        pass(pass),
        forward(f.problem.with_operation(Operation::forward)),
        forward_args{forward, f.inputs, RoleTensors::forward(f.inputs, f.out, returns_lse && pass != Pass::forward ? &f.lse : nullptr), workspace,
                     threads},
        backward_args{f.problem, f.inputs,
                      pass == Pass::forward ? RoleTensors{}
                                            : RoleTensors::backward(f.inputs, f.d_o, f.gradients.dq, f.gradients.dk, f.gradients.dv, &f.out,
                                                                    returns_lse ? &f.lse : nullptr),
                      workspace, threads} {}
  void operator()() const {
    if (pass != Pass::backward) impl.run(forward_args);
    if (pass != Pass::forward) impl.run(backward_args);
  }
};

// The forward first (untimed, checked: the backward's O and LSE), then one call, checked: every
// output it writes written and finite. Returns the failure, or an empty string.
std::string run_pass_checked(const PassCall& call, Fixture& f) {
  if (call.pass == Pass::forward) return run_checked(call.impl, call.forward_args);
  if (std::string error = run_checked(call.impl, call.forward_args); !error.empty()) return "its forward, for the backward's O and LSE: " + error;
  for (Role role : {Role::dq, Role::dk, Role::dv}) f.gradients.of(role).poison();
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  for (Role role : {Role::dq, Role::dk, Role::dv})
    if (const std::int64_t bad = first_bad_output(f.gradients.of(role)); bad >= 0)
      return fmt::format("{} element {} is unwritten or not finite after the backward", to_string(role), bad);
  return {};
}

}  // namespace

std::string try_once(const FamilySpec& family, std::int64_t n, Environment& env) {
  try {
    const Problem p = family.problem(n);
    Fixture& fixture = env.fixture_for(p);
    PageBuffer workspace(family.workspace_bytes(n));
    const PassCall call(*family.implementation, family.pass, fixture, workspace.span(), env.threads, family.implementation->describe().returns_lse);
    return run_pass_checked(call, fixture);
  } catch (const std::exception& e) {
    return e.what();
  }
}

void run_benchmark(benchmark::State& state, const FamilySpec& family, Environment& env) {
  const Implementation& impl = *family.implementation;
  const std::int64_t n = state.range(0);
  const Problem p = family.problem(n);
  auto fail = [&](const std::string& what) { state.SkipWithError(fmt::format("{}: {}", impl.name(), what).c_str()); };

  Fixture* fixture = nullptr;
  std::optional<PageBuffer> workspace;
  std::size_t workspace_bytes = 0;
  try {
    fixture = &env.fixture_for(p);
    workspace_bytes = family.workspace_bytes(n);
    workspace.emplace(workspace_bytes);  // fresh pages: resident growth counts what run() touches
  } catch (const std::exception& e) {
    fail(fmt::format("setting up n={}: {}", n, e.what()));
    return;
  }
  const PassCall call(impl, family.pass, *fixture, workspace->span(), env.threads, impl.describe().returns_lse);

  MemoryProbe memory;
  memory.start();
  if (const std::string error = run_pass_checked(call, *fixture); !error.empty()) {  // warm-up, untimed, checked
    fail(error);
    return;
  }
  for (auto _ : state) {
    try {
      call();
    } catch (const std::exception& e) {
      fail(e.what());
      break;
    } catch (...) {
      fail("run threw something that is not a std::exception");
      break;
    }
  }
  if (state.error_occurred()) return;
  const double rss_growth = static_cast<double>(memory.growth_bytes());

  using benchmark::Counter;
  const double iterations = static_cast<double>(state.iterations());
  // Rates divide by the real time (UseRealTime): values are GFLOP, GB and roofline-seconds.
  state.counters["gflops_exact"] = Counter(family.flops(n) * iterations / 1e9, Counter::kIsRate);
  state.counters["gflops_published"] = Counter(family.flops_published(n) * iterations / 1e9, Counter::kIsRate);
  state.counters["gbytes_per_second"] = Counter(family.bytes_min(n) * iterations / 1e9, Counter::kIsRate);
  if (env.roofline_gflops > 0)
    state.counters["peak_fraction"] = Counter(family.flops(n) * iterations / (env.roofline_gflops * 1e9), Counter::kIsRate);
  state.counters["workspace_bytes"] = Counter(static_cast<double>(workspace_bytes), Counter::kDefaults, Counter::kIs1024);
  state.counters["rss_growth_bytes"] = Counter(rss_growth, Counter::kDefaults, Counter::kIs1024);
  state.SetComplexityN(n);
}

// Fetched in batches, so the messages and copies around the calls are never counted.
void run_self_timed_benchmark(benchmark::State& state, const FamilySpec& family, Environment& env) {
  const Implementation& impl = *family.implementation;
  const std::int64_t n = state.range(0);
  const Problem p = family.problem(n);
  auto fail = [&](const std::string& what) { state.SkipWithError(fmt::format("{}: {}", impl.name(), what).c_str()); };
  Fixture* fixture = nullptr;
  try {
    fixture = &env.fixture_for(p);
  } catch (const std::exception& e) {
    fail(fmt::format("setting up n={}: {}", n, e.what()));
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  if (const std::string error = run_checked(impl, {p, fixture->inputs, RoleTensors::forward(fixture->inputs, fixture->out), {}, env.threads}); !error.empty()) {
    fail(error);  // the warm-up, untimed, checked
    return;
  }
  // Batches of about 0.1 s of calls (1 to 64): few round trips, little work past what Google
  // Benchmark asks for.
  const double once = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int batch = int(std::clamp(0.1 / std::max(once, 1e-9), 1.0, 64.0));
  std::vector<double> times;
  std::size_t next = 0;
  for (auto _ : state) {
    if (next == times.size()) {
      try {
        times = impl.timed_runs(p, fixture->inputs, 0, batch);
      } catch (const std::exception& e) {
        fail(e.what());
        break;
      }
      next = 0;
      if (times.empty()) {
        fail("timed_runs returned no times");
        break;
      }
    }
    state.SetIterationTime(times[next++]);
  }
  if (state.error_occurred()) return;
  using benchmark::Counter;
  const double iterations = static_cast<double>(state.iterations());
  state.counters["gflops_exact"] = Counter(p.flops() * iterations / 1e9, Counter::kIsRate);
  state.counters["gflops_published"] = Counter(p.flops_published() * iterations / 1e9, Counter::kIsRate);
  state.counters["gbytes_per_second"] = Counter(p.bytes_min() * iterations / 1e9, Counter::kIsRate);
  if (env.roofline_gflops > 0 && impl.describe().device != "cuda")  // the host's roofline says nothing of a device
    state.counters["peak_fraction"] = Counter(p.flops() * iterations / (env.roofline_gflops * 1e9), Counter::kIsRate);
  state.counters["workspace_bytes"] = Counter(0, Counter::kDefaults, Counter::kIs1024);
  state.SetComplexityN(n);
}

}  // namespace attn::bench

// `attnbench bench` (bench.hpp): checks the options, measures the machine's (and the GPU's)
// peaks, registers the families, runs them through the collecting reporter, prints the summary,
// fits and peers, and writes the typed result file (records/bench_record.hpp). The bodies, the
// reporter, the per-family results and console, and the filter are in the bench_*.cpp beside it.
#include "benchmarks/bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "benchmarks/bench_bodies.hpp"
#include "benchmarks/bench_filter.hpp"
#include "benchmarks/bench_reporter.hpp"
#include "benchmarks/bench_results.hpp"
#include "benchmarks/device_plan.hpp"
#include "benchmarks/gpu_peaks.hpp"
#include "benchmarks/gpu_timing.hpp"
#include "benchmarks/machine_load.hpp"
#include "benchmarks/machine_peaks.hpp"
#include "benchmarks/memory_probe.hpp"
#include "benchmarks/peer_comparison.hpp"
#include "benchmarks/problem_list.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/result_file.hpp"
#include "records/bench_record.hpp"

namespace attn::bench {
namespace {

// The device and the GPU peaks in Google Benchmark's context (strings, as it keeps them).
void add_gpu_context(CustomContext& context, const DeviceStatus& d, const GpuRun& g) {
  context.add("gpu_name", d.name);
  context.add("gpu_compute_capability", fmt::format("{}.{}", d.sm_major, d.sm_minor));
  context.add("gpu_sm_count", std::to_string(d.multiprocessors));
  context.add("gpu_max_sm_clock_mhz", fmt::format("{:.0f}", d.sm_clock_mhz));
  context.add("gpu_memory_clock_mhz", fmt::format("{:.0f}", d.memory_clock_mhz));
  context.add("gpu_memory_gib", fmt::format("{:.1f}", d.memory_gib));
  context.add("gpu_l2_bytes", std::to_string(d.l2_bytes));
  context.add("cuda_driver_version", std::to_string(d.driver_version));
  context.add("cuda_runtime_version", std::to_string(d.runtime_version));
  context.add("gpu_l2_mode", to_string(g.l2));
  if (!g.timing.empty()) context.add("gpu_timing", g.timing);
  if (g.peaks) {
    for (const auto& gemm : g.peaks->gemm) {
      context.add(fmt::format("gpu_peak_gemm_{}_gflops", gemm.precision.name()), fmt::format("{:.2f}", gemm.gflops));
      context.add(fmt::format("gpu_peak_gemm_{}_method", gemm.precision.name()), gemm.method);
    }
    context.add("gpu_peak_copy_gbytes_per_second", fmt::format("{:.2f}", g.peaks->copy_gbytes_per_second));
    context.add("gpu_peak_copy_method", g.peaks->copy_method);
  }
}

// Context keys Google Benchmark writes itself; ours must not repeat them.
const std::set<std::string> benchmark_context_keys{"date", "host_name", "executable", "num_cpus", "mhz_per_cpu", "cpu_scaling_enabled",
                                                   "caches", "load_avg", "library_build_type", "json_schema_version"};

void prepare_json_path(const std::string& path) {
  if (path.empty()) return;
  prepare_result_path(path, "--json");
  write_result_file(path, "", "--json");  // an earlier run's results must not pass for this one's
}

}  // namespace

int run_bench(const BenchOptions& o, const std::vector<BenchObserver*>& observers) {
  // Everything that can be bad input is checked before anything runs or is written.
  if (o.implementations.empty()) throw InputError("no implementations to benchmark");
  if (o.threads < 0) throw InputError("--threads must be positive (0: every core)");
  if (o.naive_max_n < 1) throw InputError("--naive-max-n must be positive");
  if (o.fit_min_n < 1) throw InputError("--fit-min-n must be positive");
  const L2Mode l2 = parse_l2_mode(o.l2);
  // GPU implementations run only where a device is; elsewhere they are skipped, saying why (the
  // device is queried only when one was asked for).
  const bool wants_gpu = std::any_of(o.implementations.begin(), o.implementations.end(),
                                     [](const Implementation* impl) { return runs_on_gpu(*impl); });
  const DeviceStatus device = wants_gpu ? gpu_device_info() : DeviceStatus{};
  const DevicePlan devices = plan_devices(o.implementations, device);
  ProblemListOptions plo;
  for (const auto& d : o.dtypes) plo.dtypes.push_back(parse_dtype(d));
  plo.masks.clear();
  for (const auto& m : o.masks) {
    const FamilyMask mask = parse_mask(m);
    if (std::find(plo.masks.begin(), plo.masks.end(), mask) == plo.masks.end()) plo.masks.push_back(mask);
  }
  plo.head_dims = o.head_dims;
  plo.batch = o.batch;
  plo.heads = o.heads;
  plo.min_n = o.min_n;
  plo.max_n = o.max_n;
  plo.max_n_for["cpu_naive"] = o.naive_max_n;
  plo.smoke = o.smoke;
  plo.gpu_variant = "l2_" + to_string(l2);
  plo.passes.clear();
  for (const auto& pass : o.passes)
    if (const Pass parsed = parse_pass(pass); std::find(plo.passes.begin(), plo.passes.end(), parsed) == plo.passes.end()) plo.passes.push_back(parsed);
  if (plo.passes.empty()) throw InputError("no pass to benchmark (--pass forward, backward or forward_backward)");
  ProblemList list = curated_problem_list(devices.runnable, plo);  // also checks the options
  if (o.shard) {
    // --shard I/N: family at position p of the list runs in shard p % N + 1, so a family's whole
    // n-sweep and its complexity fit stay in one shard.
    const Shard& shard = *o.shard;
    if (shard.count < 1 || shard.index < 1 || shard.index > shard.count)
      throw InputError(fmt::format("--shard {}/{}: expected 1 <= I <= N", shard.index, shard.count));
    const std::size_t total = list.families.size();
    std::vector<FamilySpec> kept;
    for (const std::size_t position : shard_positions(total, shard)) kept.push_back(list.families[position]);
    list.families = std::move(kept);
    list.notes.push_back(fmt::format("shard {}/{}: {} of the {} families", shard.index, shard.count, list.families.size(), total));
  }
  const std::int64_t fit_min_n = o.smoke ? 1 : o.fit_min_n;
  const int threads = o.threads > 0 ? o.threads : default_thread_count();
  std::optional<PeersPlan> peers_plan;
  if (o.peers_command) peers_plan = plan_peers(o, threads, list.families);
  initialise_benchmark_library(o.benchmark_flags, o.smoke);

  // Only GPU implementations were asked for, and there is no device: nothing runs, no JSON is
  // written. A smoke run (CI on a machine without a GPU) passes; a real run fails, saying why.
  if (devices.runnable.empty()) {
    fmt::print("attnbench bench: nothing to run: {}\n", fmt::join(devices.skipped, "; "));
    if (!o.smoke) fmt::print("(exit 1: the implementations asked for need a CUDA device; with --smoke this exits 0)\n");
    return o.smoke ? 0 : 1;
  }
  // The peers script writes its own file beside ours: the same rule, checked before anything
  // runs or our file is emptied.
  if (peers_plan && !peers_plan->out_path.empty()) prepare_result_path(peers_plan->out_path, "peers output");
  prepare_json_path(o.json_path);

  Environment env;
  env.threads = threads;

  // Machine peaks, before the families, on the threads the implementations get.
  PeakSettings peak_settings;
  peak_settings.threads = env.threads;
  if (o.smoke) {
    peak_settings.seconds = 0.02;
    peak_settings.repetitions = 1;
    peak_settings.sgemm_size = 128;
  }
  fmt::print("attnbench bench: measuring machine peaks on {} thread(s)...\n", env.threads);
  std::fflush(stdout);
  // What else runs on the machine, first on its own (we are idle for a quarter second), then
  // over the whole run: a loaded machine's timings are reported as such.
  const std::optional<CpuSample> run_start = sample_cpu();
  std::optional<MachineLoad> load_before;
  if (run_start) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    if (const auto now = sample_cpu()) load_before = load_between(*run_start, *now);
  }
  if (load_before) fmt::print("  before the run, {}\n", load_before->describe());
  const PeakMeasurement fma = measure_fma_peak(peak_settings);
  const PeakMeasurement sgemm = measure_sgemm_peak(peak_settings);
  // The FMA rate is the ceiling: no floating-point kernel on these cores can beat it. The SGEMM
  // rate is a reference point (what a tuned library reaches), not a ceiling: a kernel may pass it.
  env.roofline_gflops = fma.gflops;
  fmt::print("  fp32 FMA peak: {:8.1f} GFLOP/s  ({})\n", fma.gflops, fma.method);
  fmt::print("  Eigen SGEMM:   {:8.1f} GFLOP/s  ({}; a reference point, not a ceiling)\n", sgemm.gflops, sgemm.method);
  fmt::print("  \"of peak\" = exact-convention GFLOP/s / the FMA peak ({:.1f} GFLOP/s)\n", env.roofline_gflops);

  // GPU peaks, when a GPU family is to run: the cuBLAS GEMM rate of each of their dtypes (each
  // family's roofline) and the device-to-device copy bandwidth.
  GpuRun gpu_run;
  gpu_run.l2 = l2;
  for (const FamilySpec& family : list.families) {
    if (!runs_on_gpu(*family.implementation) || !filter_selects(family, o.smoke)) continue;
    const GemmPrecision precision = roofline_precision(*family.implementation, family.dtype);
    if (std::find(gpu_run.precisions.begin(), gpu_run.precisions.end(), precision) == gpu_run.precisions.end())
      gpu_run.precisions.push_back(precision);
  }
  if (!gpu_run.precisions.empty()) {
    fmt::print("attnbench bench: measuring GPU peaks on {} ({} SMs, max SM clock {:.0f} MHz)...\n", device.name, device.multiprocessors,
               device.sm_clock_mhz);
    std::fflush(stdout);
    GpuPeakSettings gpu_settings;
    if (o.smoke) {
      gpu_settings.gemm_size = 1024;
      gpu_settings.copy_bytes = std::size_t{64} << 20;
      gpu_settings.warmup = 1;
      gpu_settings.repetitions = 2;
    }
    try {
      env.gpu = std::make_unique<GpuTimer>(l2);
      gpu_run.timing = env.gpu->method();
      gpu_run.peaks = measure_gpu_peaks(gpu_run.precisions, gpu_settings);
      for (const auto& g : gpu_run.peaks->gemm)
        fmt::print("  cuBLAS GEMM {:<4}: {:8.1f} GFLOP/s  ({})\n", g.precision.name(), g.gflops, g.method);
      fmt::print("  device copy:      {:8.1f} GB/s     ({})\n", gpu_run.peaks->copy_gbytes_per_second, gpu_run.peaks->copy_method);
      fmt::print("  GPU families: roofline = the GEMM rate of their dtype (tf32 where the implementation multiplies f32 in TF32); {}\n",
                 gpu_run.timing);
    } catch (const std::exception& e) {
      gpu_run.errors.push_back(fmt::format("GPU setup: {}", e.what()));
      fmt::print("  GPU setup failed: {}\n", e.what());
      if (!env.gpu) fmt::print("  the GPU families are not run\n");
    }
  }
  const std::string rss_method = MemoryProbe().method();
  for (const auto& note : devices.skipped) fmt::print("  note: {}\n", note);
  for (const auto& note : list.notes) fmt::print("  note: {}\n", note);
  fmt::print("\n");
  std::fflush(stdout);

  CustomContext custom;
  for (const auto& [key, value] : o.context.items())
    if (!benchmark_context_keys.count(key)) custom.add(key, value.is_string() ? value.get<std::string>() : value.dump());
  custom.add("native_flags", ATTN_BENCH_NATIVE ? "-march=native (ATTN_NATIVE=ON: CPU kernels and peak probes)" : "none (ATTN_NATIVE=OFF)");
  custom.add("peak_fma_gflops", fmt::format("{:.2f}", fma.gflops));
  custom.add("peak_fma_method", fma.method);
  custom.add("peak_sgemm_gflops", fmt::format("{:.2f}", sgemm.gflops));
  custom.add("peak_sgemm_method", sgemm.method);
  custom.add("roofline_gflops", fmt::format("{:.2f}", env.roofline_gflops));
  custom.add("rss_growth_method", rss_method);
  custom.add("problem_list", fmt::format("b={} h={} n_q=n_k=n (powers of two), diffuse inputs, seed 1{}", o.batch,
                                                          o.heads, o.smoke ? ", smoke: n=16..64, one iteration" : ""));
  if (devices.gpu) add_gpu_context(custom, device, gpu_run);

  benchmark::ClearRegisteredBenchmarks();
  for (const FamilySpec& family : list.families) {
    const bool gpu = runs_on_gpu(*family.implementation);
    if (gpu && !env.gpu) continue;  // the GPU could not be set up: reported as an error
    benchmark::internal::Benchmark* b = nullptr;
    if (gpu) {
      const double roofline = gpu_run.peaks ? gpu_run.peaks->gemm_gflops(roofline_precision(*family.implementation, family.dtype)) : 0;
      b = benchmark::RegisterBenchmark(family.name().c_str(), [&env, &family, roofline](benchmark::State& state) {
        env.gpu->run(state, family, roofline);
      });
    } else if (family.implementation->times_itself()) {
      b = benchmark::RegisterBenchmark(family.name().c_str(),
                                       [&env, &family](benchmark::State& state) { run_self_timed_benchmark(state, family, env); });
    } else {
      b = benchmark::RegisterBenchmark(family.name().c_str(), [&env, &family](benchmark::State& state) { run_benchmark(state, family, env); });
    }
    b->ArgName("n");
    for (std::int64_t n : family.sizes) b->Arg(n);
    b->Unit(benchmark::kMillisecond);
    if (uses_manual_time(*family.implementation))
      b->UseManualTime();
    else
      b->UseRealTime();
    if (o.smoke) b->Iterations(1);
    // Google Benchmark 1.7.1 crashes computing the complexity of a family none of whose runs
    // succeeded, so a family whose smallest problem already fails (it still runs, and reports
    // each error) gets no O(n^2) fit. Families the filter leaves out are not tried.
    if (!filter_selects(family, o.smoke)) continue;
    const std::string error = gpu ? env.gpu->try_once(family, family.sizes.front())
                                  : try_once(family, family.sizes.front(), env);
    if (error.empty())
      b->Complexity(benchmark::oNSquared);
    else
      fmt::print("  note: {}: no O(n^2) fit, its first run failed: {}\n", family.name(), error);
  }
  env.fixture.reset();
  if (env.gpu) env.gpu->release();
  std::fflush(stdout);

  // The result file is rewritten after every benchmark: a run that dies keeps what finished.
  std::vector<std::string> notes = devices.skipped;
  notes.insert(notes.end(), list.notes.begin(), list.notes.end());
  BenchDocument document;
  document.shard = o.shard;
  document.attnbench.context = o.context;
  document.attnbench.notes = notes;
  document.attnbench.peaks = {fma.gflops, sgemm.gflops, env.roofline_gflops, fma.method, sgemm.method, fma.gflops <= sgemm.gflops ? "fma" : "sgemm"};
  document.attnbench.rss_growth_method = rss_method;
  bool json_warned = false;
  std::size_t instances = 0;
  for (const FamilySpec& family : list.families) instances += selected_sizes(family, o.smoke);
  if (!o.json_path.empty()) write_result_file(o.json_path, to_json(document).dump(2) + "\n", "--json");  // valid before the first benchmark
  for (BenchObserver* observer : observers) observer->started(instances);
  CollectingReporter reporter(
      custom,
      [&](const CollectingReporter& collected, const std::string& name) {
        document.benchmark_context = collected.context();
        document.runs = collected.runs();
        // The path was checked before the run; should it go bad now (a link, a device, a full
        // disk), the run goes on and the last write says where its results went.
        if (!o.json_path.empty()) try {
            write_result_file(o.json_path, to_json(document).dump(2) + "\n", "--json");
          } catch (const InputError& e) {
            if (!std::exchange(json_warned, true))
              fmt::print(stderr, "attnbench bench: warning: {} (the run goes on; its results are saved at the end)\n", e.what());
          }
        if (!name.empty())
          for (BenchObserver* observer : observers) observer->benchmark_finished(name, document);
      },
      observers);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  document.benchmark_context = reporter.context();
  document.runs = reporter.runs();
  for (BenchObserver* observer : observers) observer->benchmarks_finished(document);
  benchmark::ClearRegisteredBenchmarks();
  env.fixture.reset();
  env.gpu.reset();  // frees the device memory before the peers run

  std::optional<MachineLoad> load_during;
  if (run_start)
    if (const auto now = sample_cpu()) load_during = load_between(*run_start, *now);
  if (load_during) {
    notes.push_back(fmt::format("during the run, {}", load_during->describe()));
    fmt::print("\n{}{}\n", load_during->loaded() ? "WARNING: " : "", notes.back());
  }
  const auto results = collect(list.families, reporter.runs(), fit_min_n);
  print_table(results, gpu_run);
  print_fits(results, fit_min_n);
  std::size_t error_count = gpu_run.errors.size();
  for (const auto& r : results) error_count += r.errors.size();

  // The peers, after ours, on the same problem list and threads; compared with our medians.
  std::optional<PeersOutcome> peers;
  if (peers_plan) {
    std::vector<OurTime> ours;
    for (const auto& r : results)
      for (const auto& row : r.rows)
        if (row.time_ms > 0)
          ours.push_back({std::string(r.family->implementation->name()),
                          r.family->mask_name() + (r.family->pass == Pass::forward ? "" : "/" + std::string(to_string(r.family->pass))),
                          r.family->peer_mask(), row.n, row.time_ms,
                          std::string(to_string(r.family->dtype)), r.family->head_dim});
    peers = run_peers(*peers_plan, ours);
  }

  if (!o.json_path.empty()) {
    BenchSection& section = document.attnbench;
    section.complete = true;
    section.notes = notes;
    for (const auto& r : results) {
      if (auto fit = to_bench_fit(r, fit_min_n)) section.fits.push_back(std::move(*fit));
      section.errors.insert(section.errors.end(), r.errors.begin(), r.errors.end());
    }
    section.errors.insert(section.errors.end(), gpu_run.errors.begin(), gpu_run.errors.end());
    if (load_during)
      section.machine_load = {{"cores", load_during->cores},
                              {"others_cores_before", load_before ? nlohmann::json(load_before->others_cores) : nlohmann::json(nullptr)},
                              {"others_cores_during", load_during->others_cores},
                              {"seconds", load_during->seconds},
                              {"loaded", load_during->loaded() || (load_before && load_before->loaded())}};
    if (wants_gpu) section.gpu = gpu_section(device, gpu_run, devices.skipped);
    if (peers) section.peers = peers->section;
    document.benchmark_context = reporter.context();
    document.runs = reporter.runs();
    const std::string text = to_json(document).dump(2) + "\n";
    try {
      write_result_file(o.json_path, text, "--json");
    } catch (const InputError& e) {
      const std::string rescue = write_rescue_file(o.json_path, text);
      if (rescue.empty()) throw InputError(fmt::format("{}; the results could not be saved anywhere else either", e.what()));
      throw InputError(fmt::format("{}; the results were saved to {} instead", e.what(), rescue));
    }
    fmt::print("\nresults: {}\n", o.json_path);
    if (peers && !peers->failed && peers->section["json"].is_string())
      fmt::print("peers: {}\n", peers->section["json"].get<std::string>());
  }
  for (const auto& note : devices.skipped) fmt::print("\nnote: {} (not an error)\n", note);
  if (peers && peers->unavailable) fmt::print("\nnote: peer unavailable: {} (exit code unaffected)\n", peers->unavailable_reason);
  if (peers && !peers->failed && !peers->invalid_peers.empty())
    fmt::print("\nnote: {} failed the peers' own correctness checks: marked invalid, never the target (exit code unaffected)\n",
               fmt::join(peers->invalid_peers, ", "));
  int rc = 0;
  if (error_count > 0) {
    fmt::print("\n{} benchmark(s) reported an error:\n", error_count);
    for (const auto& e : gpu_run.errors) fmt::print("  {}\n", e);
    for (const auto& r : results)
      for (const auto& e : r.errors) fmt::print("  {}\n", e);
    rc = 1;
  }
  if (peers && peers->failed) {
    fmt::print("\nthe peers command failed: {}\n(our results above are kept{})\n", peers->failure,
               o.json_path.empty() ? "" : fmt::format(" in {}", o.json_path));
    rc = 1;
  }
  return rc;
}

}  // namespace attn::bench

#include "benchmarks/bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "benchmarks/device_plan.hpp"
#include "benchmarks/gpu_peaks.hpp"
#include "benchmarks/gpu_timing.hpp"
#include "benchmarks/machine_load.hpp"
#include "benchmarks/machine_peaks.hpp"
#include "benchmarks/memory_probe.hpp"
#include "benchmarks/peer_comparison.hpp"
#include "benchmarks/problem_list.hpp"
#include "benchmarks/scaling_fit.hpp"
#include "core/error.hpp"
#include "core/inputs.hpp"
#include "core/parallel.hpp"
#include "core/result_file.hpp"

namespace attn::bench {
namespace {

// Families whose iteration times are set by hand (SetIterationTime): the GPU's events, or an
// implementation that times itself.
bool uses_manual_time(const Implementation& impl) { return runs_on_gpu(impl) || impl.times_itself(); }

constexpr double mib = 1024.0 * 1024.0;
constexpr std::int64_t workspace_probe_n = 16384;  // the memory target is stated at this n

// --- what the benchmark bodies share --------------------------------------------------------------

// One problem's inputs and output, generated once and kept while its benchmark runs (Google
// Benchmark calls a body several times while it settles the iteration count).
struct Fixture {
  explicit Fixture(const Problem& p) : problem(p), inputs(generate_inputs(p)), out(make_output(p)) {}
  Problem problem;
  CaseInputs inputs;
  Tensor out;
};

struct Environment {
  int threads = 1;
  double roofline_gflops = 0;
  std::unique_ptr<Fixture> fixture;
  std::unique_ptr<GpuTimer> gpu;  // when a GPU family runs

  Fixture& fixture_for(const Problem& p) {
    if (!fixture || !(fixture->problem == p)) {
      fixture.reset();  // free the previous problem's buffers first
      fixture = std::make_unique<Fixture>(p);
    }
    return *fixture;
  }
};

// What the GPU side of a run measured and how (only filled when a GPU family runs).
struct GpuRun {
  L2Mode l2 = L2Mode::cold;
  std::vector<GemmPrecision> precisions;  // of the GPU families the filter selects: the GEMM peaks measured
  std::optional<GpuPeaks> peaks;
  std::string timing;              // GpuTimer::method()
  std::vector<std::string> errors; // the GPU could not be set up, or its peaks not measured
};

// The device and the GPU peaks in Google Benchmark's context (strings, as it keeps them).
void add_gpu_context(const GpuDeviceInfo& d, const GpuRun& g) {
  benchmark::AddCustomContext("gpu_name", d.name);
  benchmark::AddCustomContext("gpu_compute_capability", fmt::format("{}.{}", d.sm_major, d.sm_minor));
  benchmark::AddCustomContext("gpu_sm_count", std::to_string(d.multiprocessors));
  benchmark::AddCustomContext("gpu_max_sm_clock_mhz", fmt::format("{:.0f}", d.sm_clock_mhz));
  benchmark::AddCustomContext("gpu_memory_clock_mhz", fmt::format("{:.0f}", d.memory_clock_mhz));
  benchmark::AddCustomContext("gpu_memory_gib", fmt::format("{:.1f}", d.memory_gib));
  benchmark::AddCustomContext("gpu_l2_bytes", std::to_string(d.l2_bytes));
  benchmark::AddCustomContext("cuda_driver_version", std::to_string(d.driver_version));
  benchmark::AddCustomContext("cuda_runtime_version", std::to_string(d.runtime_version));
  benchmark::AddCustomContext("gpu_l2_mode", to_string(g.l2));
  if (!g.timing.empty()) benchmark::AddCustomContext("gpu_timing", g.timing);
  if (g.peaks) {
    for (const auto& gemm : g.peaks->gemm) {
      benchmark::AddCustomContext(fmt::format("gpu_peak_gemm_{}_gflops", gemm.precision.name()), fmt::format("{:.2f}", gemm.gflops));
      benchmark::AddCustomContext(fmt::format("gpu_peak_gemm_{}_method", gemm.precision.name()), gemm.method);
    }
    benchmark::AddCustomContext("gpu_peak_copy_gbytes_per_second", fmt::format("{:.2f}", g.peaks->copy_gbytes_per_second));
    benchmark::AddCustomContext("gpu_peak_copy_method", g.peaks->copy_method);
  }
}

// The "gpu" entry of the attnbench section: the device (or why there is none), the L2 mode, the
// timing method, the peaks, the skipped implementations and any setup error.
nlohmann::json gpu_section(const GpuDeviceInfo& d, const GpuRun& g, const std::vector<std::string>& skipped) {
  return {{"device", to_json(d)},
          {"l2_mode", to_string(g.l2)},
          {"timing", g.timing.empty() ? nlohmann::json(nullptr) : nlohmann::json(g.timing)},
          {"peaks", g.peaks ? g.peaks->to_json() : nlohmann::json(nullptr)},
          {"roofline", "a GPU family's peak_fraction divides by the cuBLAS GEMM rate of its dtype (tf32 for f32 families whose "
                       "implementation multiplies in TF32)"},
          {"skipped", skipped},
          {"errors", g.errors}};
}

// The first output element left poisoned or not finite, or -1. A kernel that skips work must
// not be timed as fast.
std::int64_t first_bad_output(const Tensor& out) {
  for (std::int64_t i = 0; i < out.numel(); ++i)
    if (out.is_poisoned(i) || !std::isfinite(out.get(i))) return i;
  return -1;
}

// Runs once and checks the output; returns the failure, or an empty string.
std::string run_checked(const Implementation& impl, const RunArgs& args) {
  args.out.poison();
  try {
    impl.run(args);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "run threw something that is not a std::exception";
  }
  if (const std::int64_t bad = first_bad_output(args.out); bad >= 0)
    return fmt::format("output element {} is unwritten or not finite after the run", bad);
  return {};
}

// One untimed run of a problem, buffers included; returns the failure, or an empty string.
std::string try_once(const Implementation& impl, const Problem& p, Environment& env) {
  try {
    Fixture& fixture = env.fixture_for(p);
    PageBuffer workspace(impl.workspace_bytes(p));
    return run_checked(impl, {p, fixture.inputs, fixture.out, nullptr, nullptr, workspace.span(), env.threads});
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
    workspace_bytes = impl.workspace_bytes(p);
    workspace.emplace(workspace_bytes);  // fresh pages: resident growth counts what run() touches
  } catch (const std::exception& e) {
    fail(fmt::format("setting up n={}: {}", n, e.what()));
    return;
  }
  const RunArgs args{p, fixture->inputs, fixture->out, nullptr, nullptr, workspace->span(), env.threads};

  MemoryProbe memory;
  memory.start();
  if (const std::string error = run_checked(impl, args); !error.empty()) {  // warm-up, untimed, checked
    fail(error);
    return;
  }
  for (auto _ : state) {
    try {
      impl.run(args);
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
  state.counters["gflops_exact"] = Counter(p.flops() * iterations / 1e9, Counter::kIsRate);
  state.counters["gflops_published"] = Counter(p.flops_published() * iterations / 1e9, Counter::kIsRate);
  state.counters["gbytes_per_second"] = Counter(p.bytes_min() * iterations / 1e9, Counter::kIsRate);
  if (env.roofline_gflops > 0)
    state.counters["peak_fraction"] = Counter(p.flops() * iterations / (env.roofline_gflops * 1e9), Counter::kIsRate);
  state.counters["workspace_bytes"] = Counter(static_cast<double>(workspace_bytes), Counter::kDefaults, Counter::kIs1024);
  state.counters["rss_growth_bytes"] = Counter(rss_growth, Counter::kDefaults, Counter::kIs1024);
  state.SetComplexityN(n);
}

// An implementation that times itself (times_itself(): a plugin, in its worker process): each
// iteration's manual time is one call's time as the implementation measured it, fetched in
// batches, so the messages and copies around the calls are never counted.
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
  if (const std::string error = run_checked(impl, {p, fixture->inputs, fixture->out, nullptr, nullptr, {}, env.threads}); !error.empty()) {
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

// --- collecting what Google Benchmark reports ------------------------------------------------------

// Forwards everything to the display reporter Google Benchmark would have used (so
// --benchmark_format and --benchmark_color keep working) and keeps a copy of every run.
// CreateDefaultDisplayReporter returns the library's own process-wide instance: not ours to
// delete (deleting it breaks the next run in the same process).
//
// It also keeps Google Benchmark's own JSON (its JSONReporter, writing into memory) and, after
// every benchmark, hands the JSON so far to `on_json` (which rewrites the result file), so a run
// that dies keeps every benchmark that finished. The progress hooks (any may be empty) hear of
// each benchmark and of each console line before it is printed.
class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  CollectingReporter(std::function<void(const std::string&)> on_json, const ProgressHooks* progress)
      : inner_(benchmark::CreateDefaultDisplayReporter()), on_json_(std::move(on_json)), progress_(progress) {
    json_.SetOutputStream(&json_text_);
    json_.SetErrorStream(&json_errors_);
  }
  bool ReportContext(const Context& context) override {
    json_.ReportContext(context);
    // Debian's libbenchmark is compiled without NDEBUG, so its console reporter warns "Library
    // was built as DEBUG. Timings may be affected." That build leaves the library's internal
    // checks on, which run between timed batches; the timed loop is inlined from the library's
    // headers into this build (compiler_flags). The warning is replaced by what it means here.
    // The console reporter prints the context on its error stream.
    std::ostream& out = inner_->GetErrorStream();
    std::ostringstream text;
    inner_->SetErrorStream(&text);
    const bool ok = inner_->ReportContext(context);
    inner_->SetErrorStream(&out);
    std::istringstream lines(text.str());
    for (std::string line; std::getline(lines, line);) {
      if (line.find("Library was built as DEBUG") != std::string::npos)
        line = "note: Google Benchmark's library (Debian's package) was built without NDEBUG; its checks run between timed batches, "
               "while the timed loop and the kernels are this build's (compiler_flags above): the timings are not a debug build's";
      out << line << '\n';
    }
    out.flush();
    return ok;
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    runs_.insert(runs_.end(), runs.begin(), runs.end());
    if (progress_ && progress_->before_line) progress_->before_line();
    inner_->ReportRuns(runs);
    json_.ReportRuns(runs);
    if (on_json_) on_json_(json_text_.str() + "\n  ]\n}\n");  // the JSONReporter's Finalize closes the array and object
    if (progress_ && progress_->step && !runs.empty()) progress_->step(runs.front().benchmark_name());
  }
  void Finalize() override {
    if (progress_ && progress_->end) progress_->end();
    inner_->Finalize();
    json_.Finalize();
  }
  const std::vector<Run>& runs() const { return runs_; }
  // Google Benchmark's JSON document as its file reporter would have written it.
  std::string json_text() const { return json_text_.str(); }

 private:
  benchmark::BenchmarkReporter* inner_;
  benchmark::JSONReporter json_;
  std::ostringstream json_text_, json_errors_;
  std::function<void(const std::string&)> on_json_;
  const ProgressHooks* progress_;
  std::vector<Run> runs_;
};

using Run = benchmark::BenchmarkReporter::Run;

struct Row {  // one n of one family, as the summary table shows it
  std::int64_t n = 0;
  double time_ms = 0;
  std::map<std::string, double> counters;
};

struct FamilyResult {
  const FamilySpec* family = nullptr;
  std::vector<Row> rows;  // ascending n
  std::optional<PowerLawFit> fit;
  std::optional<double> bigo_coefficient_ms, bigo_rms;
  std::vector<std::string> errors;
};

double to_ms(const Run& run) {
  const double t = run.GetAdjustedRealTime();
  switch (run.time_unit) {
    case benchmark::kNanosecond: return t / 1e6;
    case benchmark::kMicrosecond: return t / 1e3;
    case benchmark::kMillisecond: return t;
    case benchmark::kSecond: return t * 1e3;
  }
  return t;
}

// The n of a run: its "n:N" argument (Benchmark::ArgName("n")).
std::int64_t size_argument(const Run& run) {
  const std::string& args = run.run_name.args;
  const auto at = args.find("n:");
  return at == std::string::npos ? run.complexity_n : std::stoll(args.substr(at + 2));
}

std::vector<FamilyResult> collect(const std::vector<FamilySpec>& families, const std::vector<Run>& runs, std::int64_t fit_min_n) {
  std::vector<FamilyResult> results;
  std::map<std::string, std::size_t> index;
  for (const auto& f : families) {
    index[f.name()] = results.size();
    results.push_back({&f, {}, {}, {}, {}, {}});
  }
  // Repetitions (--benchmark_repetitions) give several runs of one n: the median time counts.
  std::map<std::pair<std::size_t, std::int64_t>, std::vector<const Run*>> by_n;
  for (const Run& run : runs) {
    const auto it = index.find(run.run_name.function_name);
    if (it == index.end()) continue;
    FamilyResult& r = results[it->second];
    if (run.error_occurred) {
      r.errors.push_back(fmt::format("{}: {}", run.benchmark_name(), run.error_message));
    } else if (run.report_big_o) {
      r.bigo_coefficient_ms = to_ms(run);
    } else if (run.report_rms) {
      r.bigo_rms = run.GetAdjustedRealTime();  // RMS is relative: the time unit does not apply
    } else if (run.run_type == Run::RT_Iteration || run.aggregate_name == "median") {
      // Aggregates (with --benchmark_repetitions) carry complexity_n = 0: n comes from the
      // name's "n:N" argument, which every run of a family has.
      by_n[{it->second, size_argument(run)}].push_back(&run);
    }
  }
  for (auto& [key, group] : by_n) {
    // Prefer iteration runs; a median aggregate stands in when only aggregates were reported.
    std::vector<const Run*> iterations;
    for (const Run* r : group)
      if (r->run_type == Run::RT_Iteration) iterations.push_back(r);
    if (iterations.empty()) iterations = group;
    std::sort(iterations.begin(), iterations.end(), [](const Run* a, const Run* b) { return to_ms(*a) < to_ms(*b); });
    const Run& median = *iterations[iterations.size() / 2];
    Row row{key.second, to_ms(median), {}};
    for (const auto& [name, counter] : median.counters) row.counters[name] = counter.value;
    results[key.first].rows.push_back(std::move(row));
  }
  for (auto& r : results) {
    std::sort(r.rows.begin(), r.rows.end(), [](const Row& a, const Row& b) { return a.n < b.n; });
    std::vector<double> n, t;
    for (const auto& row : r.rows)
      if (row.time_ms > 0) {
        n.push_back(static_cast<double>(row.n));
        t.push_back(row.time_ms);
      }
    r.fit = fit_power_law(n, t, static_cast<double>(fit_min_n));
  }
  return results;
}

double counter_or_nan(const Row& row, const std::string& name) {
  const auto it = row.counters.find(name);
  return it == row.counters.end() ? std::nan("") : it->second;
}

std::string cell(double value, const char* format) {
  return std::isfinite(value) ? fmt::format(fmt::runtime(format), value) : std::string("-");
}

void print_table(const std::vector<FamilyResult>& results, const GpuRun& gpu) {
  if (std::any_of(results.begin(), results.end(), [](const FamilyResult& r) { return runs_on_gpu(*r.family->implementation) && !r.rows.empty(); }))
    fmt::print("\nGPU rows: CUDA-event time of one enqueue (L2 {}); \"of peak\" divides by the cuBLAS GEMM rate of the row's dtype "
               "(tf32 for TF32 products); workspace is device memory; no RSS growth.\n",
               to_string(gpu.l2));
  fmt::print("\n{:<14} {:<5} {:<4} {:<20} {:>6} {:>11} {:>10} {:>10} {:>8} {:>8} {:>10} {:>10}\n", "implementation", "dtype", "d",
             "mask", "n", "time (ms)", "GFLOP/s", "GFLOP/s", "GB/s", "of peak", "workspace", "RSS growth");
  fmt::print("{:<14} {:<5} {:<4} {:<20} {:>6} {:>11} {:>10} {:>10} {:>8} {:>8} {:>10} {:>10}\n", "", "", "", "", "", "", "(exact)",
             "(publ.)", "", "", "(MiB)", "(MiB)");
  for (const auto& r : results) {
    const FamilySpec& f = *r.family;
    for (const auto& row : r.rows) {
      fmt::print("{:<14} {:<5} {:<4} {:<20} {:>6} {:>11} {:>10} {:>10} {:>8} {:>8} {:>10} {:>10}\n", f.implementation->name(),
                 to_string(f.dtype), f.head_dim, f.mask_name(), row.n, cell(row.time_ms, row.time_ms < 1 ? "{:.4f}" : "{:.3f}"),
                 cell(counter_or_nan(row, "gflops_exact"), "{:.2f}"), cell(counter_or_nan(row, "gflops_published"), "{:.2f}"),
                 cell(counter_or_nan(row, "gbytes_per_second"), "{:.3f}"), cell(100 * counter_or_nan(row, "peak_fraction"), "{:.1f}%"),
                 cell(counter_or_nan(row, "workspace_bytes") / mib, "{:.2f}"), cell(counter_or_nan(row, "rss_growth_bytes") / mib, "{:.2f}"));
    }
  }
}

void print_fits(const std::vector<FamilyResult>& results, std::int64_t fit_min_n) {
  fmt::print("\nScaling per family: exponent p of time = c * n^p by log-log least squares over n >= {}, with R^2;\n"
             "Google Benchmark's O(n^2) coefficient and RMS; workspace_bytes at n = {} (computed, not run).\n\n",
             fit_min_n, workspace_probe_n);
  fmt::print("{:<40} {:>12} {:>9} {:>8} {:>16} {:>8} {:>16}\n", "family", "n", "exponent", "R^2", "O(n^2) ms/n^2", "RMS",
             "workspace (MiB)");
  for (const auto& r : results) {
    if (r.rows.empty() && r.errors.empty()) continue;  // filtered out
    const FamilySpec& f = *r.family;
    std::string range = "-";
    if (r.fit) {
      std::vector<std::int64_t> used;
      for (const auto& row : r.rows)
        if (row.n >= fit_min_n) used.push_back(row.n);
      range = fmt::format("{}..{}", used.front(), used.back());
    }
    const double ws = static_cast<double>(f.implementation->workspace_bytes(f.problem(workspace_probe_n))) / mib;
    fmt::print("{:<40} {:>12} {:>9} {:>8} {:>16} {:>8} {:>16.1f}\n", f.name(), range, r.fit ? fmt::format("{:.3f}", r.fit->exponent) : "-",
               r.fit ? fmt::format("{:.4f}", r.fit->r_squared) : "-",
               r.bigo_coefficient_ms ? fmt::format("{:.3e}", *r.bigo_coefficient_ms) : "-",
               r.bigo_rms ? fmt::format("{:.1f}%", 100 * *r.bigo_rms) : "-", ws);
  }
}

nlohmann::json bench_section(const std::vector<FamilyResult>& results, const PeakMeasurement& fma, const PeakMeasurement& sgemm,
                             double roofline, const std::string& rss_method, const std::vector<std::string>& notes,
                             std::int64_t fit_min_n) {
  nlohmann::json fits = nlohmann::json::array(), errors = nlohmann::json::array();
  for (const auto& r : results) {
    if (r.rows.empty() && r.errors.empty()) continue;  // filtered out
    const FamilySpec& f = *r.family;
    nlohmann::json j{{"family", f.name()},
                     {"implementation", f.implementation->name()},
                     {"dtype", to_string(f.dtype)},
                     {"head_dim", f.head_dim},
                     {"mask", f.mask_name()},
                     {"device", f.implementation->describe().device},
                     {"fit_min_n", fit_min_n},
                     {"sizes_measured", nlohmann::json::array()},
                     {"workspace_bytes_at_16384", f.implementation->workspace_bytes(f.problem(workspace_probe_n))}};
    for (const auto& row : r.rows) j["sizes_measured"].push_back(row.n);
    if (runs_on_gpu(*f.implementation)) j["roofline_precision"] = roofline_precision(*f.implementation, f.dtype).name();
    if (r.fit) {
      j["exponent"] = r.fit->exponent;
      j["r_squared"] = r.fit->r_squared;
      j["coefficient_ms"] = r.fit->coefficient;
      j["points"] = r.fit->points;
    } else {
      j["exponent"] = nullptr;
    }
    if (r.bigo_coefficient_ms) j["bigo_n_squared_coefficient_ms"] = *r.bigo_coefficient_ms;
    if (r.bigo_rms) j["bigo_rms"] = *r.bigo_rms;
    fits.push_back(std::move(j));
    for (const auto& e : r.errors) errors.push_back(e);
  }
  return {{"schema", "attnbench.bench"},
          {"version", 1},
          {"peaks",
           {{"fma_gflops", fma.gflops},
            {"fma_method", fma.method},
            {"sgemm_gflops", sgemm.gflops},
            {"sgemm_method", sgemm.method},
            {"roofline_gflops", roofline},
            {"roofline_is", fma.gflops <= sgemm.gflops ? "fma" : "sgemm"}}},
          {"rss_growth_method", rss_method},
          {"fits", std::move(fits)},
          {"notes", notes},
          {"errors", std::move(errors)}};
}

// Google Benchmark writes a NaN or infinite counter as NaN / Infinity, which strict JSON
// forbids: those values become null, so every reader can parse the file.
std::string strict_json(std::string text) {
  for (const char* token : {"-Infinity", "Infinity", "-NaN", "NaN"}) {
    const std::string from = std::string("\": ") + token;
    for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + 3))
      if (at + from.size() < text.size() && (text[at + from.size()] == ',' || text[at + from.size()] == '\n'))
        text.replace(at + 3, std::string_view(token).size(), "null");
  }
  return text;
}

// Writes the bench result file: Google Benchmark's JSON ("context" and "benchmarks" as it writes
// them, which compare.py reads) with the top-level "schema", "schema_version", "shard" and the
// "attnbench" section added. Atomic (a temporary file, then rename): a reader never sees half a
// file. Should Google Benchmark's text not parse, it is written as it is and the section goes to
// a file beside it. Returns the path the section went to.
std::string write_bench_json(const std::string& path, const std::string& benchmark_json, const nlohmann::json& section,
                             const nlohmann::json& shard) {
  // No benchmark ran (a shard without families, a filter that selects nothing): an empty list.
  const std::string text = benchmark_json.empty() ? std::string("{\"context\": {}, \"benchmarks\": []}") : strict_json(benchmark_json);
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto write = [](const std::string& target, const std::string& text) { write_result_file(target, text, "--json"); };
  std::string target = path;
  if (doc.is_discarded() || !doc.is_object()) {
    write(path, benchmark_json);
    target = path + ".attnbench.json";
    doc = nlohmann::ordered_json::object();
  }
  doc["schema"] = "attnbench.bench";
  doc["schema_version"] = 1;
  if (!shard.is_null()) doc["shard"] = nlohmann::ordered_json::parse(shard.dump());
  doc["attnbench"] = nlohmann::ordered_json::parse(section.dump());
  write(target, doc.dump(2) + "\n");
  return target;
}

// Context keys Google Benchmark writes itself; ours must not repeat them.
const std::set<std::string> benchmark_context_keys{"date", "host_name", "executable", "num_cpus", "mhz_per_cpu", "cpu_scaling_enabled",
                                                   "caches", "load_avg", "library_build_type", "json_schema_version"};

std::string context_value(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// Turns the pass-through flags into Google Benchmark's state. Throws InputError on anything it
// does not recognise, naming it.
void initialise_benchmark_library(const BenchOptions& o) {
  std::vector<std::string> args{"attnbench bench"};
  for (const auto& flag : o.benchmark_flags) {
    if (flag.rfind("--benchmark_", 0) != 0)
      throw InputError(fmt::format("unknown option '{}' (Google Benchmark flags start with --benchmark_ and take '=VALUE')", flag));
    if (flag.rfind("--benchmark_out=", 0) == 0 || flag.rfind("--benchmark_out_format", 0) == 0)
      throw InputError(fmt::format("'{}': use --json PATH for the JSON output", flag));
    args.push_back(flag);
  }
  // No --benchmark_out: the collecting reporter keeps Google Benchmark's JSON and writes the file
  // itself after every benchmark (write_bench_json).
  // Google Benchmark keeps argv[0] (the "executable" of its context) as a pointer: it must
  // outlive the run. The flags it copies.
  static std::string program_name = "attnbench bench";
  std::vector<char*> argv{program_name.data()};
  for (std::size_t i = 1; i < args.size(); ++i) argv.push_back(args[i].data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  benchmark::Initialize(&argc, argv.data());
  if (argc > 1) {
    std::vector<std::string> unknown(argv.begin() + 1, argv.begin() + argc);
    throw InputError(fmt::format("Google Benchmark did not accept: {}", fmt::join(unknown, " ")));
  }
}

// Whether Google Benchmark's --benchmark_filter selects any size of a family. Mirrors its
// matching: an extended regular expression searched in the instance name, a leading '-'
// negates, "" and "all" select everything. When unsure, says yes.
bool filter_selects(const FamilySpec& family, bool smoke) {
  std::string spec = benchmark::GetBenchmarkFilter();
  if (spec.empty() || spec == "all") return true;
  const bool negative = spec[0] == '-';
  if (negative) spec.erase(0, 1);
  try {
    const std::regex re(spec, std::regex::extended);
    for (std::int64_t n : family.sizes)
      if (std::regex_search(fmt::format("{}/n:{}{}/{}", family.name(), n, smoke ? "/iterations:1" : "",
                                        uses_manual_time(*family.implementation) ? "manual_time" : "real_time"),
                            re) != negative)
        return true;
    return false;
  } catch (const std::regex_error&) {
    return true;
  }
}

// How many sizes of a family Google Benchmark's --benchmark_filter selects (for the progress
// display; all of them when unsure).
std::size_t selected_sizes(const FamilySpec& family, bool smoke) {
  std::string spec = benchmark::GetBenchmarkFilter();
  if (spec.empty() || spec == "all") return family.sizes.size();
  const bool negative = spec[0] == '-';
  if (negative) spec.erase(0, 1);
  try {
    const std::regex re(spec, std::regex::extended);
    std::size_t count = 0;
    for (std::int64_t n : family.sizes)
      if (std::regex_search(fmt::format("{}/n:{}{}/{}", family.name(), n, smoke ? "/iterations:1" : "",
                                        uses_manual_time(*family.implementation) ? "manual_time" : "real_time"),
                            re) != negative)
        ++count;
    return count;
  } catch (const std::regex_error&) {
    return family.sizes.size();
  }
}

void prepare_json_path(const std::string& path) {
  if (path.empty()) return;
  prepare_result_path(path, "--json");
  write_result_file(path, "", "--json");  // an earlier run's results must not pass for this one's
}

}  // namespace

int run_bench(const BenchOptions& o) {
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
  const GpuDeviceInfo device = wants_gpu ? gpu_device_info() : GpuDeviceInfo{};
  const DevicePlan devices = plan_devices(o.implementations, device);
  ProblemListOptions plo;
  for (const auto& d : o.dtypes) plo.dtypes.push_back(parse_dtype(d));
  plo.masks.clear();
  for (const auto& m : o.masks) {
    const Causal c = parse_mask(m);
    if (std::find(plo.masks.begin(), plo.masks.end(), c) == plo.masks.end()) plo.masks.push_back(c);
  }
  plo.head_dims = o.head_dims;
  plo.batch = o.batch;
  plo.heads = o.heads;
  plo.min_n = o.min_n;
  plo.max_n = o.max_n;
  plo.max_n_for["cpu_naive"] = o.naive_max_n;
  plo.smoke = o.smoke;
  plo.gpu_variant = "l2_" + to_string(l2);
  ProblemList list = curated_problem_list(devices.runnable, plo);  // also checks the options
  if (o.shard) {
    // --shard I/N: family at position p of the list runs in shard p % N + 1, so a family's whole
    // n-sweep and its complexity fit stay in one shard.
    const auto [index, count] = *o.shard;
    if (count < 1 || index < 1 || index > count) throw InputError(fmt::format("--shard {}/{}: expected 1 <= I <= N", index, count));
    const std::size_t total = list.families.size();
    std::vector<FamilySpec> kept;
    for (std::size_t position = 0; position < total; ++position)
      if (position % static_cast<std::size_t>(count) == static_cast<std::size_t>(index - 1)) kept.push_back(list.families[position]);
    list.families = std::move(kept);
    list.notes.push_back(fmt::format("shard {}/{}: {} of the {} families", index, count, list.families.size(), total));
  }
  const std::int64_t fit_min_n = o.smoke ? 1 : o.fit_min_n;
  const int threads = o.threads > 0 ? o.threads : default_thread_count();
  std::optional<PeersPlan> peers_plan;
  if (o.peers_command) peers_plan = plan_peers(o, threads, list.families);
  initialise_benchmark_library(o);

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

  for (const auto& [key, value] : o.context.items())
    if (!benchmark_context_keys.count(key)) benchmark::AddCustomContext(key, context_value(value));
  benchmark::AddCustomContext("native_flags", ATTN_BENCH_NATIVE ? "-march=native (ATTN_NATIVE=ON: CPU kernels and peak probes)" : "none (ATTN_NATIVE=OFF)");
  benchmark::AddCustomContext("peak_fma_gflops", fmt::format("{:.2f}", fma.gflops));
  benchmark::AddCustomContext("peak_fma_method", fma.method);
  benchmark::AddCustomContext("peak_sgemm_gflops", fmt::format("{:.2f}", sgemm.gflops));
  benchmark::AddCustomContext("peak_sgemm_method", sgemm.method);
  benchmark::AddCustomContext("roofline_gflops", fmt::format("{:.2f}", env.roofline_gflops));
  benchmark::AddCustomContext("rss_growth_method", rss_method);
  benchmark::AddCustomContext("problem_list", fmt::format("b={} h={} n_q=n_k=n (powers of two), diffuse inputs, seed 1{}", o.batch,
                                                          o.heads, o.smoke ? ", smoke: n=16..64, one iteration" : ""));
  if (devices.gpu) add_gpu_context(device, gpu_run);

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
                                  : try_once(*family.implementation, family.problem(family.sizes.front()), env);
    if (error.empty())
      b->Complexity(benchmark::oNSquared);
    else
      fmt::print("  note: {}: no O(n^2) fit, its first run failed: {}\n", family.name(), error);
  }
  env.fixture.reset();
  if (env.gpu) env.gpu->release();
  std::fflush(stdout);

  // The result file is rewritten after every benchmark: a run that dies keeps what finished.
  const nlohmann::json shard_json =
      o.shard ? nlohmann::json{{"index", o.shard->first}, {"count", o.shard->second}} : nlohmann::json(nullptr);
  std::vector<std::string> notes = devices.skipped;
  notes.insert(notes.end(), list.notes.begin(), list.notes.end());
  bool json_warned = false;
  auto partial_section = [&] {
    return nlohmann::json{{"schema", "attnbench.bench"}, {"version", 1},         {"context", o.context},
                          {"complete", false},           {"notes", notes},       {"peaks", {{"fma_gflops", fma.gflops}, {"sgemm_gflops", sgemm.gflops},
                                                                                              {"roofline_gflops", env.roofline_gflops}}}};
  };
  std::size_t instances = 0;
  for (const FamilySpec& family : list.families) instances += selected_sizes(family, o.smoke);
  if (!o.json_path.empty()) write_bench_json(o.json_path, "", partial_section(), shard_json);  // valid before the first benchmark
  if (o.progress.begin) o.progress.begin(instances);
  CollectingReporter reporter(
      [&](const std::string& text) {
        if (o.json_path.empty()) return;
        // The path was checked before the run; should it go bad now (a link, a device, a full
        // disk), the run goes on and the last write says where its results went.
        try {
          write_bench_json(o.json_path, text, partial_section(), shard_json);
        } catch (const InputError& e) {
          if (!std::exchange(json_warned, true))
            fmt::print(stderr, "attnbench bench: warning: {} (the run goes on; its results are saved at the end)\n", e.what());
        }
      },
      &o.progress);
  benchmark::RunSpecifiedBenchmarks(&reporter);
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
          ours.push_back({std::string(r.family->implementation->name()), r.family->mask_name(), r.family->causal, row.n, row.time_ms,
                          std::string(to_string(r.family->dtype)), r.family->head_dim});
    peers = run_peers(*peers_plan, ours);
  }

  if (!o.json_path.empty()) {
    nlohmann::json section = bench_section(results, fma, sgemm, env.roofline_gflops, rss_method, notes, fit_min_n);
    section["context"] = o.context;
    section["complete"] = true;
    if (load_during)
      section["machine_load"] = {{"cores", load_during->cores},
                                 {"others_cores_before", load_before ? nlohmann::json(load_before->others_cores) : nlohmann::json(nullptr)},
                                 {"others_cores_during", load_during->others_cores},
                                 {"seconds", load_during->seconds},
                                 {"loaded", load_during->loaded() || (load_before && load_before->loaded())}};
    for (const auto& e : gpu_run.errors) section["errors"].push_back(e);
    if (wants_gpu) section["gpu"] = gpu_section(device, gpu_run, devices.skipped);
    if (peers) section["peers"] = peers->section;
    std::string written;
    try {
      written = write_bench_json(o.json_path, reporter.json_text(), section, shard_json);
    } catch (const InputError& e) {
      // The same document write_bench_json makes, in one file.
      const std::string text = reporter.json_text();
      const auto parsed =
          nlohmann::json::parse(text.empty() ? std::string("{\"context\": {}, \"benchmarks\": []}") : strict_json(text), nullptr, false);
      nlohmann::json doc = parsed.is_object() ? parsed : nlohmann::json{{"benchmarks", nlohmann::json::array()}, {"benchmark_output", text}};
      doc["schema"] = "attnbench.bench";
      doc["schema_version"] = 1;
      if (!shard_json.is_null()) doc["shard"] = shard_json;
      doc["attnbench"] = section;
      const std::string rescue = write_rescue_file(o.json_path, doc.dump(2) + "\n");
      if (rescue.empty()) throw InputError(fmt::format("{}; the results could not be saved anywhere else either", e.what()));
      throw InputError(fmt::format("{}; the results were saved to {} instead", e.what(), rescue));
    }
    fmt::print("\nresults: {}{}\n", o.json_path, written == o.json_path ? "" : fmt::format(" (fits and peaks: {})", written));
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

#include "benchmarks/bench_results.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

namespace attn::bench {
namespace {

constexpr double mib = 1024.0 * 1024.0;

std::string cell(double value, const char* format) {
  return std::isfinite(value) ? fmt::format(fmt::runtime(format), value) : std::string("-");
}

}  // namespace

std::vector<FamilyResult> collect(const std::vector<FamilySpec>& families, const std::vector<BenchRun>& runs, std::int64_t fit_min_n) {
  std::vector<FamilyResult> results;
  std::map<std::string, std::size_t> index;
  for (const auto& f : families) {
    index[f.name()] = results.size();
    results.push_back({&f, {}, {}, {}, {}, {}});
  }
  for (const BenchRun& run : runs) {
    const auto it = index.find(run.family);
    if (it == index.end()) continue;
    FamilyResult& r = results[it->second];
    if (run.error)
      r.errors.push_back(fmt::format("{}: {}", run.name, *run.error));
    else if (run.aggregate_name == "BigO")
      r.bigo_coefficient_ms = run.real_time_ms();
    else if (run.aggregate_name == "RMS" && run.rms)
      r.bigo_rms = *run.rms;
  }
  for (const BenchPoint& p : median_points(runs)) {
    const auto it = index.find(p.family);
    if (it != index.end()) results[it->second].rows.push_back({p.n, p.time_ms(), p.run});
  }
  for (auto& r : results) {
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

std::optional<BenchFit> to_bench_fit(const FamilyResult& r, std::int64_t fit_min_n) {
  if (r.rows.empty() && r.errors.empty()) return std::nullopt;  // filtered out
  const FamilySpec& f = *r.family;
  BenchFit fit;
  fit.family = f.name();
  fit.implementation = f.implementation->name();
  fit.dtype = to_string(f.dtype);
  fit.head_dim = f.head_dim;
  fit.mask = f.mask_name();
  fit.pass = to_string(f.pass);
  fit.device = f.implementation->describe().device;
  fit.fit_min_n = fit_min_n;
  for (const auto& row : r.rows) fit.sizes_measured.push_back(row.n);
  fit.workspace_bytes_at_16384 = static_cast<std::int64_t>(f.workspace_bytes(workspace_probe_n));
  if (runs_on_gpu(*f.implementation)) fit.roofline_precision = roofline_precision(*f.implementation, f.dtype).name();
  if (r.fit) {
    fit.exponent = r.fit->exponent;
    fit.r_squared = r.fit->r_squared;
    fit.coefficient_ms = r.fit->coefficient;
    fit.points = static_cast<std::int64_t>(r.fit->points);
  }
  fit.bigo_n_squared_coefficient_ms = r.bigo_coefficient_ms;
  fit.bigo_rms = r.bigo_rms;
  return fit;
}

nlohmann::json gpu_section(const DeviceStatus& d, const GpuRun& g, const std::vector<std::string>& skipped) {
  return {{"device", to_json(d)},
          {"l2_mode", to_string(g.l2)},
          {"timing", g.timing.empty() ? nlohmann::json(nullptr) : nlohmann::json(g.timing)},
          {"peaks", g.peaks ? g.peaks->to_json() : nlohmann::json(nullptr)},
          {"roofline", "a GPU family's peak_fraction divides by the cuBLAS GEMM rate of its dtype (tf32 for f32 families whose "
                       "implementation multiplies in TF32)"},
          {"skipped", skipped},
          {"errors", g.errors}};
}

void print_table(const std::vector<FamilyResult>& results, const GpuRun& gpu) {
  if (std::any_of(results.begin(), results.end(), [](const FamilyResult& r) { return runs_on_gpu(*r.family->implementation) && !r.rows.empty(); }))
    fmt::print("\nGPU rows: CUDA-event time of one enqueue (L2 {}); \"of peak\" divides by the cuBLAS GEMM rate of the row's dtype "
               "(tf32 for TF32 products); workspace is device memory; no RSS growth.\n",
               to_string(gpu.l2));
  fmt::print("\n{:<14} {:<5} {:<4} {:<20} {:<16} {:>6} {:>11} {:>10} {:>10} {:>8} {:>8} {:>10} {:>10}\n", "implementation", "dtype", "d",
             "mask", "pass", "n", "time (ms)", "GFLOP/s", "GFLOP/s", "GB/s", "of peak", "workspace", "RSS growth");
  fmt::print("{:<14} {:<5} {:<4} {:<20} {:<16} {:>6} {:>11} {:>10} {:>10} {:>8} {:>8} {:>10} {:>10}\n", "", "", "", "", "", "", "", "(exact)",
             "(publ.)", "", "", "(MiB)", "(MiB)");
  for (const auto& r : results) {
    const FamilySpec& f = *r.family;
    for (const auto& row : r.rows) {
      fmt::print("{:<14} {:<5} {:<4} {:<20} {:<16} {:>6} {:>11} {:>10} {:>10} {:>8} {:>8} {:>10} {:>10}\n", f.implementation->name(),
                 to_string(f.dtype), f.head_dim, f.mask_name(), to_string(f.pass), row.n, cell(row.time_ms, row.time_ms < 1 ? "{:.4f}" : "{:.3f}"),
                 cell(row.counter("gflops_exact"), "{:.2f}"), cell(row.counter("gflops_published"), "{:.2f}"),
                 cell(row.counter("gbytes_per_second"), "{:.3f}"), cell(100 * row.counter("peak_fraction"), "{:.1f}%"),
                 cell(row.counter("workspace_bytes") / mib, "{:.2f}"), cell(row.counter("rss_growth_bytes") / mib, "{:.2f}"));
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

}  // namespace attn::bench

// The report's sections on bench results: throughput, the fitted exponents, the peers, and the
// HTML's charts (which draw the verify errors too).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "reports/report_fields.hpp"
#include "reports/report_sections.hpp"

namespace attn::report_parts {
namespace {

using nlohmann::json;

std::string n_label(std::int64_t n) { return std::to_string(n); }

std::vector<std::int64_t> all_sizes(const std::vector<BenchFamily>& families) {
  std::set<std::int64_t> sizes;
  for (const auto& f : families)
    for (const auto& p : f.points) sizes.insert(p.n);
  return {sizes.begin(), sizes.end()};
}

std::string fit_slope(const BenchFit* fit) {
  if (fit == nullptr || !fit->exponent) return "no fit";
  return fmt::format("slope {:.2f}", *fit->exponent);
}

}  // namespace

std::vector<BenchFamily> bench_families(const MergedResults& m, std::vector<std::string>& errors) {
  for (const BenchRun& r : m.bench_runs)
    if (r.error) errors.push_back(fmt::format("{}: {}", r.name, *r.error));
  std::vector<BenchFamily> families;
  for (const BenchPoint& p : median_points(m.bench_runs)) {
    if (families.empty() || families.back().name != p.family) {
      const auto fit = std::find_if(m.bench_fits.begin(), m.bench_fits.end(), [&](const BenchFit& f) { return f.family == p.family; });
      families.push_back({p.family, p.family.substr(0, p.family.find('/')), {}, fit == m.bench_fits.end() ? nullptr : &*fit});
    }
    families.back().points.push_back({p.n, p.time_ms(), p.run->counter("gflops_exact"), p.run->counter("workspace_bytes")});
  }
  return families;
}

Section bench_section(const MergedResults& m, const std::vector<BenchFamily>& families, const std::vector<std::string>& errors) {
  Section s{"throughput", "Throughput", {}};
  if (families.empty()) {
    s.blocks.emplace_back(Paragraph{"No bench results among the inputs."});
    return s;
  }
  std::vector<std::string> peaks;
  for (const auto& p : m.bench_peaks)
    peaks.push_back(fmt::format("fp32 FMA {:.1f}, Eigen SGEMM {:.1f}, roofline {:.1f} GFLOP/s ({})", p.cpu.fma_gflops, p.cpu.sgemm_gflops,
                                p.cpu.roofline_gflops, p.file));
  s.blocks.emplace_back(Paragraph{fmt::format(
      "Median run per size. GFLOP/s count the visible (query, key) pairs exactly: 2·b·h·P·(d_k + d_v). Measured peaks: {}. "
      "\"Of peak\" divides by the roofline: for CPU families the fp32 FMA peak (16 independent FMA chains per thread, every "
      "thread at once), which no kernel on these cores exceeds; for GPU families the GEMM rate of their dtype. Eigen SGEMM "
      "(a 512³ single-precision product per thread, every thread at once) is a reference point, what a tuned library reaches, "
      "not a ceiling: an attention kernel may well pass it.",
      peaks.empty() ? "not recorded" : fmt::format("{}", fmt::join(peaks, "; ")))});
  const auto sizes = all_sizes(families);
  Table gflops{{"family"}, {}, {}, {}}, times{{"family"}, {}, {}, {}};
  for (std::int64_t n : sizes) {
    gflops.numeric_columns.insert(gflops.header.size());
    times.numeric_columns.insert(times.header.size());
    gflops.header.push_back("n=" + n_label(n));
    times.header.push_back("n=" + n_label(n));
  }
  for (const auto& f : families) {
    std::vector<std::string> g{f.name}, t{f.name};
    for (std::int64_t n : sizes) {
      const auto it = std::find_if(f.points.begin(), f.points.end(), [&](const FamilyPoint& p) { return p.n == n; });
      g.push_back(it == f.points.end() ? "" : fmt_num(it->gflops_exact));
      t.push_back(it == f.points.end() ? "" : fmt_num(it->time_ms));
    }
    gflops.rows.push_back(std::move(g));
    times.rows.push_back(std::move(t));
  }
  s.blocks.emplace_back(Paragraph{"GFLOP/s (exact FLOP count):"});
  s.blocks.emplace_back(std::move(gflops));
  s.blocks.emplace_back(Details{"time per run (ms)", std::move(times)});
  for (const auto& e : errors) s.blocks.emplace_back(Paragraph{"Benchmark error: " + e});
  return s;
}

Section fit_section(const std::vector<BenchFamily>& families) {
  Section s{"scaling", "Fitted exponents (time = c·n^p)", {}};
  Table t{{"family", "exponent p", "R²", "n used", "workspace at n=16384 (MiB)"}, {}, {}, {1, 2, 4}};
  for (const auto& f : families) {
    std::string used = "-";
    const std::vector<std::int64_t> ns = f.fit ? f.fit->sizes_used() : std::vector<std::int64_t>{};
    if (!ns.empty()) used = fmt::format("{}..{}", ns.front(), ns.back());
    auto number = [](const std::optional<double>& x) { return x ? *x : NAN; };
    t.rows.push_back({f.name, fmt_fixed(f.fit ? number(f.fit->exponent) : NAN, 3), fmt_fixed(f.fit ? number(f.fit->r_squared) : NAN, 4), used,
                      fmt_fixed(f.fit ? static_cast<double>(f.fit->workspace_bytes_at_16384) / (1024.0 * 1024.0) : NAN, 1)});
  }
  s.blocks.emplace_back(Paragraph{"Least squares of log time on log n; attention is O(n²), so p near 2 at large n is expected, and "
                                  "p well below 2 means the sizes are too small to leave the overheads behind."});
  s.blocks.emplace_back(std::move(t));
  return s;
}

Section peers_section(const MergedResults& m) {
  Section s{"peers", "Peers side by side (medians, same run)", {}};
  Table t{{"dtype", "d", "mask", "n", "ours (ms)", "peers (ms)", "target"}, {}, {}, {1, 3}};
  for (const auto& c : m.peer_comparisons) {
    std::vector<std::string> ours, peers;
    if (c.contains("ours") && c["ours"].is_array())
      for (const auto& o : c["ours"])
        ours.push_back(fmt::format("{} {} (peer/ours {})", text(o, "implementation"), fmt_num(field(o, "time_ms")), fmt_fixed(field(o, "ratio"), 2)));
    if (c.contains("peers") && c["peers"].is_array())
      for (const auto& p : c["peers"])
        peers.push_back(fmt::format("{} {}", text(p, "peer"), p.contains("median_ms") ? fmt_num(field(p, "median_ms")) : "error"));
    const json target = c.contains("target") ? c["target"] : json();
    t.rows.push_back({text(c, "dtype"), text(c, "head_dim"), text(c, "mask"), text(c, "n"), fmt::format("{}", fmt::join(ours, "; ")),
                      fmt::format("{}", fmt::join(peers, "; ")), target.is_object() ? text(target, "peer") : "none valid"});
  }
  for (const auto& r : m.peer_results)
    t.rows.push_back({r.dtype, r.d_k > 0 ? std::to_string(r.d_k) : "", r.causal, r.n_q > 0 ? std::to_string(r.n_q) : "", "",
                      fmt::format("{} {}", r.peer, r.median_ms ? fmt_num(*r.median_ms) : r.error.value_or(r.untimed)), ""});
  s.blocks.emplace_back(Paragraph{"ratio = peer time / ours: at least 1.0 means ours is faster."});
  s.blocks.emplace_back(std::move(t));
  return s;
}

Section chart_section(const MergedResults& m, const std::vector<BenchFamily>& families) {
  Section s{"charts", "Charts", {}};
  // Time vs n per implementation, log-log, fitted slope in the legend.
  std::vector<std::string> impls;
  for (const auto& f : families)
    if (std::find(impls.begin(), impls.end(), f.implementation) == impls.end()) impls.push_back(f.implementation);
  for (const auto& impl : impls) {
    svg::Chart c{impl + ": time vs n", "n (= n_q = n_k)", "time per run (ms)", true, true, 2, 0, "legend: family, fitted slope p", {}, {}};
    for (const auto& f : families) {
      if (f.implementation != impl) continue;
      svg::Series series{f.name.substr(impl.size() + 1) + ": " + fit_slope(f.fit), {}, true};
      for (const auto& p : f.points) series.points.emplace_back(double(p.n), p.time_ms);
      c.series.push_back(std::move(series));
    }
    s.blocks.emplace_back(Chart{std::move(c)});
  }
  // Throughput vs n under the measured peak.
  if (!families.empty()) {
    svg::Chart c{"Throughput vs n under the measured peak", "n (= n_q = n_k)", "GFLOP/s (exact count)", true, false, 2, 0, "", {}, {}};
    for (const auto& f : families) {
      svg::Series series{f.name, {}, true};
      for (const auto& p : f.points) series.points.emplace_back(double(p.n), p.gflops_exact);
      c.series.push_back(std::move(series));
    }
    std::set<std::string> drawn;
    for (const auto& p : m.bench_peaks) {
      const double roof = p.cpu.roofline_gflops;
      const std::string label = fmt::format("measured CPU peak (roofline) {:.1f} GFLOP/s", roof);
      if (std::isfinite(roof) && drawn.insert(label).second) c.lines.push_back({roof, label});
      for (const auto& [precision, gflops] : p.gpu_gemm) {
        const std::string gl = fmt::format("cuBLAS GEMM {} {:.0f} GFLOP/s", precision, gflops);
        if (drawn.insert(gl).second) c.lines.push_back({gflops, gl});
      }
    }
    s.blocks.emplace_back(Chart{std::move(c)});
  }
  // The share of the error budget used vs n per dtype (verify): each case's worst error over its
  // tolerance, the pass line at 1, with the naive yardstick's share beside it (its error over the
  // same tolerance): raw ulps would show an f16 case that passes at 1.9e5 ulps.
  std::map<std::string, std::map<std::string, svg::Series>> by_dtype;
  for (const auto& r : m.verify_records) {
    if (!r.measured() || !r.budget_used) continue;
    auto& series = by_dtype[r.dtype()];
    auto& mine = series[r.implementation];
    mine.name = r.implementation;
    mine.joined = false;
    if (std::isfinite(*r.budget_used)) mine.points.emplace_back(r.n_k(), *r.budget_used);
    if (r.baseline && r.tolerance > 0) {
      auto& naive = series["~naive yardstick"];
      naive.name = "naive, same precision";
      naive.joined = false;
      const double share = r.baseline->metrics.max_abs / r.tolerance;
      if (std::isfinite(share)) naive.points.emplace_back(r.n_k(), share);
    }
  }
  for (auto& [dtype, series] : by_dtype) {
    svg::Chart c{"Error budget used vs n, " + dtype, "n_k", "max error / tolerance", true, true, 2, 1e-3, "", {}, {}};
    for (auto& [name, sr] : series) c.series.push_back(std::move(sr));
    c.lines.push_back({1.0, "pass line: error = tolerance"});
    s.blocks.emplace_back(Chart{std::move(c)});
  }
  // Workspace vs n.
  if (!families.empty()) {
    svg::Chart c{"Workspace vs n", "n (= n_q = n_k)", "workspace (bytes)", true, true, 2, 1, "", {}, {}};
    for (const auto& f : families) {
      svg::Series series{f.name, {}, true};
      for (const auto& p : f.points)
        if (std::isfinite(p.workspace)) series.points.emplace_back(double(p.n), p.workspace);
      c.series.push_back(std::move(series));
    }
    s.blocks.emplace_back(Chart{std::move(c)});
  }
  if (s.blocks.empty()) s.blocks.emplace_back(Paragraph{"No bench or verify results to chart."});
  return s;
}

}  // namespace attn::report_parts

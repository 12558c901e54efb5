#include "python/src/bench_document.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "benchmarks/machine_peaks.hpp"
#include "benchmarks/scaling_fit.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/problem.hpp"
#include "records/bench_record.hpp"
#include "records/context.hpp"

namespace attn::python {
namespace {

// The family a problem belongs to: only n varies within one (benchmarks/problem_list.hpp's names).
std::string mask_name(const Problem& p) {
  std::string name;
  if (p.window.is_none()) name = "none";
  else if (p.window == Window::of(Causal::top_left)) name = "causal";
  else if (p.window == Window::of(Causal::bottom_right)) name = "causal_bottom_right";
  else if (p.window.right == 0 && p.window.left != Window::unbounded) name = fmt::format("sliding_{}", p.window.left);
  else name = "window";
  if (p.padding.kind != KeyPadding::Kind::none) name += "+pad";
  if (p.bool_mask.enabled) name += "+bool";
  if (p.bias.enabled) name += p.bias.kind == BiasSpec::Kind::alibi ? "+alibi" : "+bias";
  return name;
}

}  // namespace

std::string bench_document(const std::string& request_text) {
  const nlohmann::json request = nlohmann::json::parse(request_text);
  const std::string implementation = request.at("implementation").get<std::string>();
  const std::string device = request.at("device").get<std::string>();
  BenchDocument doc;
  doc.attnbench.context = run_context(default_thread_count());
  std::map<std::string, std::vector<std::pair<std::int64_t, double>>> medians;  // family -> (n, median ms)
  std::map<std::string, Problem> family_problem;
  std::vector<std::string> family_order;
  for (const auto& entry : request.at("entries")) {
    const Problem p = parse_problem(entry.at("problem").get<std::string>());
    const std::string family = fmt::format("{}/{}/d{}/{}", implementation, to_string(p.dtype), p.d_k, mask_name(p));
    if (!family_problem.contains(family)) family_order.push_back(family), family_problem.emplace(family, p);
    BenchRun run;
    run.family = family;
    run.n = p.n_k;
    run.name = run.run_name = fmt::format("{}/n:{}/manual_time", family, p.n_k);
    run.family_index = std::int64_t(std::find(family_order.begin(), family_order.end(), family) - family_order.begin());
    run.iterations = 1;
    run.time_unit = "ms";
    run.label = p.repro();
    if (entry.contains("error")) {
      run.error = entry.at("error").get<std::string>();
      doc.attnbench.errors.push_back(fmt::format("{}: {}", run.name, *run.error));
      doc.runs.push_back(run);
      continue;
    }
    std::vector<double> times = entry.at("times_ms").get<std::vector<double>>();
    run.repetitions = std::int64_t(times.size());
    for (std::size_t r = 0; r < times.size(); ++r) {
      BenchRun rep = run;
      rep.repetition_index = std::int64_t(r);
      rep.real_time = rep.cpu_time = times[r];
      const double seconds = times[r] / 1e3;
      rep.counters["gflops_exact"] = p.flops() / seconds / 1e9;
      rep.counters["gflops_published"] = p.flops_published() / seconds / 1e9;
      rep.counters["gbps_min"] = p.bytes_min() / seconds / 1e9;
      doc.runs.push_back(rep);
    }
    std::sort(times.begin(), times.end());
    if (!times.empty()) medians[family].push_back({p.n_k, times[times.size() / 2]});
  }
  for (const std::string& family : family_order) {
    const Problem& p = family_problem.at(family);
    BenchFit fit;
    fit.family = family;
    fit.implementation = implementation;
    fit.dtype = std::string(to_string(p.dtype));
    fit.mask = mask_name(p);
    fit.device = device;
    fit.head_dim = p.d_k;
    std::vector<double> n, t;
    for (const auto& [size, ms] : medians[family]) {
      fit.sizes_measured.push_back(size);
      n.push_back(double(size));
      t.push_back(ms);
    }
    if (!n.empty()) fit.fit_min_n = std::int64_t(*std::min_element(n.begin(), n.end()));
    if (const auto f = bench::fit_power_law(n, t)) {
      fit.exponent = f->exponent;
      fit.r_squared = f->r_squared;
      fit.coefficient_ms = f->coefficient;
      fit.points = std::int64_t(f->points);
    }
    doc.attnbench.fits.push_back(fit);
  }
  if (device == "cpu") {
    bench::PeakSettings settings;
    settings.threads = default_thread_count();
    const auto fma = bench::measure_fma_peak(settings);
    const auto sgemm = bench::measure_sgemm_peak(settings);
    doc.attnbench.peaks = {fma.gflops, sgemm.gflops, std::min(fma.gflops, sgemm.gflops), fma.method, sgemm.method,
                           fma.gflops <= sgemm.gflops ? "fma" : "sgemm"};
  } else {
    doc.attnbench.notes.push_back("the CPU peaks were not measured: the callable ran on " + device);
  }
  doc.attnbench.notes.push_back(fmt::format("timed by attnbench.bench in Python: {}; one call per timed run, its arguments converted before",
                                            request.value("timer", std::string("-"))));
  doc.attnbench.complete = true;
  return to_json(doc).dump();
}

}  // namespace attn::python

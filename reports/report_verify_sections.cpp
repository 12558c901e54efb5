// The report's sections on verify and properties results, and the 1/sqrt(d_k) study.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/problem.hpp"
#include "impls/capability_space.hpp"
#include "reports/report_fields.hpp"
#include "reports/report_sections.hpp"
#include "reports/scale_study.hpp"

namespace attn::report_parts {

using nlohmann::json;

Section context_section(const MergedResults& m) {
  Section s{"context", "Where it was measured", {}};
  Table inputs{{"file", "kind", "shard", "git revision", "date"}, {}, {0}, {}};
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    const json& c = m.contexts[i];
    inputs.rows.push_back({m.files[i], m.file_kinds.size() > i ? m.file_kinds[i] : "", m.file_shards.size() > i ? m.file_shards[i] : "",
                           text(c, "git_revision"), text(c, "date")});
  }
  s.blocks.emplace_back(std::move(inputs));
  // Each context field with its distinct values over the files.
  const std::vector<std::pair<std::string, std::string>> keys{
      {"git_revision", "git revision"}, {"build_type", "build type"}, {"compiler", "compiler"}, {"compiler_flags", "compiler flags"},
      {"cpu_model", "CPU model"},       {"cpu_cores", "CPU cores"},   {"cpu_mhz", "CPU clock (MHz, at start)"}, {"threads", "threads"},
      {"date", "date (UTC)"}};
  Table ctx{{"field", "value"}, {}, {}, {}};
  for (const auto& [key, label] : keys) {
    std::vector<std::string> values;
    for (const auto& c : m.contexts) {
      const std::string v = text(c, key.c_str());
      if (!v.empty() && std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
    }
    if (!values.empty()) ctx.rows.push_back({label, fmt::format("{}", fmt::join(values, "; "))});
  }
  std::vector<std::string> gpus;
  for (const auto& c : m.contexts) {
    if (!c.is_object() || !c.contains("gpu") || !c["gpu"].is_object()) continue;
    const json& g = c["gpu"];
    std::string v = g.value("available", false)
                        ? fmt::format("{} (sm {}, {} SMs, max SM clock {} MHz, memory clock {} MHz; NVIDIA driver {}; CUDA driver {}, runtime {})",
                                      text(g, "name"), text(g, "compute_capability"), text(g, "sm_count"), text(g, "max_sm_clock_mhz"),
                                      text(g, "memory_clock_mhz"), text(g, "nvidia_driver"), text(g, "cuda_driver_version"),
                                      text(g, "cuda_runtime_version"))
                        : "no device: " + text(g, "reason");
    if (std::find(gpus.begin(), gpus.end(), v) == gpus.end()) gpus.push_back(v);
  }
  if (gpus.empty())
    for (const auto& c : m.contexts)
      if (!text(c, "gpu_name").empty()) gpus.push_back(text(c, "gpu_name"));  // Google Benchmark context of a GPU run
  ctx.rows.push_back({"GPU", gpus.empty() ? "not recorded" : fmt::format("{}", fmt::join(gpus, "; "))});
  s.blocks.emplace_back(std::move(ctx));
  for (const auto& w : m.warnings) s.blocks.emplace_back(Paragraph{"Warning: " + w});
  return s;
}

// One line per implementation that skipped cases: how many, and why (each reason with its count,
// the most frequent first).
Table skipped_table(const MergedResults& m) {
  std::map<std::string, std::map<std::string, int>> reasons;
  for (const auto& r : m.verify_records)
    if (r.status == "skip") ++reasons[r.implementation][r.skip_reason.empty() ? "(no reason recorded)" : r.skip_reason];
  Table t{{"implementation", "skipped", "why (cases)"}, {}, {}, {1}};
  for (const auto& [impl, why] : reasons) {
    std::vector<std::pair<int, std::string>> ranked;
    int total = 0;
    for (const auto& [reason, n] : why) ranked.emplace_back(n, reason), total += n;
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::string> parts;
    int rest = 0;
    for (std::size_t i = 0; i < ranked.size(); ++i)
      if (i < 4)
        parts.push_back(fmt::format("{} ({})", ranked[i].second, ranked[i].first));
      else
        rest += ranked[i].first;
    if (ranked.size() > 4) parts.push_back(fmt::format("{} other reasons ({} cases)", ranked.size() - 4, rest));
    t.rows.push_back({impl, std::to_string(total), fmt::format("{}", fmt::join(parts, "; "))});
  }
  return t;
}

Section verdict_section(const MergedResults& m) {
  Section s{"verdicts", "Verdicts per implementation × dtype × mask", {}};
  if (!m.has("verify")) {
    s.blocks.emplace_back(Paragraph{"No verify results among the inputs."});
    return s;
  }
  struct Cell {
    int pass = 0, fail = 0, skip = 0;
    double worst_ulps = -1, worst_budget = -1;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Cell> cells;
  int pass = 0, fail = 0, skip = 0;
  for (const auto& r : m.verify_records) {
    Cell& c = cells[{r.implementation, r.dtype(), r.mask()}];
    const std::string& status = r.status;
    if (status == "pass") ++c.pass, ++pass;
    else if (status == "fail") ++c.fail, ++fail;
    else ++c.skip, ++skip;
    if (status == "pass" || status == "fail") {
      const double u = ulps_value(r);
      const double budget = r.budget_used ? *r.budget_used : NAN;
      if (!(u <= c.worst_ulps)) c.worst_ulps = std::isnan(u) ? INFINITY : u;
      if (!(budget <= c.worst_budget)) c.worst_budget = std::isnan(budget) ? INFINITY : budget;
    }
  }
  std::string rule;
  if (m.pass_rule.is_object())
    rule = fmt::format(" Pass rule: max abs error ≤ {} × the naive algorithm's error in the same precision + {} ulps.", text(m.pass_rule, "k"),
                       text(m.pass_rule, "floor_ulps"));
  s.blocks.emplace_back(Paragraph{fmt::format("**{} passed, {} failed, {} skipped** over {} records.{}", pass, fail, skip,
                                              m.verify_records.size(), rule)});
  // Rows for what ran; the skips, which say nothing per dtype and mask, get one line per
  // implementation below with their reasons.
  Table t{{"implementation", "dtype", "mask", "verdict", "pass", "fail", "skip", "worst ulps", "worst budget used"}, {}, {}, {4, 5, 6, 7, 8}};
  for (const auto& [key, c] : cells) {
    if (c.pass + c.fail == 0) continue;
    const auto& [impl, dtype, mask] = key;
    t.rows.push_back({impl, dtype, mask, c.fail > 0 ? "FAIL" : "pass", std::to_string(c.pass), std::to_string(c.fail), std::to_string(c.skip),
                      c.worst_ulps < 0 ? "-" : fmt_num(c.worst_ulps, 7), c.worst_budget < 0 ? "-" : format_budget(c.worst_budget)});
  }
  s.blocks.emplace_back(std::move(t));
  if (skip > 0) s.blocks.emplace_back(skipped_table(m));
  return s;
}

// What the verify records exercised, per implementation: cases run and projected, rows compared
// by sampling, and the features of the problems that ran (impls/capability_space.hpp).
Section coverage_section(const MergedResults& m) {
  Section s{"coverage", "Coverage per implementation", {}};
  struct Count {
    int ran = 0, projected = 0, skipped = 0, sampled = 0;
    std::map<std::string, int> features;
  };
  std::map<std::string, Count> counts;
  std::set<std::string> every_feature;
  for (const auto& r : m.verify_records) {
    Count& c = counts[r.implementation];
    if (r.status == "skip") {
      ++c.skipped;
      continue;
    }
    ++c.ran;
    if (r.projected()) ++c.projected;
    if (r.sampled()) ++c.sampled;
    try {
      for (const std::string& f : features_of(parse_problem(r.repro))) ++c.features[f], every_feature.insert(f);
    } catch (const std::exception&) {
      // An older file's repro string this build cannot read: its features are not counted.
    }
  }
  s.blocks.emplace_back(Paragraph{
      "A case an implementation does not support runs as its projection onto what it declares (impls/README.md). Sampled: cases whose "
      "rows were compared on a sample only (an explicit option for huge problems). Not exercised: features some other implementation's "
      "cases exercised in these results."});
  Table t{{"implementation", "ran", "projected", "skipped", "sampled", "exercised (cases)", "not exercised"}, {}, {}, {1, 2, 3, 4}};
  for (const auto& [impl, c] : counts) {
    std::vector<std::string> exercised, missing;
    for (const auto& [f, n] : c.features) exercised.push_back(fmt::format("{} ({})", f, n));
    for (const auto& f : every_feature)
      if (!c.features.count(f)) missing.push_back(f);
    t.rows.push_back({impl, std::to_string(c.ran), std::to_string(c.projected), std::to_string(c.skipped), std::to_string(c.sampled),
                      fmt::format("{}", fmt::join(exercised, ", ")), fmt::format("{}", fmt::join(missing, ", "))});
  }
  s.blocks.emplace_back(std::move(t));
  return s;
}

Section worst_section(const MergedResults& m, std::size_t limit) {
  Section s{"worst", "Worst errors (with repro strings)", {}};
  std::vector<const VerifyRecord*> measured;
  for (const auto& r : m.verify_records)
    if (r.measured()) measured.push_back(&r);
  auto key = [](const VerifyRecord* r) {
    const double budget = r->budget_used ? *r->budget_used : NAN;
    return std::make_tuple(r->status == "fail", std::isnan(budget) ? INFINITY : budget, ulps_value(*r));
  };
  std::stable_sort(measured.begin(), measured.end(), [&](const VerifyRecord* a, const VerifyRecord* b) { return key(a) > key(b); });
  if (measured.size() > limit) measured.resize(limit);
  s.blocks.emplace_back(Paragraph{fmt::format(
      "The {} records with the largest share of their error budget used (max abs error over the tolerance; 100% is the pass line), failures first. Rerun one with "
      "`attnbench verify --impl IMPL --case 'REPRO'`.",
      measured.size())});
  Table t{{"implementation", "case", "problem", "max abs", "max ulps", "budget used", "verdict", "repro", "diagnosis"}, {}, {7}, {1, 3, 4, 5}};
  std::vector<std::string> reasons;
  for (const VerifyRecord* r : measured) {
    // The diagnosis is written by verify for a diagnosed failure (reports/README.md); older files have none.
    t.rows.push_back({r->implementation, std::to_string(r->case_index), r->label, fmt_num(r->max_abs()), format_ulps(*r),
                      r->budget_used ? format_budget(*r->budget_used) : "-", r->status == "fail" ? "FAIL" : "pass", r->repro, r->diagnosis_summary()});
    if (r->status == "fail")
      for (const auto& why : r->reasons) reasons.push_back(fmt::format("{} case {}: {}", r->implementation, r->case_index, why));
    if (!r->diagnosis_summary().empty()) reasons.push_back(fmt::format("{} case {}: diagnosis: {}", r->implementation, r->case_index, r->diagnosis_summary()));
  }
  s.blocks.emplace_back(std::move(t));
  for (const auto& why : reasons) s.blocks.emplace_back(Paragraph{"FAIL " + why});
  return s;
}

Section property_section(const MergedResults& m) {
  Section s{"properties", "Properties (RapidCheck)", {}};
  Table t{{"#", "property", "implementation", "verdict", "cases", "seed", "message / counterexample"}, {}, {}, {0, 4}};
  int held = 0, failed = 0, findings = 0, gave_up = 0, other = 0;
  for (const auto& r : m.property_records) {
    const std::string& verdict = r.verdict;
    if (verdict == "held") ++held;
    else if (verdict == "failed") ++failed;
    else if (verdict == "finding") ++findings;
    else if (verdict == "gave_up") ++gave_up;
    else ++other;
    std::string message = r.message;
    if (!r.repro.empty()) message += (message.empty() ? "" : "; repro: ") + r.repro;
    t.rows.push_back({std::to_string(r.property), r.name, r.implementation, verdict, std::to_string(r.cases), std::to_string(r.seed), message});
  }
  // A finding is shown but fails nothing; gave up is neither a pass nor a failure.
  s.blocks.emplace_back(Paragraph{fmt::format("{} held, {} failed, {} finding(s), {} gave up, {} not applicable.", held, failed, findings,
                                              gave_up, other)});
  s.blocks.emplace_back(std::move(t));
  return s;
}

Section scale_section(const MergedResults& m) {
  Section s{"scale", "Why the scale is 1/√d_k", {}};
  const ScaleStudy study = scale_study();
  s.blocks.emplace_back(Paragraph{fmt::format(
      "Computed now by attnbench's own code: Q and K with unit-variance entries drawn by core's seeded generation (diffuse regime, "
      "seed {}), n_q = {} queries against n_k = {} keys, scores q·k in float, softmax per row. A raw score is a sum of d_k products "
      "of unit variance, so its variance is d_k: the softmax saturates onto one key (entropy near 0, largest weight near 1) and its "
      "gradient vanishes. Dividing by √d_k keeps the variance at 1 for every d_k, and the weights stay spread (uniform weights "
      "have entropy ln n_k = {:.3f} nats).",
      study.seed, study.n_q, study.n_k, study.uniform_entropy)});
  Table t{{"d_k", "var(raw)", "var(scaled)", "entropy raw (nats)", "entropy scaled (nats)", "largest weight raw", "largest weight scaled"},
          {}, {}, {0, 1, 2, 3, 4, 5, 6}};
  for (const auto& r : study.rows)
    t.rows.push_back({std::to_string(r.d_k), fmt_fixed(r.raw_variance, 2), fmt_fixed(r.scaled_variance, 3), fmt_fixed(r.raw_entropy, 3),
                      fmt_fixed(r.scaled_entropy, 3), fmt_fixed(r.raw_max_weight, 3), fmt_fixed(r.scaled_max_weight, 3)});
  s.blocks.emplace_back(std::move(t));

  // The regime of each accuracy case, in the same terms, from the case's own inputs.
  std::map<std::string, const VerifyRecord*> cases;  // by repro, first record of each
  std::vector<std::string> order;
  for (const auto& r : m.verify_records) {
    const std::string& repro = r.repro;
    if (repro.empty() || cases.count(repro)) continue;
    cases[repro] = &r;
    order.push_back(repro);
  }
  if (order.empty()) return s;
  Table regimes{{"case", "regime", "dtype", "problem", "score std", "max |score|", "entropy / ln(visible)", "largest weight"}, {}, {}, {0, 4, 5, 6, 7}};
  std::map<std::string, std::vector<CaseRegime>> by_regime;
  for (const auto& repro : order) {
    const VerifyRecord& r = *cases[repro];
    try {
      const Problem p = parse_problem(repro);
      const CaseRegime c = case_regime(p);
      by_regime[c.regime].push_back(c);
      regimes.rows.push_back({std::to_string(r.case_index), c.regime, std::string(to_string(p.dtype)), r.label, fmt_num(c.score_std),
                              fmt_num(c.max_abs_score), c.rows > 0 ? fmt_fixed(c.entropy_fraction, 3) : "-", c.rows > 0 ? fmt_fixed(c.max_weight, 3) : "-"});
    } catch (const std::exception& e) {
      regimes.rows.push_back({std::to_string(r.case_index), "?", "", repro, e.what(), "", "", ""});
    }
  }
  Table summary{{"regime", "cases", "median score std", "mean entropy / ln(visible)", "mean largest weight"}, {}, {}, {1, 2, 3, 4}};
  for (auto& [regime, list] : by_regime) {
    std::vector<double> stds;
    double e = 0, w = 0;
    int rows = 0;
    for (const auto& c : list) {
      stds.push_back(c.score_std);
      if (c.rows > 0) e += c.entropy_fraction, w += c.max_weight, ++rows;
    }
    std::sort(stds.begin(), stds.end());
    summary.rows.push_back({regime, std::to_string(list.size()), fmt_num(stds[stds.size() / 2]), rows ? fmt_fixed(e / rows, 3) : "-",
                            rows ? fmt_fixed(w / rows, 3) : "-"});
  }
  s.blocks.emplace_back(Paragraph{"The accuracy cases, measured in these terms on their own inputs (scaled scores, with each case's mask, "
                                  "bias and scale; up to 16 rows per case): diffuse cases sit at score std 1 like the scaled column above, "
                                  "peaked ones at 8 like unscaled d_k = 64, saturated ones put nearly all weight on one key."});
  s.blocks.emplace_back(std::move(summary));
  s.blocks.emplace_back(Details{fmt::format("the regime of each of the {} accuracy cases", order.size()), std::move(regimes)});
  return s;
}

}  // namespace attn::report_parts

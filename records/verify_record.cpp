#include "records/verify_record.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/problem.hpp"
#include "core/score_pipeline.hpp"
#include "core/tensor_role.hpp"
#include "records/result_schema.hpp"

namespace attn {

namespace {

using nlohmann::json;

json metrics_json(const VerifyMetrics& m) {
  json j{{"compared", m.compared},
         {"reference_max_abs", figure_json(m.reference_max_abs)},
         {"max_abs", figure_json(m.max_abs)},
         {"max_abs_at", m.max_abs_at},
         {"max_rel", figure_json(m.max_rel)},
         {"rel_floor", figure_json(m.rel_floor)},
         {"max_rel_at", m.max_rel_at},
         {"normwise_rel", figure_json(m.normwise_rel)},
         {"rms", figure_json(m.rms)},
         {"max_ulps", m.max_ulps},
         {"max_ulps_at", m.max_ulps_at},
         {"nan", m.nan},
         {"pos_inf", m.pos_inf},
         {"neg_inf", m.neg_inf},
         {"fully_masked_nan", m.fully_masked_nan},
         {"fully_masked_inf", m.fully_masked_inf},
         {"unwritten", m.unwritten},
         {"fully_masked_rows", m.fully_masked_rows},
         {"fully_masked_violations", m.fully_masked_violations},
         {"fully_masked_holding",
          {{"nan", m.fully_masked_holding.nan},
           {"inf", m.fully_masked_holding.inf},
           {"zeros", m.fully_masked_holding.zeros},
           {"finite_nonzero", m.fully_masked_holding.finite_nonzero}}}};
  if (m.lse) j["lse"] = {{"max_abs", figure_json(m.lse->max_abs)}, {"violations", m.lse->violations}};
  return j;
}

// {"o": {...}, "lse": {...}}: keyed by role, as PyTorch names each compared tensor.
json roles_json(const std::vector<VerifyRoleVerdict>& roles) {
  json j = json::object();
  for (const VerifyRoleVerdict& r : roles)
    j[r.role] = {{"passed", r.passed},
                 {"max_abs", figure_json(r.max_abs)},
                 {"reference_max_abs", figure_json(r.reference_max_abs)},
                 {"tolerance", figure_json(r.tolerance)},
                 {"reasons", r.reasons}};
  return j;
}

// Where a role sorts: core's role order, names this build does not know after them.
std::size_t role_rank(const std::string& name) {
  const std::optional<Role> role = parse_role(name);
  return role ? std::size_t(*role) : role_count;
}

// {"dq": {metrics..., "term_rounding": x}, ...}: term_rounding where set (a baseline's).
json gradients_json(const std::vector<VerifyGradient>& gradients) {
  json j = json::object();
  for (const VerifyGradient& g : gradients) {
    json& one = j[g.role] = metrics_json(g.metrics);
    if (g.term_rounding > 0) one["term_rounding"] = figure_json(g.term_rounding);
  }
  return j;
}

json diagnosis_json(const VerifyDiagnosis& d) {
  json matches = json::array();
  for (const VerifyDiagnosisMatch& m : d.matches)
    matches.push_back({{"hypothesis", m.hypothesis}, {"explanation", m.explanation}, {"max_abs", figure_json(m.max_abs)}, {"tolerance", figure_json(m.tolerance)}});
  return {{"summary", d.summary}, {"matches", matches},     {"tested", d.tested},
          {"rows", d.rows},       {"note", d.note},         {"nondeterminism", d.nondeterminism},
          {"fully_masked_rows", d.fully_masked_rows}};
}

// Reads one record's fields; every fault names the record and the field (its path in the record).
class Reader {
 public:
  explicit Reader(std::function<void(const std::string&)> fail) : fail_(std::move(fail)) {}

  // A figure verify writes as a number, or as "nan"/"inf"/"-inf".
  double figure(const json& v, const std::string& where) const {
    if (v.is_number()) return v.get<double>();
    if (v == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (v == "inf") return std::numeric_limits<double>::infinity();
    if (v == "-inf") return -std::numeric_limits<double>::infinity();
    fail_(fmt::format("{} is not a number: {}", where, v.dump()));
    return 0.0;
  }
  void figure(const json& o, const char* key, const std::string& at, double& out) const {
    if (o.contains(key)) out = figure(o[key], at + key);
  }
  void count(const json& o, const char* key, const std::string& at, std::int64_t& out) const {
    if (!o.contains(key)) return;
    if (!o[key].is_number_integer()) fail_(fmt::format("{}{} is not a whole number: {}", at, key, o[key].dump()));
    out = o[key].get<std::int64_t>();
  }
  void string(const json& o, const char* key, const std::string& at, std::string& out) const {
    if (!o.contains(key)) return;
    if (!o[key].is_string()) fail_(fmt::format("{}{} is not a string: {}", at, key, o[key].dump()));
    out = o[key].get<std::string>();
  }
  // Verify writes an unsigned integer, 2^64 - 1 for NaN; a whole float, "nan" or "inf" (a
  // hand-written file's) read as the same.
  std::uint64_t ulps(const json& v, const std::string& where) const {
    if (v.is_number_unsigned()) return v.get<std::uint64_t>();
    const double x = figure(v, where);
    if (!std::isfinite(x) || x >= 0x1p64) return VerifyMetrics::nan_ulps;
    if (x < 0 || x != std::floor(x)) fail_(fmt::format("{} is not a whole number of ulps: {}", where, v.dump()));
    return std::uint64_t(x);
  }
  const json& object(const json& o, const char* key, const std::string& at) const {
    if (!o[key].is_object()) fail_(fmt::format("{}{} is not an object", at, key));
    return o[key];
  }
  void strings(const json& o, const char* key, std::vector<std::string>& out) const {
    if (!o.contains(key) || !o[key].is_array()) return;
    for (const auto& s : o[key]) out.push_back(s.is_string() ? s.get<std::string>() : s.dump());
  }

  VerifyMetrics metrics(const json& m, const std::string& at) const {
    VerifyMetrics v;
    count(m, "compared", at, v.compared);
    figure(m, "reference_max_abs", at, v.reference_max_abs);
    figure(m, "max_abs", at, v.max_abs);
    string(m, "max_abs_at", at, v.max_abs_at);
    figure(m, "max_rel", at, v.max_rel);
    figure(m, "rel_floor", at, v.rel_floor);
    string(m, "max_rel_at", at, v.max_rel_at);
    figure(m, "normwise_rel", at, v.normwise_rel);
    figure(m, "rms", at, v.rms);
    // Unrecorded ulps are unknown, not zero.
    v.max_ulps = m.contains("max_ulps") ? ulps(m["max_ulps"], at + "max_ulps") : VerifyMetrics::nan_ulps;
    string(m, "max_ulps_at", at, v.max_ulps_at);
    count(m, "nan", at, v.nan);
    count(m, "pos_inf", at, v.pos_inf);
    count(m, "neg_inf", at, v.neg_inf);
    count(m, "fully_masked_nan", at, v.fully_masked_nan);
    count(m, "fully_masked_inf", at, v.fully_masked_inf);
    count(m, "unwritten", at, v.unwritten);
    count(m, "fully_masked_rows", at, v.fully_masked_rows);
    count(m, "fully_masked_violations", at, v.fully_masked_violations);
    if (m.contains("fully_masked_holding")) {
      const std::string h_at = at + "fully_masked_holding.";
      const json& h = object(m, "fully_masked_holding", at);
      count(h, "nan", h_at, v.fully_masked_holding.nan);
      count(h, "inf", h_at, v.fully_masked_holding.inf);
      count(h, "zeros", h_at, v.fully_masked_holding.zeros);
      count(h, "finite_nonzero", h_at, v.fully_masked_holding.finite_nonzero);
    }
    if (m.contains("lse")) {
      const json& l = object(m, "lse", at);
      v.lse.emplace();
      figure(l, "max_abs", at + "lse.", v.lse->max_abs);
      count(l, "violations", at + "lse.", v.lse->violations);
    }
    return v;
  }

  std::vector<VerifyGradient> gradients(const json& g, const std::string& at) const {
    std::vector<VerifyGradient> out;
    for (const auto& [name, one] : g.items()) {
      if (!one.is_object()) fail_(fmt::format("{}{} is not an object", at, name));
      VerifyGradient& read = out.emplace_back();
      read.role = name;
      read.metrics = metrics(one, at + name + ".");
      figure(one, "term_rounding", at + name + ".", read.term_rounding);
    }
    std::stable_sort(out.begin(), out.end(), [](const VerifyGradient& a, const VerifyGradient& b) { return role_rank(a.role) < role_rank(b.role); });
    return out;
  }

 private:
  std::function<void(const std::string&)> fail_;
};

}  // namespace

json to_json(const VerifyRecord& r) {
  json j{{"implementation", r.implementation}, {"case_index", r.case_index}, {"label", r.label},
         {"repro", r.repro},                   {"problem", r.problem},       {"status", r.status}};
  if (r.reference)
    j["reference"] = {{"rows_total", r.reference->rows_total},
                      {"rows_checked", r.reference->rows_checked},
                      {"sampled", r.reference->sampled},
                      {"rows_float128", r.reference->rows_float128},
                      {"self_error_bound_ulps", figure_json(r.reference->self_error_bound_ulps)},
                      {"seconds", r.reference->seconds}};
  if (r.baseline)
    j["baseline"] = {{"algorithm", r.baseline->algorithm},
                     {"metrics", metrics_json(r.baseline->metrics)},
                     {"error_over_a_priori_bound", figure_json(r.baseline->error_over_a_priori_bound)},
                     {"score_rounding", figure_json(r.baseline->score_rounding)},
                     {"lse_score_rounding", figure_json(r.baseline->lse_score_rounding)}};
  if (r.baseline && !r.baseline->gradients.empty()) j["baseline"]["gradients"] = gradients_json(r.baseline->gradients);
  if (r.projected_from) j["projected_from"] = {{"repro", r.projected_from->repro}, {"changes", r.projected_from->changes}};
  if (!r.inputs_from.empty()) j["inputs_from"] = r.inputs_from;
  if (!r.measured()) {
    j["skip_reason"] = r.skip_reason;
    return j;
  }
  j["metrics"] = metrics_json(r.metrics.value_or(VerifyMetrics{}));
  j["tolerance"] = figure_json(r.tolerance);
  j["ratio_to_baseline"] = figure_json(r.ratio_to_baseline);
  j["budget_used"] = figure_json(r.budget_used.value_or(std::numeric_limits<double>::quiet_NaN()));
  j["reasons"] = r.reasons;
  if (!r.roles.empty()) j["roles"] = roles_json(r.roles);
  if (!r.gradients.empty()) j["gradients"] = gradients_json(r.gradients);
  if (!r.gradients_not_computed.empty()) j["gradients_not_computed"] = r.gradients_not_computed;
  if (!r.isolation.empty()) j["isolation"] = r.isolation;
  j["seconds"] = r.seconds;
  if (r.diagnosis) j["diagnosis"] = diagnosis_json(*r.diagnosis);
  if (!r.diagnosis_skipped.empty()) j["diagnosis_skipped"] = r.diagnosis_skipped;
  return j;
}

std::string VerifyRecord::dtype() const {
  std::string dtype = text_or_empty(problem, "dtype");
  if (problem.is_object() && problem.contains("role_dtypes") && problem["role_dtypes"].is_object()) {
    std::vector<std::string> own;
    for (const auto& [role, d] : problem["role_dtypes"].items())
      if (d.is_string()) own.push_back(fmt::format("{}: {}", role, d.get<std::string>()));
    if (!own.empty()) dtype += fmt::format(" ({})", fmt::join(own, ", "));
  }
  return dtype;
}

double VerifyRecord::n_k() const {
  return problem.is_object() && problem.contains("n_k") && problem["n_k"].is_number() ? problem["n_k"].get<double>()
                                                                                     : std::numeric_limits<double>::quiet_NaN();
}

std::string VerifyRecord::mask() const {
  std::vector<std::string> parts;
  const std::string causal = text_or_empty(problem, "causal");
  if (!causal.empty() && causal != "none") parts.push_back("causal " + causal);
  // A window other than causal: its sides (-1 unbounded) and alignment, as the repro string says it.
  if (problem.is_object() && problem.contains("window") && problem["window"].is_object()) {
    const json& w = problem["window"];
    auto side = [&](const char* key) { return w.contains(key) && w[key].is_number_integer() ? w[key].get<long long>() : -1LL; };
    parts.push_back(fmt::format("window {},{}@{}", side("left"), side("right"), text_or_empty(w, "align")));
  }
  if (problem.is_object() && problem.contains("padding")) parts.push_back("pad " + text_or_empty(problem["padding"], "kind"));
  if (problem.is_object() && problem.contains("bool_mask")) parts.push_back("bool");
  if (problem.is_object() && problem.contains("bias"))
    parts.push_back(text_or_empty(problem["bias"], "kind") == "alibi" ? "alibi" : "bias");
  // The score modifications (core/score_pipeline.hpp), each with its real settings' values: a
  // soft-capped case is its own variant ("softcap 30", "dropout 0.1", "sink"). Read from the repro
  // string, the canonical form; a record whose string no longer parses groups without them.
  if (const std::string repro = text_or_empty(problem, "repro"); !repro.empty()) {
    try {
      const Problem p = parse_problem(repro);
      for (const ScoreModificationRow& row : score_modification_rows) {
        if (!row.used_by(p)) continue;
        std::string part(row.name);
        for (const ScoreSetting& setting : row.settings)
          if (!setting.integer) part += fmt::format(" {:g}", setting.get(p).real);
        parts.push_back(std::move(part));
      }
    } catch (const InputError&) {
    }
  }
  if (parts.empty()) return "none";
  std::string out = parts.front();
  for (std::size_t i = 1; i < parts.size(); ++i) out += " + " + parts[i];
  return out;
}

VerifyRecord read_verify_record(const json& r, std::size_t index, const std::string& source) {
  const std::string which = fmt::format("{}: records[{}]", source, index);
  if (!r.is_object()) throw InputError(which + " is not an object");
  const std::string named = fmt::format("{} ({}, case {})", which, text_or_empty(r, "implementation"), r.contains("case_index") ? r["case_index"].dump() : "?");
  auto fail = [&](const std::string& what) { throw InputError(fmt::format("{}: {}", named, what)); };
  auto required = [&](const char* key) {
    if (!r.contains(key)) fail(fmt::format("no {}", key));
    if (!r[key].is_string()) fail(fmt::format("\"{}\" is not a string", key));
    return r[key].get<std::string>();
  };
  const Reader read(fail);
  VerifyRecord v;
  v.status = r.contains("status") && r["status"].is_string() ? r["status"].get<std::string>() : "";
  if (v.status.empty()) fail("no status (expected fail, pass, skip)");
  if (v.status != "pass" && v.status != "fail" && v.status != "skip") fail(fmt::format("unknown status '{}' (expected fail, pass, skip)", v.status));
  v.implementation = required("implementation");
  v.repro = required("repro");
  v.label = r.contains("label") && r["label"].is_string() ? r["label"].get<std::string>() : v.repro;
  if (r.contains("case_index") && r["case_index"].is_number_integer()) v.case_index = r["case_index"].get<std::int64_t>();
  if (r.contains("problem") && r["problem"].is_object()) v.problem = r["problem"];
  if (r.contains("reference")) {
    const json& ref = read.object(r, "reference", "");
    VerifyReference& out = v.reference.emplace();
    read.count(ref, "rows_total", "reference.", out.rows_total);
    read.count(ref, "rows_checked", "reference.", out.rows_checked);
    read.count(ref, "rows_float128", "reference.", out.rows_float128);
    out.sampled = ref.value("sampled", false);
    read.figure(ref, "self_error_bound_ulps", "reference.", out.self_error_bound_ulps);
    read.figure(ref, "seconds", "reference.", out.seconds);
  }
  if (r.contains("baseline")) {
    const json& b = read.object(r, "baseline", "");
    VerifyBaseline& out = v.baseline.emplace();
    read.string(b, "algorithm", "baseline.", out.algorithm);
    if (b.contains("metrics")) out.metrics = read.metrics(read.object(b, "metrics", "baseline."), "baseline.metrics.");
    else out.metrics.max_ulps = VerifyMetrics::nan_ulps;
    read.figure(b, "error_over_a_priori_bound", "baseline.", out.error_over_a_priori_bound);
    read.figure(b, "score_rounding", "baseline.", out.score_rounding);
    read.figure(b, "lse_score_rounding", "baseline.", out.lse_score_rounding);
    if (b.contains("gradients")) out.gradients = read.gradients(read.object(b, "gradients", "baseline."), "baseline.gradients.");
  }
  if (r.contains("projected_from")) {
    const json& p = r["projected_from"];
    v.projected_from.emplace();
    if (p.is_object()) {
      read.string(p, "repro", "projected_from.", v.projected_from->repro);
      read.string(p, "changes", "projected_from.", v.projected_from->changes);
    }
  }
  read.string(r, "inputs_from", "", v.inputs_from);
  v.skip_reason = text_or_empty(r, "skip_reason");
  read.strings(r, "reasons", v.reasons);
  if (v.measured()) {
    if (!r.contains("metrics") || !r["metrics"].is_object()) fail("missing \"metrics\"");
    for (const char* key : {"max_abs", "max_ulps"})
      if (!r["metrics"].contains(key)) fail(fmt::format("metrics: missing \"{}\"", key));
    v.metrics = read.metrics(r["metrics"], "metrics.");
  }
  if (r.contains("gradients")) v.gradients = read.gradients(read.object(r, "gradients", ""), "gradients.");
  read.strings(r, "gradients_not_computed", v.gradients_not_computed);
  read.string(r, "isolation", "", v.isolation);
  if (r.contains("roles")) {
    const json& roles = read.object(r, "roles", "");
    for (const auto& [name, role] : roles.items()) {
      const std::string at = "roles." + name + ".";
      if (!role.is_object()) fail(fmt::format("roles.{} is not an object", name));
      VerifyRoleVerdict& out = v.roles.emplace_back();
      out.role = name;
      if (role.contains("passed") && !role["passed"].is_boolean()) fail(fmt::format("{}passed is not true or false", at));
      out.passed = role.value("passed", true);
      read.figure(role, "max_abs", at, out.max_abs);
      read.figure(role, "reference_max_abs", at, out.reference_max_abs);
      read.figure(role, "tolerance", at, out.tolerance);
      read.strings(role, "reasons", out.reasons);
    }
    std::stable_sort(v.roles.begin(), v.roles.end(), [](const VerifyRoleVerdict& a, const VerifyRoleVerdict& b) { return role_rank(a.role) < role_rank(b.role); });
  }
  read.figure(r, "tolerance", "", v.tolerance);
  read.figure(r, "ratio_to_baseline", "", v.ratio_to_baseline);
  if (r.contains("budget_used")) v.budget_used = read.figure(r["budget_used"], "budget_used");
  read.figure(r, "seconds", "", v.seconds);
  if (r.contains("diagnosis") && r["diagnosis"].is_object()) {
    const json& d = r["diagnosis"];
    VerifyDiagnosis& out = v.diagnosis.emplace();
    read.string(d, "summary", "diagnosis.", out.summary);
    if (d.contains("matches") && d["matches"].is_array())
      for (const json& m : d["matches"]) {
        VerifyDiagnosisMatch& match = out.matches.emplace_back();
        if (!m.is_object()) continue;
        read.string(m, "hypothesis", "diagnosis.matches[].", match.hypothesis);
        read.string(m, "explanation", "diagnosis.matches[].", match.explanation);
        read.figure(m, "max_abs", "diagnosis.matches[].", match.max_abs);
        read.figure(m, "tolerance", "diagnosis.matches[].", match.tolerance);
      }
    read.strings(d, "tested", out.tested);
    read.count(d, "rows", "diagnosis.", out.rows);
    read.string(d, "note", "diagnosis.", out.note);
    read.string(d, "nondeterminism", "diagnosis.", out.nondeterminism);
    read.string(d, "fully_masked_rows", "diagnosis.", out.fully_masked_rows);
  }
  read.string(r, "diagnosis_skipped", "", v.diagnosis_skipped);
  return v;
}

}  // namespace attn

#include "reports/verify_report.hpp"

#include <cmath>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <map>
#include <stdexcept>
#include <utility>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/error.hpp"
#include "core/result_file.hpp"
#include "records/result_schema.hpp"
#include "reports/report_fields.hpp"

namespace attn {
namespace {

// The figures ErrorMetrics (the output's) and TensorErrors (a gradient's) share, their flat
// indices written as coordinates by `at`.
template <class Errors, class Coordinates>
VerifyMetrics error_figures(const Errors& m, const Coordinates& at) {
  VerifyMetrics v;
  v.compared = m.compared;
  v.reference_max_abs = m.reference_max_abs;
  v.max_abs = m.max_abs;
  v.max_abs_at = at(m.max_abs_index);
  v.max_rel = m.max_rel;
  v.rel_floor = m.rel_floor;
  v.max_rel_at = at(m.max_rel_index);
  v.normwise_rel = m.normwise_rel;
  v.rms = m.rms;
  v.max_ulps = m.max_ulps;
  v.max_ulps_at = at(m.max_ulps_index);
  v.nan = m.nan;
  v.pos_inf = m.pos_inf;
  v.neg_inf = m.neg_inf;
  v.unwritten = m.unwritten;
  return v;
}

VerifyMetrics metrics_record(const Problem& p, const ErrorMetrics& m) {
  VerifyMetrics v = error_figures(m, [&](std::int64_t flat) { return output_coordinates(p, flat); });
  v.fully_masked_nan = m.fully_masked_nan;
  v.fully_masked_inf = m.fully_masked_inf;
  v.fully_masked_rows = m.fully_masked_rows;
  v.fully_masked_violations = m.fully_masked_violations;
  v.fully_masked_holding = {m.fully_masked_nan_rows, m.fully_masked_inf_rows, m.fully_masked_zero_rows, m.fully_masked_finite_rows};
  if (m.has_lse) v.lse = VerifyMetrics::Lse{m.lse_max_abs, m.lse_violations};
  return v;
}

VerifyMetrics metrics_record(const Problem& p, const TensorErrors& m) {
  return error_figures(m, [&](std::int64_t flat) { return tensor_coordinates(p, m.role, flat); });
}

// A backward record's worst gradient: the largest share of its tolerance (the first on a tie).
const TensorErrors* worst_gradient(const Record& r) {
  const TensorErrors* worst = nullptr;
  double worst_share = -1;
  for (const TensorErrors& g : r.gradients) {
    const RoleVerdict* v = r.verdict.role(g.role);
    const double share = v == nullptr ? 0.0 : v->tolerance > 0 ? g.max_abs / v->tolerance : (g.max_abs == 0 ? 0.0 : INFINITY);
    if (worst == nullptr || !(share <= worst_share)) worst = &g, worst_share = share;
  }
  return worst;
}

VerifyDiagnosis diagnosis_record(const Diagnosis& d) {
  VerifyDiagnosis v;
  v.summary = d.summary();
  for (const DiagnosisMatch& m : d.matches) v.matches.push_back({m.hypothesis, m.explanation, m.max_abs, m.tolerance});
  v.tested = d.tested;
  v.rows = d.rows;
  v.note = d.note;
  v.nondeterminism = d.nondeterminism;
  v.fully_masked_rows = d.fully_masked_rows;
  return v;
}

// The share of its error budget a case used: the worst error of a judged role (the output, and
// the LSE when one is returned) over its tolerance. Unlike a ratio to the naive algorithm's error
// it stays finite when the naive error is zero, and 100% is the line between pass and fail.
double budget_used(const Verdict& v) {
  double used = 0;
  for (const RoleVerdict& r : v.roles) {
    // o and the gradients: a NaN error stays NaN (std::max below keeps its first argument).
    if (r.role == Role::o || r.role == Role::dq || r.role == Role::dk || r.role == Role::dv || r.role == Role::d_sink || r.role == Role::d_bias) {
      const double share = r.tolerance > 0 ? r.max_abs / r.tolerance : (r.max_abs == 0 ? 0.0 : std::numeric_limits<double>::infinity());
      used = std::isnan(share) ? share : std::isnan(used) ? used : std::max(share, used);
    } else if (r.tolerance > 0) {
      used = std::max(used, r.max_abs / r.tolerance);
    }
  }
  return used;
}

std::string format_error(double x) { return std::isfinite(x) ? fmt::format("{:.2e}", x) : fmt::format("{}", x); }

std::string format_ulps(std::uint64_t ulps) {
  return ulps == std::numeric_limits<std::uint64_t>::max() ? "nan" : (ulps > 999999 ? fmt::format("{:.1e}", double(ulps)) : std::to_string(ulps));
}

// One line per implementation that skipped cases, its reasons most frequent first (at most
// three; the results JSON, whatever --json named it, has each case's).
void print_skips(std::ostream& os, const VerifyRun& run) {
  std::vector<std::string> order;
  std::map<std::string, std::map<std::string, int>> reasons;
  for (const Record& r : run.records) {
    if (r.status != Status::skip) continue;
    if (!reasons.count(r.implementation)) order.push_back(r.implementation);
    ++reasons[r.implementation][r.skip_reason];
  }
  for (const std::string& implementation : order) {
    std::vector<std::pair<int, std::string>> by_count;
    int total = 0;
    for (const auto& [reason, count] : reasons[implementation]) by_count.emplace_back(count, reason), total += count;
    std::stable_sort(by_count.begin(), by_count.end(), [](auto& a, auto& b) { return a.first > b.first; });
    std::vector<std::string> shown;
    for (std::size_t n = 0; n < by_count.size() && n < 3; ++n)
      shown.push_back(by_count.size() == 1 ? by_count[n].second : fmt::format("{} ({})", by_count[n].second, by_count[n].first));
    if (by_count.size() > 3) shown.push_back(fmt::format("{} other reasons (each case's is in the results JSON)", by_count.size() - 3));
    const std::string which = total == int(run.named_cases) ? "every case" : fmt::format("{} of {} cases", total, run.named_cases);
    fmt::print(os, "skipped {} for {}: {}\n", which, implementation, fmt::join(shown, "; "));
  }
}

// "lse: " before a reason of the LSE's verdict alone; "" before one of every role's (an unsound
// yardstick) or of none (the run threw).
std::string role_prefix(const Verdict& v, const std::string& reason) {
  const RoleVerdict* owner = nullptr;
  for (const RoleVerdict& role : v.roles) {
    if (std::find(role.reasons.begin(), role.reasons.end(), reason) == role.reasons.end()) continue;
    if (owner != nullptr) return "";
    owner = &role;
  }
  return owner != nullptr ? fmt::format("{}: ", to_string(owner->role)) : "";
}

}  // namespace

VerifyRecord verify_record(const Record& r) {
  const CaseContext& c = *r.context;
  VerifyRecord v;
  v.implementation = r.implementation;
  v.case_index = std::int64_t(c.index);
  v.label = c.problem.label();
  v.repro = c.problem.repro();
  v.problem = c.problem;
  v.status = to_string(r.status);
  v.reference = VerifyReference{c.rows_total, c.rows_checked, c.reference_rows_float128, c.sampled, c.reference_self_bound_ulps, c.reference_seconds};
  v.baseline = VerifyBaseline{"cpu_naive in the same precision", metrics_record(c.problem, c.baseline), c.baseline_bound_ratio,
                              c.score_rounding.out, c.score_rounding.lse, {}};
  for (std::size_t n = 0; n < c.gradient_baseline.size(); ++n)
    v.baseline->gradients.push_back({std::string(to_string(c.gradient_baseline[n].role)), metrics_record(c.problem, c.gradient_baseline[n]),
                                     n < c.gradient_term_rounding.size() ? c.gradient_term_rounding[n] : 0.0});
  if (!r.projected_from.empty()) v.projected_from = VerifyRecord::Projection{r.projected_from, r.projection};
  // Given inputs: the repro string describes the case but cannot regenerate its tensors.
  v.inputs_from = c.inputs_from;
  if (r.status == Status::skip) {
    v.skip_reason = r.skip_reason;
    return v;
  }
  if (const TensorErrors* worst = worst_gradient(r)) {
    v.metrics = metrics_record(c.problem, *worst);
    v.tolerance = r.verdict.role(worst->role)->tolerance;
    for (const TensorErrors& g : r.gradients) v.gradients.push_back({std::string(to_string(g.role)), metrics_record(c.problem, g), 0.0});
    for (Role role : r.gradients_not_computed) v.gradients_not_computed.emplace_back(to_string(role));
    // The baseline's metrics follow the record's: the same gradient's.
    for (const TensorErrors& g : c.gradient_baseline)
      if (g.role == worst->role) v.baseline->metrics = metrics_record(c.problem, g);
  } else {
    v.metrics = metrics_record(c.problem, r.metrics);
    v.tolerance = r.verdict.tolerance();
  }
  v.isolation = r.isolation;
  v.ratio_to_baseline = r.verdict.ratio;
  v.budget_used = budget_used(r.verdict);
  v.reasons = r.verdict.reasons;
  for (const RoleVerdict& role : r.verdict.roles)
    v.roles.push_back({std::string(to_string(role.role)), role.pass, role.max_abs, role.reference_max_abs, role.tolerance, role.reasons});
  v.seconds = r.seconds;
  if (r.diagnosis.ran) v.diagnosis = diagnosis_record(r.diagnosis);
  v.diagnosis_skipped = r.diagnosis_skipped;
  return v;
}

nlohmann::json verify_to_json(const VerifyRun& run, const VerifyOptions& options, const nlohmann::json& context, std::string_view command) {
  nlohmann::json records = nlohmann::json::array();
  for (const Record& r : run.records) records.push_back(to_json(verify_record(r)));
  nlohmann::json coverage = nlohmann::json::object();
  for (const auto& [implementation, declared] : run.declared_features) {
    const Coverage c = coverage_of(run, implementation);
    coverage[implementation] = {{"cases_run", c.ran},     {"cases_projected", c.projected}, {"cases_skipped", c.skipped},
                                {"exercised", c.exercised}, {"not_exercised", c.missing}};
  }
  return {{"schema", "attnbench.verify"},
          {"command", command},
          {"schema_version", result_schema_version},
          {"context", context},
          {"pass_rule", {{"k", options.rule.k}, {"floor_ulps", options.rule.floor_ulps}}},
          {"summary", {{"passed", run.passed()}, {"failed", run.failed()}, {"skipped", run.skipped()}, {"cases", run.named_cases}}},
          // Whether the run ended: a file saved while it goes on says false (VerifyResultsFile).
          {"complete", true},
          {"coverage", coverage},
          {"records", records}};
}

void write_json_file(const std::string& path, const nlohmann::json& document) {
  write_result_file(path, document.dump(2) + '\n', "results");
}

void ResultsFile::save(const nlohmann::json& document) {
  try {
    write_json_file(path_, document);
  } catch (const InputError& e) {
    if (!std::exchange(warned_, true))
      fmt::print(stderr, "attnbench: warning: {} (the run goes on; its results are saved at the end)\n", e.what());
  }
}

void ResultsFile::finish(const nlohmann::json& document) {
  try {
    write_json_file(path_, document);
    return;
  } catch (const InputError& e) {
    const std::string rescue = write_rescue_file(path_, document.dump(2) + '\n');
    if (rescue.empty()) throw InputError(fmt::format("{}; the results could not be saved anywhere else either", e.what()));
    throw InputError(fmt::format("{}; the results were saved to {} instead", e.what(), rescue));
  }
}

void print_verify_header(std::ostream& os) {
  fmt::print(os, "{:<16} {:>4}  {:<52} {:>9} {:>8} {:>7}  {}\n", "impl", "case", "problem", "max abs", "ulps", "budget", "verdict");
}

void print_verify_row(std::ostream& os, const Record& r) {
  const CaseContext& c = *r.context;
  std::string label = c.problem.label();
  if (c.sampled) label += fmt::format(" [{}/{} rows]", c.rows_checked, c.rows_total);
  if (!r.projected_from.empty()) label += " (projected)";
  // Skips are summed up per implementation after the table (print_verify_summary): a CUDA
  // implementation on a machine without a GPU would otherwise fill it with one reason.
  if (r.status == Status::skip) return;
  // A run that failed before anything was judged (a crash, a timeout, an exception) has no errors
  // to show: the row says what happened instead of zeros.
  if (r.status == Status::fail && r.verdict.roles.empty()) {
    std::string why = r.verdict.reasons.empty() ? std::string("run failed") : r.verdict.reasons.front();
    if (why.size() > 100) why = why.substr(0, 97) + "...";
    fmt::print(os, "{:<16} {:>4}  {:<52} {:>9} {:>8} {:>7}  FAIL  {}\n", r.implementation, c.index, label, "-", "-", "-", why);
    return;
  }
  // A backward case shows its worst gradient's errors.
  const TensorErrors* worst = worst_gradient(r);
  const std::int64_t ulps_index = worst ? worst->max_ulps_index : r.metrics.max_ulps_index;
  const std::string ulps = ulps_index < 0 ? "-" : format_ulps(worst ? worst->max_ulps : r.metrics.max_ulps);
  fmt::print(os, "{:<16} {:>4}  {:<52} {:>9} {:>8} {:>7}  {}\n", r.implementation, c.index, label,
             format_error(worst ? worst->max_abs : r.metrics.max_abs), ulps,
             format_budget(budget_used(r.verdict)), r.status == Status::pass ? "PASS" : "FAIL");
  if (r.diagnosis.ran) fmt::print(os, "{:<22}diagnosis: {}\n", "", r.diagnosis.summary());
}

void print_verify_summary(std::ostream& os, const VerifyRun& run, const std::function<std::string(const Record&)>& rerun_command) {
  fmt::print(os, "\n{} passed, {} failed, {} skipped over {} cases\n", run.passed(), run.failed(), run.skipped(), run.named_cases);
  for (const auto& [implementation, declared] : run.declared_features) {
    const Coverage c = coverage_of(run, implementation);
    fmt::print(os, "coverage of {}: {} of {} cases ran ({} as projections onto what it declares), {} skipped\n", implementation, c.ran,
               run.named_cases, c.projected, c.skipped);
    if (c.ran == 0) continue;
    std::vector<std::string> exercised;
    for (const auto& [feature, count] : c.exercised) exercised.push_back(fmt::format("{} ({})", feature, count));
    fmt::print(os, "  exercised: {}\n", fmt::join(exercised, ", "));
    if (!c.missing.empty()) fmt::print(os, "  declared but not exercised: {}\n", fmt::join(c.missing, ", "));
  }
  print_skips(os, run);
  for (const Record& r : run.records) {
    if (r.status != Status::fail) continue;
    fmt::print(os, "\nFAIL {} on case {} ({})\n", r.implementation, r.context->index, r.context->problem.label());
    if (!r.projected_from.empty()) fmt::print(os, "  projected from '{}' ({})\n", r.projected_from, r.projection);
    for (const auto& reason : r.verdict.reasons) fmt::print(os, "  - {}{}\n", role_prefix(r.verdict, reason), reason);
    if (!r.diagnosis_skipped.empty()) fmt::print(os, "  ({})\n", r.diagnosis_skipped);
    if (r.diagnosis.ran) {
      const Diagnosis& d = r.diagnosis;
      if (!d.nondeterminism.empty()) fmt::print(os, "  diagnosis: {}\n", d.nondeterminism);
      if (d.matches.empty() && d.nondeterminism.empty())
        fmt::print(os, "  diagnosis: {}\n", d.note.empty() ? "no known mistake matches" : "no known mistake matches (" + d.note + ")");
      for (const DiagnosisMatch& m : d.matches) fmt::print(os, "  diagnosis: {}{}\n", d.nondeterminism.empty() ? "" : "both runs match: ", m.explanation);
      if (!d.fully_masked_rows.empty()) fmt::print(os, "  fully masked rows: {}\n", d.fully_masked_rows);
    }
    if (r.metrics.max_abs_index >= 0)
      fmt::print(os, "  worst element: {}\n", output_coordinates(r.context->problem, r.metrics.max_abs_index));
    if (rerun_command)
      fmt::print(os, "  rerun: {}\n", rerun_command(r));
    else
      fmt::print(os, "  rerun: attnbench verify --impl {} --case '{}'\n", r.implementation, r.context->problem.repro());
  }
}

}  // namespace attn

#pragma once
// A record of a verify result file (schema "attnbench.verify"): one case on one implementation,
// typed, with its one writer (to_json, what verify, check and validate write through
// reports/verify_report.hpp) and its one reader (read_verify_record, the report's and the gate's).
// reports/README.md documents every field. Unknown fields are ignored.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace attn {

// An output's errors against the reference (core/metrics.hpp's ErrorMetrics, with its flat
// indices written as coordinates, "-" for none).
struct VerifyMetrics {
  static constexpr std::uint64_t nan_ulps = std::numeric_limits<std::uint64_t>::max();  // the writer's NaN marker
  std::int64_t compared = 0;
  double reference_max_abs = 0, max_abs = 0;
  std::string max_abs_at = "-";
  double max_rel = 0, rel_floor = 0;
  std::string max_rel_at = "-";
  double normwise_rel = 0, rms = 0;
  std::uint64_t max_ulps = 0;
  std::string max_ulps_at = "-";  // "-": every compared element near zero, no ulps measured
  std::int64_t nan = 0, pos_inf = 0, neg_inf = 0, fully_masked_nan = 0, fully_masked_inf = 0, unwritten = 0;
  std::int64_t fully_masked_rows = 0, fully_masked_violations = 0;
  struct Holding {  // what the fully masked rows hold
    std::int64_t nan = 0, inf = 0, zeros = 0, finite_nonzero = 0;
  } fully_masked_holding;
  struct Lse {
    double max_abs = 0;
    std::int64_t violations = 0;
  };
  std::optional<Lse> lse;  // when the implementation returns the row LSE

  double ulps() const { return max_ulps == nan_ulps ? std::numeric_limits<double>::quiet_NaN() : double(max_ulps); }
};

struct VerifyReference {
  std::int64_t rows_total = 0, rows_checked = 0, rows_float128 = 0;
  bool sampled = false;
  double self_error_bound_ulps = 0;
  double seconds = 0;
};

// A gradient's errors (a backward case's dq, dk, dv, d_sink or d_bias), its role named; the baseline's carry the
// term rounding its yardstick is floored at (core/pass_rule.hpp, judge_gradient).
struct VerifyGradient {
  std::string role;
  VerifyMetrics metrics;
  double term_rounding = 0;
};

// The naive algorithm in the same precision: the yardstick of the pass rule.
struct VerifyBaseline {
  std::string algorithm;
  VerifyMetrics metrics;  // the output's (a backward case: its worst gradient's, as the record's)
  double error_over_a_priori_bound = 0, score_rounding = 0, lse_score_rounding = 0;
  std::vector<VerifyGradient> gradients;  // a backward case's, "gradients" in the file
};

struct VerifyDiagnosisMatch {
  std::string hypothesis, explanation;
  double max_abs = 0, tolerance = 0;
};

struct VerifyDiagnosis {
  std::string summary;
  std::vector<VerifyDiagnosisMatch> matches;
  std::vector<std::string> tested;
  std::int64_t rows = 0;
  std::string note, nondeterminism, fully_masked_rows;
};

// One judged role's verdict (core/pass_rule.hpp's RoleVerdict): "o", and "lse" when the
// implementation returns it. The case's status is their conjunction (or fail where the run threw
// and nothing was judged: then there are none).
struct VerifyRoleVerdict {
  std::string role;  // core/tensor_role.hpp's to_string
  bool passed = true;
  double max_abs = 0, reference_max_abs = 0, tolerance = 0;
  std::vector<std::string> reasons;
  bool operator==(const VerifyRoleVerdict&) const = default;
};

struct VerifyRecord {
  std::string implementation, repro, label;  // label: the repro string where the file has none
  std::int64_t case_index = 0;
  std::string status;                        // pass, fail or skip
  // The case as run: core's Problem as its to_json writes it (core/problem.hpp reads it back).
  // Kept as written, so a record whose problem this build would not accept still reads.
  nlohmann::json problem = nlohmann::json::object();
  std::optional<VerifyReference> reference;
  std::optional<VerifyBaseline> baseline;
  struct Projection {
    std::string repro, changes;
  };
  std::optional<Projection> projected_from;  // ran as its projection onto what the implementation declares
  std::string inputs_from;                   // given inputs: where they are; "" when the repro regenerates them
  std::string skip_reason;                   // a skip's
  // A pass's or a fail's (written only for those). A backward case's metrics are its worst
  // gradient's (the largest share of its tolerance), whose role the coordinates name ("dk b=0 ...").
  std::optional<VerifyMetrics> metrics;
  std::vector<VerifyGradient> gradients;     // a backward case's, dq dk dv (d_sink d_bias where judged); "gradients" in the file
  // A backward case's parameter gradients (d_sink, d_bias) that its problem has and the
  // implementation does not compute (undeclared): neither judged nor passed. Written when any.
  std::vector<std::string> gradients_not_computed;
  std::string isolation;                     // a failed backward's rerun on the reference's O and LSE: whose fault
  double tolerance = 0, ratio_to_baseline = 0;
  std::optional<double> budget_used;         // the worst error over its tolerance: 1 is the pass line
  std::vector<std::string> reasons;          // why it failed
  std::vector<VerifyRoleVerdict> roles;      // a pass's or a fail's, in role order; "roles" in the file
  double seconds = 0;
  std::optional<VerifyDiagnosis> diagnosis;  // a diagnosed failure's
  std::string diagnosis_skipped;             // why a failure was not diagnosed, or ""

  bool measured() const { return status == "pass" || status == "fail"; }
  // What the report and the gate use. Errors are NaN on a skip; a non-finite error in the file
  // reads as NaN or infinity, the NaN ulps marker as NaN.
  double max_abs() const { return metrics ? metrics->max_abs : std::numeric_limits<double>::quiet_NaN(); }
  double max_ulps() const { return metrics ? metrics->ulps() : std::numeric_limits<double>::quiet_NaN(); }
  const VerifyRoleVerdict* role(std::string_view name) const {
    for (const VerifyRoleVerdict& r : roles)
      if (r.role == name) return &r;
    return nullptr;
  }
  bool ulps_measured() const { return !metrics || metrics->max_ulps_at != "-"; }
  bool projected() const { return projected_from.has_value(); }
  bool sampled() const { return reference && reference->sampled; }
  std::string diagnosis_summary() const { return diagnosis ? diagnosis->summary : std::string{}; }
  double baseline_max_ulps() const { return baseline ? baseline->metrics.ulps() : std::numeric_limits<double>::quiet_NaN(); }
  // From the problem block: its dtype (with the roles in a dtype of their own: "f16 (o: f32)"),
  // n_k (NaN without one) and mask in words ("none", "causal top_left + pad right", "window
  // 3,0@bottom_right", "bool", "alibi", ...): the report groups its verdict table by them.
  std::string dtype() const;
  double n_k() const;
  std::string mask() const;
};

// The record as the file holds it; reading it back gives the same record.
nlohmann::json to_json(const VerifyRecord& record);

// Reads records[index]; throws InputError naming `source`, the record (its index, implementation
// and case) and the fault: no implementation, repro or status; a status other than pass, fail or
// skip; a pass or fail without metrics (max_abs, max_ulps); a figure that is not a number; ulps
// that are not a whole number. Other fields may be missing (older or hand-written files): they
// read as the defaults above.
VerifyRecord read_verify_record(const nlohmann::json& record, std::size_t index, const std::string& source);

}  // namespace attn

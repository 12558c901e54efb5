#pragma once
// A record of a verify result file (schema "attnbench.verify"), typed, with its one reader: what
// the report and the gate use of each case. The writer is verify's own (reports/verify_report.hpp,
// from the run's records); reports/README.md documents every field. Unknown fields are ignored.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attn {

struct VerifyRecord {
  std::string implementation, repro, label;  // label: the repro string where the file has none
  std::string status;                        // pass, fail or skip
  std::int64_t case_index = 0;
  std::vector<std::string> reasons;          // why it failed
  std::string skip_reason;
  // The output's errors (pass and fail records; NaN on a skip). A non-finite error ("nan",
  // "inf") reads as NaN or infinity; max_ulps is NaN for the writer's NaN marker (2^64 - 1).
  double max_abs = std::numeric_limits<double>::quiet_NaN(), max_ulps = std::numeric_limits<double>::quiet_NaN();
  bool ulps_measured = true;                 // false where every compared element is near zero (max_ulps_at "-")
  std::optional<double> budget_used;         // the worst error over its tolerance: 1 is the pass line
  bool projected = false;                    // ran as its projection onto what the implementation declares
  bool sampled = false;                      // rows compared on a sample only
  std::string diagnosis;                     // the summary of a diagnosed failure, else ""
  double baseline_max_ulps = std::numeric_limits<double>::quiet_NaN();  // the naive yardstick's, where recorded
  // From the problem block: its dtype, n_k and mask in words ("none", "causal top_left + pad
  // right", "bool", ...).
  std::string dtype, mask;
  double n_k = std::numeric_limits<double>::quiet_NaN();

  bool measured() const { return status == "pass" || status == "fail"; }
};

// Reads records[index]; throws InputError naming `source`, the record (its index, implementation
// and case) and the fault: no implementation, repro or status; a status other than pass, fail or
// skip; a pass or fail without metrics (max_abs, max_ulps); a figure that is not a number.
VerifyRecord read_verify_record(const nlohmann::json& record, std::size_t index, const std::string& source);

}  // namespace attn

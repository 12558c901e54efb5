#pragma once
// The default pass rule of DESIGN.md: an implementation's max abs error is at most k times the
// error of the naive algorithm run in the same precision, plus a floor of a few ulps of the
// output dtype (at the largest reference magnitude). Any NaN or Inf where the reference is
// finite fails; so does an element left unwritten, a fully masked row that breaks the declared
// policy, and (when the implementation returns it) an LSE outside the same rule.
#include <string>
#include <vector>

#include "core/metrics.hpp"

namespace attn {

struct PassRule {
  double k = 2.0;
  double floor_ulps = 2.0;
};

struct Verdict {
  bool pass = true;
  double tolerance = 0;   // the max abs error allowed
  double ratio = 0;       // max abs error / naive max abs error (0 when both are 0, inf when only naive is)
  std::vector<std::string> reasons;  // why it failed, one line each
};

// The yardstick is the naive baseline's max abs error, or score_rounding when larger: the
// typical output error that rounding the scores (sequential dot products, scale, bias) causes
// in the working precision (the reference's score_rounding_max). Any same-precision implementation makes that error; on small problems the
// naive one's single draw of roundings can cancel by luck, which would make the rule a coin toss.
Verdict judge(const PassRule& rule, DType dtype, const ErrorMetrics& measured, const ErrorMetrics& baseline,
              double score_rounding = 0);

}  // namespace attn

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

// The typical error that rounding the scores (sequential dot products, scale, bias) causes in
// the working precision, in the output and in the LSE (the reference computes both). Any
// same-precision implementation makes that error; on small problems the naive one's single draw
// of roundings can cancel by luck (an f64 row with one key: its LSE is exact by luck on one CPU
// and not on another), which would make the rule a coin toss.
struct ScoreRounding {
  double out = 0;
  double lse = 0;
};

// The yardstick is the naive baseline's max abs error, or the score rounding when larger; the
// same for the LSE.
Verdict judge(const PassRule& rule, DType dtype, const ErrorMetrics& measured, const ErrorMetrics& baseline,
              const ScoreRounding& score_rounding = {});

}  // namespace attn

#pragma once
// The default pass rule of DESIGN.md: an implementation's max abs error is at most k times the
// error of the naive algorithm run in the same precision, plus a floor of a few ulps of the
// output dtype (at the largest reference magnitude). Any NaN or Inf where the reference is
// finite fails; so does an element left unwritten, a fully masked row that breaks the declared
// policy, and (when the implementation returns it) an LSE outside the same rule. Each judged
// role (o, lse) gets its own verdict; the case's is their conjunction.
#include <string>
#include <vector>

#include "core/metrics.hpp"
#include "core/precision.hpp"
#include "core/problem.hpp"
#include "core/tensor_role.hpp"

namespace attn {

struct PassRule {
  double k = 2.0;
  double floor_ulps = 2.0;
};

// One judged tensor's verdict (PyTorch's one verdict per named tensor): its error against the
// reference, the error the rule allows it and why it failed.
struct RoleVerdict {
  Role role = Role::o;
  bool pass = true;
  double max_abs = 0;
  double reference_max_abs = 0;  // max |expected| of the role
  double tolerance = 0;
  std::vector<std::string> reasons;  // why it failed, one line each
};

struct Verdict {
  bool pass = true;
  double ratio = 0;       // max abs error / naive max abs error (0 when both are 0, inf when only naive is)
  std::vector<std::string> reasons;  // why it failed, one line each: the roles' in role order
  // o, then lse when one was returned; pass is their conjunction. A failure outside every role
  // (the run threw, verification/verify.cpp) fails the case with a reason of its own.
  std::vector<RoleVerdict> roles;
  const RoleVerdict* role(Role r) const {
    for (const RoleVerdict& v : roles)
      if (v.role == r) return &v;
    return nullptr;
  }
  // The max abs error allowed in o (0 when nothing was judged).
  double tolerance() const {
    const RoleVerdict* o = role(Role::o);
    return o != nullptr ? o->tolerance : 0.0;
  }
};

// The typical error that rounding the scores (sequential dot products, scale, bias) causes in
// the working precision, in the output and in the LSE (the reference computes both). Any
// same-precision implementation makes that error; on small problems the naive one's single draw
// of roundings can cancel by luck (an f64 row with one key: its LSE is exact by luck on one CPU
// and not on another), which would make the rule a coin toss. For the output the score errors
// are taken as independent; for the LSE as of one sign (reference/reference_row.hpp): a shift
// common to a row's scores cancels in the output but is the LSE's error itself, and tensor cores
// round their f32 accumulation one way (toward zero), shifting every score of a row alike.
struct ScoreRounding {
  double out = 0;
  double lse = 0;
};

// An implementation whose matrix products are deliberately coarser than the dtype's own
// arithmetic (TF32 tensor cores on f32 inputs: unit roundoff 2^-11, not f32's 2^-24) is held to
// the same rule in its own precision: the yardsticks (naive error, score rounding) and the ulp
// floor, for the output and the LSE, scale by unit_roundoff(matmul) / accumulation_unit_roundoff
// (2^13 for TF32 on f32). The naive algorithm's error is, to first order, proportional to the unit
// roundoff it runs in, so this is "k times the naive algorithm in that precision". 1 for the
// working precision (Capabilities' default) or a unit not coarser than the dtype's. A declared
// coarser accumulator (an f16 one: 2^-11) scales the same way, by the same first-order argument
// (the naive algorithm's sums then round to that unit): the caller passes the coarser of the two
// (Capabilities::judged_precision).
// `working` is the problem's working dtype (working_dtype(numerics)).
double precision_scale(DType working, MatmulPrecision matmul);

// The yardstick is the naive baseline's max abs error, or the score rounding when larger; the
// same for the LSE. Yardsticks and floors are multiplied by precision_scale (see above). The floor
// is in ulps of the role's dtype: o's (numerics.dtype_of(Role::o)) and the LSE's (the working dtype).
Verdict judge(const PassRule& rule, const ProblemNumerics& numerics, const ErrorMetrics& measured, const ErrorMetrics& baseline,
              const ScoreRounding& score_rounding = {}, double precision_scale = 1.0);

// A gradient's verdict (dq, dk or dv of a backward pass): the same rule, tensor by tensor. The
// yardstick is the naive backward's max abs error in the same precision or, when larger, the
// gradient's term rounding: the working precision's unit roundoff times the largest sum of its
// terms' magnitudes (reference/reference_backward.hpp, term_magnitude). dQ sums rows of dS that
// sum to zero, so a gradient can be far smaller than its terms (exactly zero at a single key); the
// naive algorithm's roundings of D and dP may cancel there by luck, a correct kernel's need not.
// The floor is in ulps of the gradient's dtype at its largest reference magnitude.
RoleVerdict judge_gradient(const PassRule& rule, DType dtype, const TensorErrors& measured, const TensorErrors& baseline, double term_rounding,
                           double precision_scale = 1.0);

}  // namespace attn

#pragma once
// The high-precision reference: attention computed from the exact stored inputs in
// Boost.Multiprecision's float128 (113-bit significand, unit roundoff u = 2^-113), then rounded
// once to the problem's dtype.
//
// Its own error is stated, not assumed. For each output element the reference also returns a
// rigorous first-principles bound on |reference before rounding - exact|, from:
//   * each score s_j = scale * (q . k_j) + bias_j carries at most gamma(d_k + 2) * A_j error,
//     A_j = scale * sum_t |q_t k_jt| + |bias_j| (products of stored inputs are exact at 113 bits);
//   * exp(s_j - m) adds u * |s_j - m| to the argument and 2u relative error;
//   * so each exponent is off by at most eta_j, and the weights move by at most
//     err_j = min(w_j * r, w_j * exp(max(0, eta_j + eta_j0 - ln w_j0)))   (j0: the largest weight)
//     with r = expm1(2 eta_max) / (1 - expm1(2 eta_max)); for j0, exp(eta_j0 + LSE_{k != j0}(ln w_k + eta_k));
//   * the weighted sum of V adds gamma(2 n + 4) * sum_j (w_j + err_j) |v_j|.
// The bound is  sum_j err_j |v_jc| + gamma(2 n + 4) sum_j (w_j + err_j) |v_jc|. In the default cases it is
// below 1e-24 ulps of f32, f16 and bf16 (so the rounded reference is the correctly rounded exact
// result unless that lies within 1e-24 ulps of a tie) and below 1e-13 ulps of f64 (float128's own
// rounding is 2^-60 f64 ulps). tests/reference_test.cpp checks it against the same computation at 256 bits.
//
// Every row is first computed by a bounded pass with the same analysis in a cheaper arithmetic
// (reference/README.md gives the argument): double for f32, f16 and bf16 problems (products of
// their inputs are exact in double; u = 2^-53, exp and log within 2 ulps, underflow bounded
// absolutely), double-word dot products and weighted sums with float128 exp/log for f64 problems
// (u = 2^-100). An output element is settled when every real within twice that bound of the
// computed value rounds to one value of the dtype: the exact output, and float128's unrounded
// output (within its own smaller bound of the exact one), round to it too, so the element is
// what the float128 reference gives. A row with any element unsettled, or anything not finite,
// is computed in float128 (rows_fallback counts them). For rows the bounded pass kept, the
// stated self-bound is that pass's (larger) bound; the LSE is within self_bound_lse_max_abs.
//
// The same analysis with the unit roundoff of the naive algorithm in the case's working
// precision (f32 for f32/f16/bf16, f64 for f64) gives an a-priori bound on the naive baseline's
// error, which the pass rule uses to check that the baseline itself is sound.
#include <cstdint>
#include <limits>
#include <vector>

#include "core/inputs.hpp"
#include "core/pass_rule.hpp"
#include "core/problem.hpp"

namespace attn {

struct ReferenceOptions {
  // Sampling, for problems too large to compute whole, is opt-in: multiply-adds (n_k (d_k + d_v)
  // per row) a case may take before the reference computes a seeded sample of rows instead of all
  // of them. Infinite by default: every row. (The bounded pass costs about 1 to 3 ns per
  // multiply-add and core for f32/f16/bf16 problems, 5 to 10 ns for f64; float128 about 80.)
  double max_work = std::numeric_limits<double>::infinity();
  std::int64_t min_sampled_rows = 48;
  bool weights = false;  // also return the softmax weights of every computed row (float128's: no bounded pass)
  int threads = 0;       // 0: every core
  // The bounded first pass (see below); false computes every row in float128 (tests compare the two).
  bool bounded_pass = true;
};

struct ReferenceResult {
  std::vector<std::int64_t> rows;  // computed rows, ascending (compute_reference_at: as given); row r = (b * h_q + h) * n_q + i
  bool sampled = false;            // fewer rows than the problem has
  std::vector<double> out;         // rows.size() * d_v, rounded once to the problem's dtype
  std::vector<double> lse;         // rows.size(), natural log, -inf for fully masked rows
  std::vector<std::uint8_t> fully_masked;  // rows.size()
  std::vector<double> weights;     // rows.size() * n_k when requested
  std::vector<double> naive_bound; // rows.size() * d_v: a-priori bound on |naive - out| (both rounded)
  // The largest typical error that rounding the scores alone causes in the working precision
  // (see reference_row.hpp), over the computed output elements and over the computed LSEs. On small problems the
  // naive baseline's own error is one draw of roundings that may cancel by luck; the pass rule
  // measures against at least this (see core/pass_rule.hpp).
  ScoreRounding score_rounding;
  double self_bound_max_abs = 0;   // max over elements of the bound on the reference's own error
  double self_bound_max_ulps = 0;  // the same in ulps of the output dtype, at each element's scale
                                   // (max of |out| and sum_j w_j |v_jc|)
  double self_bound_lse_max_abs = 0;  // max over rows of the bound on |lse - exact LSE| (as a double)
  std::int64_t rows_fallback = 0;     // rows the bounded pass did not settle, computed in float128
};

ReferenceResult compute_reference(const Problem& problem, const CaseInputs& inputs, const ReferenceOptions& options = {});
// The same on rows chosen by the caller (flat indices, any order; each in [0, problem.rows())):
// the diagnosis of a failure (verification/diagnosis.hpp) recomputes the reference on the rows
// where the failure shows, and on the rows a permutation hypothesis says they came from.
ReferenceResult compute_reference_at(const Problem& problem, const CaseInputs& inputs, std::vector<std::int64_t> rows,
                                     const ReferenceOptions& options = {});

// The rows the reference computes for this problem under these options (seeded, deterministic):
// every row when the work fits, else a sample that always includes the first and last row.
std::vector<std::int64_t> reference_rows(const Problem& problem, const ReferenceOptions& options);

}  // namespace attn

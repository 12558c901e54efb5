#pragma once
// Error metrics of an output against expected values (the reference's, rounded to the dtype),
// the NaN/Inf census, unwritten-output detection and the fully-masked-row check.
#include <cstdint>
#include <span>
#include <string>

#include "core/mask.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"

namespace attn {

// What an implementation outputs for a row whose keys are all masked (softmax undefined). any:
// nothing is promised there (a program that fills masked scores with a large finite negative
// writes the mean of V), so those rows and their LSE are not judged; the plugin ABI has no
// value for it, a JSON declaration does (impls/capability_declaration.hpp).
enum class FullyMaskedPolicy { zeros, nan, any };
std::string_view to_string(FullyMaskedPolicy policy);

// The rows an oracle computed and what it expects there. Rows are flat indices
// (b * h_q + h) * n_q + i; out holds rows.size() * d_v values, lse rows.size().
struct Expected {
  std::span<const std::int64_t> rows;
  std::span<const double> out;
  std::span<const double> lse;
  std::span<const std::uint8_t> fully_masked;
};

struct ErrorMetrics {
  // Over the expected rows that have at least one visible key.
  std::int64_t compared = 0;
  double reference_max_abs = 0;  // max |expected|, the scale of the ulp floor
  double max_abs = 0;
  std::int64_t max_abs_index = -1;  // flat index into O
  double max_rel = 0;               // |err| / max(|ref|, rel_floor)
  double rel_floor = 0;             // max(min normal of the dtype, max |ref| / 1024)
  std::int64_t max_rel_index = -1;
  double normwise_rel = 0;          // ||err||_2 / ||ref||_2 (||err||_2 when ref is zero)
  double rms = 0;
  // Over the elements whose reference is at least rel_floor, and every non-finite output: next
  // to zero an ulp is so small that a harmless absolute error reads as millions of ulps.
  // max_ulps_index stays -1 when every compared element is near zero.
  std::uint64_t max_ulps = 0;
  std::int64_t max_ulps_index = -1;
  // Over every element of O, sampled or not. nan, pos_inf and neg_inf count every row, fully
  // masked ones included; the fully_masked_ counts say how many of them lie in those rows (where
  // the declared policy, not the reference, says what is right).
  std::int64_t nan = 0, pos_inf = 0, neg_inf = 0;
  std::int64_t fully_masked_nan = 0, fully_masked_inf = 0;
  std::int64_t unwritten = 0;                      // still holding the poison
  std::int64_t fully_masked_rows = 0;
  FullyMaskedPolicy policy = FullyMaskedPolicy::zeros;  // the one measure() was given
  std::int64_t fully_masked_violations = 0;        // rows not following the declared policy
  // What each fully masked row holds, whatever the policy: some NaN; else some Inf; else every
  // element zero; else finite values not all zero.
  std::int64_t fully_masked_nan_rows = 0, fully_masked_inf_rows = 0, fully_masked_zero_rows = 0, fully_masked_finite_rows = 0;
  std::int64_t nan_outside_fully_masked() const { return nan - fully_masked_nan; }
  std::int64_t inf_outside_fully_masked() const { return pos_inf + neg_inf - fully_masked_inf; }
  // Row LSE, when the implementation returns it.
  bool has_lse = false;
  double lse_max_abs = 0;
  double lse_reference_max_abs = 0;
  std::int64_t lse_violations = 0;  // non-finite where finite expected, or not -inf on a fully masked row
};

// One judged tensor's errors against its expected values, whatever its role: what a gradient (dq,
// dk, dv) is measured with. Indices are flat into the tensor (dense in its own shape, BHSD); the
// fields mean what ErrorMetrics' do (max_rel over max(|ref|, rel_floor); max_ulps over elements at
// least rel_floor and every non-finite one). Every element is compared: nothing is sampled.
struct TensorErrors {
  Role role = Role::o;
  std::int64_t compared = 0;
  double reference_max_abs = 0, max_abs = 0, max_rel = 0, rel_floor = 0, normwise_rel = 0, rms = 0;
  std::int64_t max_abs_index = -1, max_rel_index = -1;
  std::uint64_t max_ulps = 0;
  std::int64_t max_ulps_index = -1;
  std::int64_t nan = 0, pos_inf = 0, neg_inf = 0, unwritten = 0;
};

// got: the tensor as an implementation wrote it, read in BHSD order through its own layout; want:
// its expected values, dense BHSD ([b, h, n, d] of got's shape). dtype: the role's, for ulps.
TensorErrors measure_tensor(Role role, DType dtype, const Tensor& got, std::span<const double> want);

// "dk b=0 h=1 j=5 c=3": a flat index into a gradient's dense BHSD shape (queries i, keys j);
// "d_sink h=2" and "d_bias b=* h=1 i=0 j=4" (the bias's shape, "*" where it broadcasts) for the
// parameters' gradients.
std::string tensor_coordinates(const Problem& problem, Role role, std::int64_t flat_index);

ErrorMetrics measure(const Problem& problem, const Mask& mask, const Expected& expected, const Tensor& out,
                     const Tensor* lse, FullyMaskedPolicy policy);

// Where the output holds a NaN or Inf outside fully masked rows that the compared rows missed (a
// sampled reference): that element becomes the worst one (max_abs and max_rel infinite, their
// indices and max_ulps_index on it), so a NaN failure never names a finite element as its worst.
// The judge applies it to a verdict's metrics; the diagnosis, which compares chosen rows, does not.
void worst_at_first_nonfinite(ErrorMetrics& m, const Problem& problem, const Mask& mask, const Tensor& out);

// What the fully masked rows that break m.policy hold: "2 hold NaN, 1 finite non-zero values";
// "" when none breaks it.
std::string fully_masked_contents(const ErrorMetrics& m);

// "b=0 h=3 i=17 c=5" for a flat index into O.
std::string output_coordinates(const Problem& problem, std::int64_t flat_index);

}  // namespace attn

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

// What an implementation outputs for a row whose keys are all masked (softmax undefined).
enum class FullyMaskedPolicy { zeros, nan };
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
  std::uint64_t max_ulps = 0;
  std::int64_t max_ulps_index = -1;
  // Over every element of O, sampled or not.
  std::int64_t nan = 0, pos_inf = 0, neg_inf = 0;  // outside fully masked rows
  std::int64_t unwritten = 0;                      // still holding the poison
  std::int64_t fully_masked_rows = 0;
  std::int64_t fully_masked_violations = 0;        // rows not following the declared policy
  // Row LSE, when the implementation returns it.
  bool has_lse = false;
  double lse_max_abs = 0;
  double lse_reference_max_abs = 0;
  std::int64_t lse_violations = 0;  // non-finite where finite expected, or not -inf on a fully masked row
};

ErrorMetrics measure(const Problem& problem, const Mask& mask, const Expected& expected, const Tensor& out,
                     const Tensor* lse, FullyMaskedPolicy policy);

// "b=0 h=3 i=17 c=5" for a flat index into O.
std::string output_coordinates(const Problem& problem, std::int64_t flat_index);

}  // namespace attn

#pragma once
// What the backward tests of cpu_naive and cpu_blocked hold gradients to against the backward
// reference: the largest error relative to the largest reference gradient, within a few unit
// roundoffs of the arithmetic and of the gradient's dtype.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/problem.hpp"
#include "core/tensor.hpp"

namespace attn::testing {

// max |got - want| / max(max |want|, tiny)
inline double relative_error(const Tensor& got, const std::vector<double>& want) {
  double worst = 0, scale = 0;
  for (std::size_t e = 0; e < want.size(); ++e) {
    scale = std::max(scale, std::fabs(want[e]));
    worst = std::max(worst, std::fabs(got.get(std::int64_t(e)) - want[e]));
  }
  return worst / std::max(scale, 1e-300);
}

// f64: products and sums of n terms in f64; otherwise f32 arithmetic and one rounding to the dtype
// (2^-11 for f16, 2^-8 for bf16). A backward fed the forward's LSE (rounded to f32) and O (rounded
// to the dtype) stays within the same few unit roundoffs.
inline double allowed_relative_error(const Problem& p) {
  if (p.dtype == DType::f64) return 1e-11;
  if (p.dtype == DType::f32) return 2e-5;
  return p.dtype == DType::f16 ? 4 * 0x1p-11 : 4 * 0x1p-8;
}

}  // namespace attn::testing

#pragma once
// What the backward tests hold gradients to: against the backward reference, the largest error
// relative to the largest reference gradient, within a few unit roundoffs of the arithmetic and of
// the gradient's dtype; and the gradients a mask forces to exactly 0.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "core/inputs.hpp"
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

// The gradients a mask forces to exactly 0, and how many of each kind the case has (a test
// insists on some): dQ of every fully masked row, and dK and dV of every key that no row of the
// kv head's query heads sees.
struct MaskedZeros {
  std::int64_t fully_masked_rows = 0, unseen_keys = 0;
};
inline ::testing::AssertionResult masked_gradients_are_zero(const Problem& p, const CaseInputs& in, const Gradients& g, MaskedZeros& counted) {
  counted = {};
  const auto nonzero = [](const char* what, std::int64_t b, std::int64_t h, std::int64_t row, std::int64_t e, double value) {
    return ::testing::AssertionFailure() << what << " (b " << b << ", head " << h << ", row " << row << ", element " << e << ") is " << value << ", not 0";
  };
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        if (!in.mask.row_fully_masked(b, h, i)) continue;
        ++counted.fully_masked_rows;
        for (std::int64_t e = 0; e < p.d_k; ++e)
          if (const double v = g.dq.get(g.dq.offset(b, h, i, e)); v != 0) return nonzero("dQ of a fully masked row", b, h, i, e, v);
      }
  const std::int64_t group = p.h_q / p.h_kv;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t kv = 0; kv < p.h_kv; ++kv)
      for (std::int64_t j = 0; j < p.n_k; ++j) {
        bool seen = false;
        for (std::int64_t h = kv * group; h < (kv + 1) * group && !seen; ++h)
          for (std::int64_t i = 0; i < p.n_q && !seen; ++i) seen = in.mask.visible(b, h, i, j);
        if (seen) continue;
        ++counted.unseen_keys;
        for (std::int64_t e = 0; e < p.d_k; ++e)
          if (const double v = g.dk.get(g.dk.offset(b, kv, j, e)); v != 0) return nonzero("dK of a key no row sees", b, kv, j, e, v);
        for (std::int64_t e = 0; e < p.d_v; ++e)
          if (const double v = g.dv.get(g.dv.offset(b, kv, j, e)); v != 0) return nonzero("dV of a key no row sees", b, kv, j, e, v);
      }
  return ::testing::AssertionSuccess();
}

}  // namespace attn::testing

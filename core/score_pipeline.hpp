#pragma once
// The score pipeline (core/README.md, "The score pipeline"), written once for the CPU: how the
// product <q_i, k_j> of a visible key becomes its score, and which keys are visible. Every CPU
// computation of scores goes through it in its own arithmetic T: cpu_naive, cpu_blocked's scalar
// path, the diagnosis's hypotheses, the mutants, the scale study and the reference (in its own
// precision; its error bound is its own, reference/README.md). For row (b, h, i) and key j:
//   1. s = <q_i, k_j> * scale (the scale after the product: folding it into Q would round Q);
//   2. the additive terms: + bias[b, h, i, j], ALiBi's -slope_h |i + delta - j| materialised in the
//      mask's bias (core/mask.hpp);
//   3. visibility: the window, the padding and the boolean mask, by intersection (Mask::visible);
//      an invisible key is excluded exactly (its weight is 0, not a large negative score).
// A new score modification joins here (a field of Problem, a step of score()), and an
// implementation supports it only once it declares so (impls/implementation.hpp, Capabilities).
#include <cstdint>
#include <utility>

#include "core/mask.hpp"
#include "core/problem.hpp"

namespace attn {

class ScorePipeline {
 public:
  ScorePipeline(const Problem& problem, const Mask& mask) : mask_(mask), scale_(problem.effective_scale()) {}

  double scale() const { return scale_; }
  const Mask& mask() const { return mask_; }
  // Whether anything but the scale acts on a product: with nothing else, a vectorised path may
  // scale a whole tile of products at once (cpu_blocked).
  bool beyond_scale() const { return mask_.has_bias(); }

  // Steps 1 and 2 for a visible key, in T's arithmetic, in the pipeline's order.
  template <class T>
  T score(T dot, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return dot * static_cast<T>(scale_) + static_cast<T>(mask_.bias(b, h, i, j));
  }
  // Step 3.
  bool visible(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const { return mask_.visible(b, h, i, j); }
  std::pair<std::int64_t, std::int64_t> key_range(std::int64_t b, std::int64_t i) const { return mask_.key_range(b, i); }

  // Row (b, h, i)'s scores s[0, n_k): score(dot(j)) for each visible key, `excluded` (usually
  // -inf: exp(-inf - m) is exactly 0) for the others. dot(j) returns <q_i, k_j> in T.
  template <class T, class Dot>
  void row_scores(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t n_k, Dot&& dot, T* s, T excluded) const {
    for (std::int64_t j = 0; j < n_k; ++j) s[j] = visible(b, h, i, j) ? score<T>(dot(j), b, h, i, j) : excluded;
  }

 private:
  const Mask& mask_;
  double scale_;
};

}  // namespace attn

#pragma once
// The naive attention row under a rule: one output row in cpu_naive's order, with one step of
// the row computation changed the way a known mistake changes it (a finite fill for masked keys,
// no max subtraction, no normalisation, a finite initial max, weights rounded). The diagnosis
// (diagnosis.hpp) predicts mistakes the reference cannot express with it, and measures the naive
// yardstick under a hypothesis on the rows it compares.
//
// Why not cpu_naive itself: cpu_naive computes every row of a problem, with none of these rules,
// and the diagnosis compares a budgeted sample of rows of possibly long sequences. With no rule,
// in the working precision, this row is cpu_naive's row (the same operations in the same order;
// the compiler may fuse a multiply-add in one and not the other): tests/diagnosis_test.cpp holds
// the two to a few roundings of each other, so they cannot drift apart.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "core/dtype.hpp"
#include "core/inputs.hpp"
#include "core/problem.hpp"
#include "core/score_pipeline.hpp"
#include "verification/mistakes.hpp"

namespace attn::diagnosis_detail {

using Rows = std::vector<std::int64_t>;

struct RowIndex {
  std::int64_t b, h, i;
};
inline RowIndex split(const Problem& p, std::int64_t row) { return {row / (p.n_q * p.h_q), (row / p.n_q) % p.h_q, row % p.n_q}; }
inline std::int64_t join(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i) { return (b * p.h_q + h) * p.n_q + i; }

// A hypothesis the reference cannot express (it excludes masked keys exactly, always divides by
// the row sum and always subtracts the max) changes one step of the row computation.
struct RowRule {
  std::optional<long double> fill = std::nullopt;  // masked keys get this score instead of being excluded
  bool subtract_max = true;
  bool normalise = true;
  std::optional<long double> max_init = std::nullopt;  // the row max starts here instead of -inf
  bool zero_sum_gives_zeros = false;        // a row whose exps all underflow outputs zeros (a guard), not 0/0
  std::optional<DType> weights_rounded_to = std::nullopt;  // the weights rounded to this dtype before P V
  bool rounded_before_division = false;     // exp(s - max) rounded and P V divided by the (unrounded) sum after
  std::optional<MistakeId> softcap_mistake = std::nullopt;  // soft-capping written this way (softcap_as_written)
  std::optional<MistakeId> sink_mistake = std::nullopt;     // the sink written this way: sink_ignored, sink_in_numerator
  bool dropout_rescaled = true;             // false: dropout's kept weights not scaled by 1 / (1 - p)
};

// One output row under a rule, in T: cpu_naive's order (sequential dot product, times the scale,
// plus the bias; row max; exp; sum; divide; dropout's keep and rescale; P V in key order). In long double (64-bit significand:
// 2^-40 of f32's unit roundoff, 2^-11 of f64's) it is the prediction of a hypothesis the reference
// cannot express; in the working precision it is the naive yardstick under that hypothesis.
// Returns false for a row that has no visible key and no fill (a fully masked row).
template <class T>
bool row_under(const Problem& p, const CaseInputs& in, std::int64_t row, const RowRule& rule, std::vector<T>& o) {
  const auto [b, h, i] = split(p, row);
  const std::int64_t g = p.kv_head(h);
  const T excluded = -std::numeric_limits<T>::infinity();
  std::vector<T> s(static_cast<std::size_t>(p.n_k));
  const std::int64_t q0 = in.q.offset(b, h, i, 0);
  const ScorePipeline pipeline(p, in.mask);
  auto dot = [&](std::int64_t j) {
    const std::int64_t k0 = in.k.offset(b, g, j, 0);
    T sum = 0;
    for (std::int64_t t = 0; t < p.d_k; ++t) sum += static_cast<T>(in.q.get(q0 + t)) * static_cast<T>(in.k.get(k0 + t));
    return sum;
  };
  const T fill = rule.fill ? static_cast<T>(*rule.fill) : excluded;
  if (!rule.softcap_mistake) {
    pipeline.row_scores<T>(b, h, i, p.n_k, dot, s.data(), fill);
  } else {
    for (std::int64_t j = 0; j < p.n_k; ++j)
      s[static_cast<std::size_t>(j)] =
          pipeline.visible(b, h, i, j)
              ? softcap_as_written<T>(rule.softcap_mistake, pipeline, p, dot(j) * static_cast<T>(pipeline.scale()), static_cast<T>(in.mask.bias(b, h, i, j)))
              : fill;
  }
  o.assign(static_cast<std::size_t>(p.d_v), T(0));
  T m = *std::max_element(s.begin(), s.end());
  if (rule.max_init) m = std::max(m, static_cast<T>(*rule.max_init));
  if (m == excluded) return false;
  // The sink (the pipeline's step 5) joins the max and the sum, as cpu_naive adds it.
  const std::optional<double> sink = rule.sink_mistake == MistakeId::sink_ignored ? std::nullopt : pipeline.sink(h);
  if (sink) m = std::max(m, static_cast<T>(*sink));
  T sum = 0;
  for (auto& e : s) {
    e = rule.subtract_max ? std::exp(e - m) : std::exp(e);
    sum += e;
  }
  const T sink_term = sink ? (rule.subtract_max ? std::exp(static_cast<T>(*sink) - m) : std::exp(static_cast<T>(*sink))) : T(0);
  sum += sink_term;
  // sink_in_numerator: every visible key's numerator gets the sink's term as well.
  if (sink && rule.sink_mistake == MistakeId::sink_in_numerator)
    for (std::int64_t j = 0; j < p.n_k; ++j)
      if (pipeline.visible(b, h, i, j)) s[static_cast<std::size_t>(j)] += sink_term;
  if (sum == T(0) && rule.zero_sum_gives_zeros) return true;
  auto rounded = [&](T w) { return rule.weights_rounded_to ? static_cast<T>(round_to(*rule.weights_rounded_to, static_cast<double>(w))) : w; };
  const bool divide_after = rule.normalise && rule.rounded_before_division;
  const T rescale = rule.dropout_rescaled ? pipeline.dropout_rescale<T>() : T(1);  // dropout (step 6), with the mask the inputs carry
  for (std::int64_t j = 0; j < p.n_k; ++j) {
    const T e = s[static_cast<std::size_t>(j)];
    T w = rounded(rule.normalise && !divide_after ? e / sum : e);
    if (pipeline.has_dropout()) w = pipeline.kept(b, h, i, j) ? w * rescale : T(0);
    if (w == T(0)) continue;  // excluded keys: their V (NaN included) must not reach the row
    const std::int64_t v0 = in.v.offset(b, g, j, 0);
    for (std::int64_t c = 0; c < p.d_v; ++c) o[static_cast<std::size_t>(c)] += w * static_cast<T>(in.v.get(v0 + c));
  }
  if (divide_after)
    for (auto& x : o) x /= sum;
  return true;
}

}  // namespace attn::diagnosis_detail

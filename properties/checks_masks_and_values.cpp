// Property checks 1-5 and 13: weights sum to one, masked keys (finite and non-finite values in
// their K and V rows), permutations, shifting and scaling V, outputs within the visible values.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "core/mask.hpp"
#include "core/metrics.hpp"
#include "impls/capability_space.hpp"
#include "impls/cpu_naive/cpu_naive.hpp"
#include "properties/property_detail.hpp"
#include "reference/reference.hpp"

namespace attn::property_detail {

// ---------------------------------------------------------------------------------------------
// The properties

std::string weights_of_visible_rows_sum_to_one(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  // The naive algorithm's weights are exp(s - m) / sum, each rounded once after a sum of n_k
  // terms: their total is off by at most about (n_k + 2) u from one, twice that for the
  // rounding of the division and of the check's own sum.
  const double tol = allowance_from_pass_rule(impl, p, DType::f64, 2.0 * double(p.n_k + 2) * unit_roundoff_for(impl, p), 0);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        const std::int64_t row = ((b * p.h_q + h) * p.n_q + i) * p.n_k;
        double sum = 0;
        for (std::int64_t j = 0; j < p.n_k; ++j) sum += o.weights.get(row + j);
        const bool empty = in.mask.row_fully_masked(b, h, i);
        if (empty ? sum != 0 : !(std::fabs(sum - 1) <= tol))
          return fmt::format("weights of row b={} h={} i={} sum to {:.17g}{}", b, h, i, sum,
                             empty ? " (a fully masked row: expected all zero)" : fmt::format(" (allowed |sum - 1| <= {:.3g})", tol));
      }
  return "";
}

// Sets, with each of `poisons` in turn, the K and V rows of the keys that one row (b, h, i)
// does not see to that value (the rows chosen from the seed, among rows with a masked key),
// and checks that every row of the same batch and kv head that sees none of those keys keeps
// every output bit. `poisons(variant, element)` gives the value of the element-th poisoned
// element of K (then V) for a variant.
struct Poison {
  std::string name;  // "NaN", "+1e4", ...
  std::function<double(std::int64_t element)> k, v;
};

std::string poisoned_masked_rows_change_no_bit(const Implementation& impl, const Problem& p, const std::vector<Poison>& poisons,
                                               std::uint64_t purpose) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  Rng rng = check_rng(p, purpose);
  for (const Poison& poison : poisons) {
    // A row with a masked key, searched from a random one.
    const std::int64_t rows = p.rows(), start = std::int64_t(rng.below(std::uint64_t(rows)));
    std::int64_t b = -1, h = 0, i = 0;
    for (std::int64_t n = 0; n < rows && b < 0; ++n) {
      const std::int64_t row = (start + n) % rows;
      const std::int64_t rb = row / (p.h_q * p.n_q), rh = row / p.n_q % p.h_q, ri = row % p.n_q;
      for (std::int64_t j = 0; j < p.n_k; ++j)
        if (!in.mask.visible(rb, rh, ri, j)) {
          b = rb, h = rh, i = ri;
          break;
        }
    }
    if (b < 0) return "";  // nothing masked: nothing to poison
    const std::int64_t g = p.kv_head(h);
    std::vector<std::int64_t> poisoned_keys;
    for (std::int64_t j = 0; j < p.n_k; ++j)
      if (!in.mask.visible(b, h, i, j)) poisoned_keys.push_back(j);
    CaseInputs poisoned = generate_inputs(p);
    std::int64_t element = 0;
    for (std::int64_t j : poisoned_keys)
      for (std::int64_t c = 0; c < p.d_k; ++c) poisoned.k.set(poisoned.k.offset(b, g, j, c), poison.k(element++));
    element = 0;
    for (std::int64_t j : poisoned_keys)
      for (std::int64_t c = 0; c < p.d_v; ++c) poisoned.v.set(poisoned.v.offset(b, g, j, c), poison.v(element++));
    const Outputs again = run(impl, p, poisoned);
    if (!again.error.empty()) return again.error;
    const std::string what = fmt::format("K and V of the {} key(s) row b={} h={} i={} does not see set to {}", poisoned_keys.size(), b, h,
                                         i, poison.name);
    for (std::int64_t hh = 0; hh < p.h_q; ++hh) {
      if (p.kv_head(hh) != g) continue;
      for (std::int64_t ii = 0; ii < p.n_q; ++ii) {
        const bool sees_none = std::none_of(poisoned_keys.begin(), poisoned_keys.end(),
                                            [&](std::int64_t j) { return in.mask.visible(b, hh, ii, j); });
        if (!sees_none) continue;
        if (auto d = first_bit_difference(p, o.out, again.out, b, hh, ii, ii, what.c_str()); !d.empty())
          return d + (hh != h || ii != i ? " (a row that sees none of them either)" : "");
      }
    }
  }
  return "";
}

std::string masked_keys_change_nothing(const Implementation& impl, const Problem& p) {
  if (impl.describe().returns_weights) {
    const CaseInputs in = generate_inputs(p);
    const Outputs o = run(impl, p, in);
    if (!o.error.empty()) return o.error;
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.h_q; ++h)
        for (std::int64_t i = 0; i < p.n_q; ++i)
          for (std::int64_t j = 0; j < p.n_k; ++j)
            if (!in.mask.visible(b, h, i, j) && o.weights.get(((b * p.h_q + h) * p.n_q + i) * p.n_k + j) != 0)
              return fmt::format("masked key j={} of row b={} h={} i={} has weight {:.17g}, not 0", j, b, h, i,
                                 o.weights.get(((b * p.h_q + h) * p.n_q + i) * p.n_k + j));
  }
  // Large but finite: K so large that a masked key given any weight (or counted in the row's
  // maximum) shows, yet every score stays finite in the dtype even if a kernel computes it
  // before masking: |scale q.k| <= a quarter of the dtype's largest value for every query of
  // the batch. V large too: 0 * V is exactly 0 for finite V, so a correct kernel keeps every bit.
  const CaseInputs in = generate_inputs(p);
  double largest_row_sum = 0;
  for (std::int64_t r = 0; r < p.rows(); ++r) {
    double sum = 0;
    for (std::int64_t c = 0; c < p.d_k; ++c) sum += std::fabs(in.q.get(r * p.d_k + c));
    largest_row_sum = std::max(largest_row_sum, sum);
  }
  // In the narrowest of the dtypes the scores and V pass through (mixed-precision problems).
  const double quarter = std::min({max_finite(in.q.dtype()), max_finite(in.k.dtype()), max_finite(in.v.dtype())}) / 4;
  const double k_big =
      round_to(in.k.dtype(), std::min(1e4, quarter / std::max(1e-30, largest_row_sum * std::max(1.0, p.effective_scale()))));
  const double v_big = round_to(in.v.dtype(), std::min(1e4, quarter));
  auto alternating = [](double x) { return [x](std::int64_t e) { return e % 2 ? -x : x; }; };
  auto constant = [](double x) { return [x](std::int64_t) { return x; }; };
  const std::vector<Poison> poisons{
      {fmt::format("+{:g} (K) and +{:g} (V)", k_big, v_big), constant(k_big), constant(v_big)},
      {fmt::format("-{:g} (K) and -{:g} (V)", k_big, v_big), constant(-k_big), constant(-v_big)},
      {fmt::format("+-{:g} (K) and -+{:g} (V) alternating", k_big, v_big), alternating(k_big), alternating(-v_big)},
  };
  return poisoned_masked_rows_change_no_bit(impl, p, poisons, 2);
}

std::string masked_nonfinite_values_stay_out(const Implementation& impl, const Problem& p) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  auto constant = [](double x) { return [x](std::int64_t) { return x; }; };
  const std::vector<Poison> poisons{
      {"NaN", constant(nan), constant(nan)},
      {"+Inf", constant(inf), constant(inf)},
      {"-Inf", constant(-inf), constant(-inf)},
  };
  return poisoned_masked_rows_change_no_bit(impl, p, poisons, 13);
}

std::string permutations_commute(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  Rng rng = check_rng(p, 3);
  // Queries: the same permutation for every batch and head; rows must follow it bit for bit.
  std::vector<std::int64_t> order(static_cast<std::size_t>(p.n_q));
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  CaseInputs permuted = generate_inputs(p);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i)
        for (std::int64_t c = 0; c < p.d_k; ++c)
          permuted.q.set_bits(permuted.q.offset(b, h, i, c), in.q.bits(in.q.offset(b, h, order[std::size_t(i)], c)));
  const Outputs by_query = run(impl, p, permuted);
  if (!by_query.error.empty()) return by_query.error;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i)
        if (auto d = first_bit_difference(p, o.out, by_query.out, b, h, order[std::size_t(i)], i, "queries permuted"); !d.empty())
          return d + fmt::format(" (query {} moved to row {})", order[std::size_t(i)], i);
  // Keys and values together, within each batch's visible prefix: the output is the same
  // under the pass rule (the order of a sum changes its rounding).
  CaseInputs shuffled = generate_inputs(p);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t visible = in.mask.key_range(b, 0).second;
    std::vector<std::int64_t> keys(static_cast<std::size_t>(visible));
    std::iota(keys.begin(), keys.end(), 0);
    for (std::size_t j = keys.size(); j > 1; --j) std::swap(keys[j - 1], keys[rng.below(j)]);
    for (std::int64_t g = 0; g < p.h_kv; ++g)
      for (std::int64_t j = 0; j < visible; ++j) {
        for (std::int64_t c = 0; c < p.d_k; ++c) shuffled.k.set_bits(shuffled.k.offset(b, g, j, c), in.k.bits(in.k.offset(b, g, keys[std::size_t(j)], c)));
        for (std::int64_t c = 0; c < p.d_v; ++c) shuffled.v.set_bits(shuffled.v.offset(b, g, j, c), in.v.bits(in.v.offset(b, g, keys[std::size_t(j)], c)));
      }
  }
  const Outputs by_key = run(impl, p, shuffled);
  if (!by_key.error.empty()) return by_key.error;
  // The exact answer does not depend on the order of the keys, so the reference and the naive
  // baseline (whose error depends on the order it sums in) are those of the permuted inputs.
  return verdict_failure(judge_against_reference(impl, p, shuffled, by_key), "keys and values permuted together");
}

std::string values_shift_and_scale_the_output(const Implementation& impl, const Problem& p) {
  Rng rng = check_rng(p, 4);
  const double shift = std::array<double, 4>{0.5, 1.0, -2.0, 3.0}[rng.below(4)];
  for (int variant = 0; variant < 2; ++variant) {
    CaseInputs in = generate_inputs(p);
    for (std::int64_t e = 0; e < in.v.numel(); ++e) in.v.set(e, variant == 0 ? in.v.get(e) + shift : in.v.get(e) * 0.5);
    const Outputs o = run(impl, p, in);
    if (!o.error.empty()) return o.error;
    const auto what = variant == 0 ? fmt::format("every value row shifted by {} (the output must shift by it)", shift)
                                   : std::string("every value halved (the output must halve)");
    if (auto f = verdict_failure(judge_against_reference(impl, p, in, o), what.c_str()); !f.empty()) return f;
  }
  return "";
}

std::string outputs_lie_within_the_visible_values(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  const double u = unit_roundoff_for(impl, p);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        if (in.mask.row_fully_masked(b, h, i)) continue;
        for (std::int64_t c = 0; c < p.d_v; ++c) {
          double lo = std::numeric_limits<double>::infinity(), hi = -lo, magnitude = 0;
          for (std::int64_t j = 0; j < p.n_k; ++j)
            if (in.mask.visible(b, h, i, j)) {
              const double v = in.v.get(in.v.offset(b, p.kv_head(h), j, c));
              lo = std::min(lo, v), hi = std::max(hi, v), magnitude = std::max(magnitude, std::fabs(v));
            }
          // A convex combination computed in floating point may step outside by its rounding: the
          // naive algorithm's sum of n_k products and its normalisation, at most (n_k + 4) u of
          // the largest value; errors in the scores only move the weights and keep it convex.
          const double slack = allowance_from_pass_rule(impl, p, p.dtype_of(Role::o), double(p.n_k + 4) * u * magnitude, magnitude);
          const double got = o.out.get(out_index(p, b, h, i, c));
          if (!(got >= lo - slack && got <= hi + slack))
            return fmt::format("output b={} h={} i={} c={} is {:.9g}, outside [{:.9g}, {:.9g}] of the visible values (slack {:.3g})", b,
                               h, i, c, got, lo, hi, slack);
        }
      }
  return "";
}


}  // namespace attn::property_detail

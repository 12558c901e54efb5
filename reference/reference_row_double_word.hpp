#pragma once
// One output row for the reference's bounded pass over f64 problems (and the second try at an
// f32/f16/bf16 row that the double pass did not settle): the O(n d) parts (the
// dot products q . k_j and the weighted sum of V) in double-word arithmetic (double_word.hpp),
// the O(n) rest (scores minus the max, exp, the sum, log, the divisions) in float128. The row's
// error bound is reference_row.hpp's analysis with every operation taken to err by at most
// u = 2^-100 relative, plus the absolute errors of products near the underflow threshold.
// A row whose numbers leave double's range (a sum of |q_t k_t| that overflows, say) says so with
// a non-finite bound, and the caller computes it in float128 instead.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include <boost/multiprecision/float128.hpp>

#include "core/dtype.hpp"
#include "core/inputs.hpp"
#include "core/precision.hpp"
#include "reference/double_word.hpp"
#include "reference/reference_row.hpp"

namespace attn::detail {

// What the bound assumes of every operation of this pass (see double_word.hpp: 16 to 32 times
// what the theorems give; float128's own operations err by 2^-113).
inline constexpr double double_word_unit_roundoff = 0x1p-100;

struct DoubleWordRow : ReferenceRow<double> {
  std::vector<double> out_low;  // d_v: the output is the double word out[c] + out_low[c]
};

// q . k exactly rounded to a double word: eight independent accumulators (one vector register
// of lanes, and no chain of dependent additions through the whole sum). Any order of the
// d_k - 1 additions keeps the bound gamma(d_k - 1) sum |q_t k_t|.
inline DoubleWord dot_double_word(const double* q, const double* k, std::int64_t d) {
  constexpr int lanes = 8;
  double hi[lanes] = {}, lo[lanes] = {};
  std::int64_t t = 0;
  for (; t + lanes <= d; t += lanes)
    for (int l = 0; l < lanes; ++l) {
      const DoubleWord sum = add({hi[l], lo[l]}, two_prod(q[t + l], k[t + l]));
      hi[l] = sum.hi, lo[l] = sum.lo;
    }
  DoubleWord total{hi[0], lo[0]};
  for (int l = 1; l < lanes; ++l) total = add(total, {hi[l], lo[l]});
  for (; t < d; ++t) total = add(total, two_prod(q[t], k[t]));
  return total;
}

inline DoubleWordRow reference_row_double_word(const Problem& p, const WidenedInputs& wide, std::int64_t row) {
  using Quad = boost::multiprecision::float128;
  constexpr double u = double_word_unit_roundoff;
  // Each product's low part may round near the underflow threshold: at most 2^-1075, and the
  // fma of DWTimesFP once more.
  constexpr double product_underflow = 0x1p-1074;
  const CaseInputs& in = wide.in;
  const std::int64_t i = row % p.n_q;
  const std::int64_t h = (row / p.n_q) % p.h_q;
  const std::int64_t b = row / (p.n_q * p.h_q);
  const std::int64_t g = p.kv_head(h);
  const double scale = p.effective_scale();
  const auto d_v = static_cast<std::size_t>(p.d_v);
  DoubleWordRow result;
  result.out.assign(d_v, 0.0);
  result.out_low.assign(d_v, 0.0);
  result.bound.assign(d_v, 0.0);
  result.naive_bound.assign(d_v, 0.0);
  result.magnitude.assign(d_v, 0.0);
  result.score_rounding.assign(d_v, 0.0);

  std::vector<std::int64_t> keys = visible_keys(in.mask, b, h, i);
  if (keys.empty()) {
    result.fully_masked = true;
    result.lse = -std::numeric_limits<double>::infinity();
    return result;
  }
  std::size_t n = keys.size();
  const std::vector<double> no_value(d_v, 0.0);  // the sink's and a dropped key's (reference_row.hpp)
  const ScorePipeline pipeline(p, in.mask);
  // Dropout (the pipeline's step 6) with the keep mask the implementation reported, as in
  // reference_row.hpp: a dropped key's V row is zeros here, and the weighted sum is scaled by
  // r = 1 / (1 - p), computed in float128 from the f32 p.
  if (pipeline.has_dropout() && !in.mask.has_keep())
    throw std::logic_error("reference: a dropout problem needs the keep mask its implementation reported (Mask::with_keep)");
  std::vector<std::uint8_t> dropped_key(static_cast<std::size_t>(pipeline.has_dropout() ? p.n_k : 0), 0);
  for (std::int64_t j : keys)
    if (pipeline.has_dropout()) dropped_key[static_cast<std::size_t>(j)] = !pipeline.kept(b, h, i, j);
  auto v_row = [&](std::int64_t j) {
    return j == sink_key || (!dropped_key.empty() && dropped_key[static_cast<std::size_t>(j)] != 0) ? no_value.data()
                                                                                                   : wide.v.data() + in.v.offset(b, g, j, 0);
  };
  const Quad rescale = Quad(1) / (Quad(1) - Quad(p.dropout.p));
  const double value_scale = static_cast<double>(rescale);

  // Scores, and per key A_j = scale sum_t |q_t k_jt| + |bias_j| (in double, inflated so that it
  // bounds the exact one; it overflows to inf rather than lie) and the partial sums' squares
  // that score_rounding estimates from (reference_row.hpp's sigma_j).
  std::vector<Quad> s(n);
  std::vector<double> magnitude(n), score_sigma(n);
  std::vector<double> scaled_abs(n, 0.0), capped_abs(n, 0.0), product_magnitude(n, 0.0);  // step 2's (ScorePipeline::product_step_error)
  const double* q = wide.q.data() + in.q.offset(b, h, i, 0);
  const double inflate = 1 + std::max(0x1p-50, 2 * gamma_n(double(p.d_k) + 3, 0x1p-53));
  for (std::size_t jj = 0; jj < n; ++jj) {
    const double* k = wide.k.data() + in.k.offset(b, g, keys[jj], 0);
    const DoubleWord dot = dot_double_word(q, k, p.d_k);
    double abs_dot = 0, partial = 0, partial_squares = 0;
    for (std::int64_t t = 0; t < p.d_k; ++t) {
      abs_dot += std::fabs(q[t] * k[t]);
      partial += q[t] * k[t];
      partial_squares += partial * partial;
    }
    // Squares past double's range (f64 inputs near overflow, or tiny ones): again, scaled to
    // the binade of sum |q_t k_t|. An estimate: squares that then underflow do not matter to it.
    double square_scale = 1;
    if (std::isfinite(abs_dot) && abs_dot > 0 && !(partial_squares < 0x1p900 && partial_squares > 0x1p-900)) {
      square_scale = std::ldexp(1.0, std::ilogb(abs_dot));
      const double inverse = 1 / square_scale;
      partial = partial_squares = 0;
      for (std::int64_t t = 0; t < p.d_k; ++t) {
        partial += q[t] * k[t];
        partial_squares += (partial * inverse) * (partial * inverse);
      }
    }
    const double bias = in.mask.bias(b, h, i, keys[jj]);
    const DoubleWord score = add(mul(dot, scale), {bias, 0.0});
    s[jj] = Quad(score.hi) + Quad(score.lo);
    double slope = 1;
    if (pipeline.modifies_product()) {  // the pipeline's step 2 between the product and the bias, in float128
      const DoubleWord scaled_dw = mul(dot, scale);
      const Quad scaled = Quad(scaled_dw.hi) + Quad(scaled_dw.lo), capped = pipeline.capped<Quad>(scaled);
      s[jj] = capped + Quad(bias);
      scaled_abs[jj] = std::fabs(scaled_dw.hi), capped_abs[jj] = std::fabs(static_cast<double>(capped));
      slope = static_cast<double>(pipeline.product_slope(scaled));
    }
    score_sigma[jj] = scale * std::sqrt(partial_squares) * square_scale * slope + std::fabs(static_cast<double>(s[jj]));
    magnitude[jj] = (scale * abs_dot + std::fabs(bias)) * inflate;
    if (pipeline.modifies_product()) product_magnitude[jj] = scale * abs_dot * inflate, magnitude[jj] = (capped_abs[jj] + std::fabs(bias)) * inflate;
  }

  // The sink: a pseudo-key with an exact score and no value, as in reference_row.hpp.
  if (const std::optional<double> sink = pipeline.sink(h)) {
    keys.push_back(sink_key);
    s.push_back(Quad(*sink));
    magnitude.push_back(0.0), score_sigma.push_back(0.0);
    scaled_abs.push_back(0.0), capped_abs.push_back(0.0), product_magnitude.push_back(0.0);
    ++n;
  }

  // float128 for what must be precise and is O(n): s_j - m, exp, the sum, log, the weights.
  const Quad m = *std::max_element(s.begin(), s.end());
  std::vector<Quad> e(n);
  std::vector<double> shifted(n);  // s_j - m in double, for the bounds
  Quad sum = 0;
  for (std::size_t jj = 0; jj < n; ++jj) {
    const Quad difference = s[jj] - m;
    shifted[jj] = static_cast<double>(difference);
    e[jj] = exp(difference);
    sum += e[jj];
  }
  const Quad log_sum = log(sum);
  result.lse = static_cast<double>(m + log_sum);

  // The weighted sum of V, lanes across the output columns; with dropout each kept weight times r.
  std::vector<double> out_hi(d_v, 0.0), out_lo(d_v, 0.0), weight_hi(n);
  for (std::size_t jj = 0; jj < n; ++jj) {
    const Quad weight = e[jj] / sum;
    weight_hi[jj] = static_cast<double>(weight);
    const Quad valued = pipeline.has_dropout() ? weight * rescale : weight;
    const double valued_hi = static_cast<double>(valued);
    const DoubleWord w{valued_hi, static_cast<double>(valued - Quad(valued_hi))};
    const double* v = v_row(keys[jj]);
    for (std::size_t c = 0; c < d_v; ++c) {
      const DoubleWord sum_c = add({out_hi[c], out_lo[c]}, mul(w, v[c]));
      out_hi[c] = sum_c.hi, out_lo[c] = sum_c.lo;
    }
  }
  result.out = out_hi;
  result.out_low = out_lo;

  // Bounds, as reference_row.hpp derives them, with this pass's u. They are computed in double
  // (as float128's are); ln w_j = (s_j - m) - log(sum) adds two non-positive numbers, so its
  // double rounding is a relative few u, inside the bound's 1% headroom.
  std::vector<double> ln_w(n), eta(n), eta_naive(n);
  const double u_naive = accumulation_unit_roundoff(working_dtype(p.numerics()));
  const double tiny_naive = working_min_subnormal(working_dtype(p.numerics()));
  const double score_underflow = double(p.d_k + 2) * 2 * product_underflow * std::max(1.0, scale);
  const double log_sum_double = static_cast<double>(log_sum);
  for (std::size_t jj = 0; jj < n; ++jj) {
    ln_w[jj] = shifted[jj] - log_sum_double;
    const double spread = std::fabs(shifted[jj]);
    eta[jj] = gamma_n(double(p.d_k) + 2, u) * magnitude[jj] + u * spread + 2 * u + score_underflow;
    eta_naive[jj] = gamma_n(double(p.d_k) + 3, u_naive) * magnitude[jj] + u_naive * 1.01 * spread + 2 * u_naive;
    if (pipeline.modifies_product() && keys[jj] != sink_key) {  // the sink is not capped
      // |x| from below (its double word's high part may lie above it): the slope is taken from above.
      eta[jj] += pipeline.product_step_error(gamma_n(double(p.d_k) + 2, u) * product_magnitude[jj], scaled_abs[jj] * (1 - 0x1p-50),
                                             capped_abs[jj], u, 2 * u);
      eta_naive[jj] += pipeline.product_step_error(gamma_n(double(p.d_k) + 3, u_naive) * product_magnitude[jj], scaled_abs[jj], capped_abs[jj],
                                                   u_naive, 4 * u_naive);
    }
  }
  // The weight's conversion to a double word and its product with v may each lose a product
  // underflow: per key, absolute, whatever |v| is (the first also scales with |v|: in the
  // weights' underflow term).
  weighted_sum_bound(ln_w, eta, keys, p.d_v, u, 2 * product_underflow, v_row, result.bound, &result.magnitude, 2 * product_underflow);
  weighted_sum_bound(ln_w, eta_naive, keys, p.d_v, u_naive, tiny_naive, v_row, result.naive_bound);
  if (pipeline.has_dropout())  // the bounds of the sum before r, times r, and r's roundings (reference_row.hpp)
    for (std::size_t c = 0; c < d_v; ++c) {
      result.magnitude[c] *= value_scale;
      result.bound[c] = result.bound[c] * value_scale * (1 + 4 * u) + 3.03 * u * result.magnitude[c];
      result.naive_bound[c] = result.naive_bound[c] * value_scale * (1 + 5 * u_naive) + 4.04 * u_naive * result.magnitude[c];
    }
  const double eta_max = *std::max_element(eta.begin(), eta.end());
  result.lse_bound = 1.01 * (eta_max + gamma_n(double(n), u) + 2 * u * (1 + std::log(double(n))) + u * std::fabs(result.lse));

  // score_rounding (reference_row.hpp), an estimate, in doubles scaled to the binades of the
  // largest w_j sigma_j and |v|: both may be near double's overflow, and their squares beyond it.
  std::vector<double> weighted_sigma(n);
  double largest = 0;
  for (std::size_t jj = 0; jj < n; ++jj) {
    weighted_sigma[jj] = weight_hi[jj] * score_sigma[jj];
    largest = std::max(largest, weighted_sigma[jj]);
  }
  double v_max = 0;
  for (std::size_t jj = 0; jj < n; ++jj)
    for (std::size_t c = 0; c < d_v; ++c) v_max = std::max(v_max, std::fabs(v_row(keys[jj])[c]) * value_scale);
  if (largest > 0 && std::isfinite(largest)) {
    const int sigma_exponent = std::clamp(std::ilogb(largest) + 1, -1000, 1000);
    const double sigma_factor = std::ldexp(1.0, -sigma_exponent);
    double lse_coherent = 0;
    for (double& ws : weighted_sigma) {
      ws *= sigma_factor;
      lse_coherent += ws;
    }
    result.lse_score_rounding = u_naive * std::ldexp(lse_coherent, sigma_exponent);
    if (v_max > 0 && std::isfinite(v_max)) {
      const int v_exponent = std::clamp(std::ilogb(v_max) + 1, -1000, 1000);
      const double v_factor = std::ldexp(1.0, -v_exponent);
      std::vector<double> squares(d_v, 0.0), out_scaled(d_v);
      for (std::size_t c = 0; c < d_v; ++c) out_scaled[c] = out_hi[c] * v_factor;
      for (std::size_t jj = 0; jj < n; ++jj) {
        const double* v = v_row(keys[jj]);
        for (std::size_t c = 0; c < d_v; ++c) {
          const double term = weighted_sigma[jj] * (v[c] * value_scale * v_factor - out_scaled[c]);
          squares[c] += term * term;
        }
      }
      for (std::size_t c = 0; c < d_v; ++c)
        result.score_rounding[c] = u_naive * std::ldexp(std::sqrt(squares[c]), sigma_exponent + v_exponent);
    }
  }
  if (keys.back() == sink_key && n > 1) {
    const Quad m_keys = *std::max_element(s.begin(), s.end() - 1);
    const double coherent = sink_coherent_error(u_naive, static_cast<double>(s[n - 1] - m_keys), static_cast<double>(e[n - 1] / sum));
    for (std::size_t c = 0; c < d_v; ++c) result.score_rounding[c] += coherent * std::fabs(out_hi[c]);
    result.lse_score_rounding += coherent;
  }
  if (!std::all_of(weighted_sigma.begin(), weighted_sigma.end(), [](double ws) { return std::isfinite(ws); }))
    result.lse_score_rounding = std::numeric_limits<double>::quiet_NaN();  // not finite: float128 takes the row
  return result;
}

}  // namespace attn::detail

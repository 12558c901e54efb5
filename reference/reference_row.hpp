#pragma once
// One output row of the reference in any real type with the usual operators (Boost.Multiprecision
// types, double). Shared by reference.cpp (float128, and double for the bounded first pass over
// f32/f16/bf16 problems) and the test that checks the stated error bound (256 bits).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "core/dtype.hpp"
#include "core/inputs.hpp"
#include "core/precision.hpp"
#include "core/score_pipeline.hpp"
#include "core/tensor.hpp"

namespace attn::detail {

template <class Real>
struct ReferenceRow {
  bool fully_masked = false;
  std::vector<Real> out;         // d_v, unrounded
  Real lse = 0;
  std::vector<Real> weights;     // n_k (zeros for masked keys), when requested
  std::vector<double> bound;     // d_v: bound on |out - exact| for unit roundoff u
  std::vector<double> naive_bound;  // d_v: the same analysis for the naive algorithm's precision
  std::vector<double> magnitude;    // d_v: sum_j w_j |v_jc|, the scale of the terms each output sums
  // d_v: u_naive * sqrt(sum_j (w_j sigma_j (v_jc - o_c))^2), the typical output error that the
  // rounding of the scores alone causes in the working precision (first order, independent
  // roundings; sigma_j = scale sqrt(sum_t partial_t^2) + |s_j| for a sequential dot product).
  std::vector<double> score_rounding;
  // For the LSE: u_naive * sum_j w_j sigma_j (d LSE / d s_j = w_j), the score errors taken with
  // one sign. A shift common to a row's scores leaves O unchanged but is the LSE's error itself,
  // and tensor cores round their f32 accumulation toward zero, shifting every score of a row
  // alike: cuda_fused at d = 256 in f16 on an H100 missed an LSE tolerance built on independent
  // roundings, sqrt(sum_j (w_j sigma_j)^2), which is up to sqrt(n) times smaller.
  double lse_score_rounding = 0;
  double lse_bound = 0;  // bound on |lse - exact LSE| (before any conversion to double)
};

inline double gamma_n(double n, double u) { return n * u / (1.0 - n * u); }

// Q, K and V widened exactly to double once per case: Tensor::get's out-of-line call and dtype
// switch per element would cost more than the whole arithmetic of the double pass.
struct WidenedInputs {
  const CaseInputs& in;
  std::vector<double> q, k, v;
  explicit WidenedInputs(const CaseInputs& inputs) : in(inputs), q(widen(inputs.q)), k(widen(inputs.k)), v(widen(inputs.v)) {}

 private:
  static std::vector<double> widen(const Tensor& t) {
    std::vector<double> values(static_cast<std::size_t>(t.numel()));
    copy_as<double>(t, 0, t.numel(), values.data());
    return values;
  }
};

// The arithmetic a row is computed in, as its error bound sees it.
struct RowArithmetic {
  double u;                // unit roundoff of +, -, *, / (and of converting a product's operands)
  double exp_error;        // relative error of exp and of log
  double underflow = 0.0;  // absolute error one product, quotient or exp may add near the underflow
                           // threshold (0 where the exponent range cannot be reached, as in float128)
};
// Boost.Multiprecision's types: exp and log within 2u (the bound's original assumption).
inline RowArithmetic multiprecision_arithmetic(double u) { return {u, 2 * u, 0.0}; }
// IEEE double with the C library's exp and log: glibc documents them within 1 ulp (and its
// exp/log since 2.28 within about 0.52 ulp); 2 ulps, i.e. a relative 4u, leaves room for other libms.
inline constexpr RowArithmetic double_arithmetic{0x1p-53, 4 * 0x1p-53, 0x1p-1074};

// Bound on |computed weighted sum of V - exact| for one row, given each weight's exponent
// perturbation eta_j (see reference.hpp). ln_w: log weights; v_row(j): key j's d_v values. underflow: absolute
// error of each weight; product_underflow: absolute error of each product w_j v_jc (none where
// every v_jc of the column is 0: those products are exactly 0).
template <class VRow>
void weighted_sum_bound(const std::vector<double>& ln_w, const std::vector<double>& eta, const std::vector<std::int64_t>& keys,
                        std::int64_t d_v, double u, double underflow, VRow v_row, std::vector<double>& bound,
                        std::vector<double>* magnitude = nullptr, double product_underflow = 0.0) {
  const std::size_t n = keys.size();
  std::size_t j0 = 0;
  double eta_max = 0;
  for (std::size_t j = 0; j < n; ++j) {
    if (ln_w[j] > ln_w[j0]) j0 = j;
    eta_max = std::max(eta_max, eta[j]);
  }
  const double a = std::expm1(2 * eta_max);
  const double r = a < 1 ? a / (1 - a) : std::numeric_limits<double>::infinity();
  // LSE over k != j0 of (ln w_k + eta_k), computed stably.
  double top = -std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < n; ++k)
    if (k != j0) top = std::max(top, ln_w[k] + eta[k]);
  double rest = 0;
  if (std::isfinite(top))
    for (std::size_t k = 0; k < n; ++k)
      if (k != j0) rest += std::exp(ln_w[k] + eta[k] - top);
  const double lse_rest = std::isfinite(top) ? top + std::log(rest) : top;

  std::vector<double> err(n), w(n);
  for (std::size_t j = 0; j < n; ++j) w[j] = std::exp(ln_w[j]);
  for (std::size_t j = 0; j < n; ++j) {
    const double linear = w[j] * r;
    const double nonlinear = j == j0 ? std::exp(eta[j0] + lse_rest)
                                     : std::exp(ln_w[j] + std::max(0.0, eta[j] + eta[j0] - ln_w[j0]));
    err[j] = std::min(std::isnan(linear) ? nonlinear : linear, nonlinear);
  }
  const double g = gamma_n(2.0 * double(n) + 4.0, u);
  // Keys outer, columns inner (contiguous, vectorisable); each column still sums its keys in order.
  const auto columns = static_cast<std::size_t>(d_v);
  std::vector<double> weighted(columns, 0.0), perturbation(columns, 0.0), vmax(columns, 0.0), plain(columns, 0.0);
  for (std::size_t j = 0; j < n; ++j) {
    const double* v = v_row(keys[j]);
    const double with_err = w[j] + err[j];
    for (std::size_t c = 0; c < columns; ++c) {
      const double av = std::fabs(v[c]);
      plain[c] += w[j] * av;
      // A zero value adds no error whatever its weight's, which may be unbounded (inf * 0 is NaN,
      // which made a bound NaN and called a sound oracle unsound).
      weighted[c] += av == 0 ? 0.0 : with_err * av;
      perturbation[c] += av == 0 ? 0.0 : err[j] * av;
      vmax[c] = std::max(vmax[c], av);
    }
  }
  for (std::size_t c = 0; c < columns; ++c) {
    // 1.01: headroom for the double arithmetic of this bound itself.
    bound[c] = 1.01 * (perturbation[c] + g * weighted[c] + double(n) * underflow * vmax[c]);
    if (product_underflow > 0 && vmax[c] > 0) bound[c] += 1.01 * double(n) * product_underflow;
    if (magnitude) (*magnitude)[c] = plain[c];
  }
}

// The key index the sink takes among a row's keys (reference_row): it has no K or V row.
inline constexpr std::int64_t sink_key = -1;

// The typical error a sink adds to every output element's (times |O_c|) and the LSE's estimate: an
// implementation may take exp(sigma - m_keys) or its reciprocal once for the whole row (an online
// softmax that folds the sink in at the end), one rounding that scales every key's weight when the
// sink lies above their max (the gap sigma - m_keys > 0), else the sink's share.
inline double sink_coherent_error(double u_naive, double sigma_gap, double sink_share) {
  return u_naive * std::fabs(sigma_gap) * (sigma_gap > 0 ? 1 - sink_share : sink_share);
}

// The visible keys of a row, ascending.
inline std::vector<std::int64_t> visible_keys(const Mask& mask, std::int64_t b, std::int64_t h, std::int64_t i) {
  std::vector<std::int64_t> keys;
  const auto [lo, hi] = mask.key_range(b, i);
  keys.reserve(static_cast<std::size_t>(hi - lo));
  for (std::int64_t j = lo; j < hi; ++j)
    if (mask.visible(b, h, i, j)) keys.push_back(j);
  return keys;
}

template <class Real>
ReferenceRow<Real> reference_row(const Problem& p, const WidenedInputs& wide, std::int64_t row, const RowArithmetic& arithmetic,
                                 bool want_weights) {
  const CaseInputs& in = wide.in;
  const double u = arithmetic.u;
  using std::abs;
  using std::exp;
  using std::log;
  using std::sqrt;
  const std::int64_t i = row % p.n_q;
  const std::int64_t h = (row / p.n_q) % p.h_q;
  const std::int64_t b = row / (p.n_q * p.h_q);
  const std::int64_t g = p.kv_head(h);
  const double scale = p.effective_scale();
  ReferenceRow<Real> result;
  result.out.assign(static_cast<std::size_t>(p.d_v), Real(0));
  result.bound.assign(static_cast<std::size_t>(p.d_v), 0.0);
  result.naive_bound.assign(static_cast<std::size_t>(p.d_v), 0.0);
  result.magnitude.assign(static_cast<std::size_t>(p.d_v), 0.0);
  result.score_rounding.assign(static_cast<std::size_t>(p.d_v), 0.0);
  if (want_weights) result.weights.assign(static_cast<std::size_t>(p.n_k), Real(0));

  std::vector<std::int64_t> keys = visible_keys(in.mask, b, h, i);
  if (keys.empty()) {
    result.fully_masked = true;
    result.lse = -std::numeric_limits<Real>::infinity();
    return result;
  }

  std::size_t n = keys.size();
  std::vector<Real> s(n);
  // A_j = scale * sum_t |q_t k_jt| + |bias_j|, kept in Real: with f64 inputs near overflow it can
  // exceed the double range even though every score fits.
  std::vector<Real> magnitude(n), score_sigma(n);
  // Where step 2 changes the scaled product (soft-capping): |x|, |f(x)| and scale sum_t |q_t k_jt|
  // per key (ScorePipeline::product_step_error); A_j then holds what is added after it, |f(x)| + |bias_j|.
  const ScorePipeline pipeline(p, in.mask);
  const bool step2 = pipeline.modifies_product();
  std::vector<Real> scaled_abs(step2 ? n : 0), capped_abs(step2 ? n : 0), product_magnitude(step2 ? n : 0);
  auto score_key = [&](std::size_t jj, const Real& dot, const Real& abs_dot, const Real& partial_squares) {
    const double bias = in.mask.bias(b, h, i, keys[jj]);
    // pipeline.score, step by step.
    const Real scaled = dot * Real(scale);
    const Real capped = pipeline.capped<Real>(scaled);
    s[jj] = capped + Real(bias);
    if (step2) scaled_abs[jj] = abs(scaled), capped_abs[jj] = abs(capped);
    // Typical error of this score in the working precision: each addition of a sequential dot
    // rounds relative to its partial sum, then the scale and the bias round once more.
    score_sigma[jj] = Real(scale) * sqrt(partial_squares) * (step2 ? pipeline.product_slope(scaled) : Real(1)) + abs(s[jj]);
    // Inflated so that the computed sum of |products| (rounded d_k + 2 times) still bounds the
    // exact one: by 2^-50 at least (far more than float128 needs), by 2 gamma(d_k + 3) in double.
    const Real inflate = Real(1 + std::max(0x1p-50, 2 * gamma_n(double(p.d_k) + 3, u)));
    magnitude[jj] = (Real(scale) * abs_dot + Real(std::fabs(bias))) * inflate;
    if (step2) product_magnitude[jj] = Real(scale) * abs_dot * inflate, magnitude[jj] = (abs(capped) + Real(std::fabs(bias))) * inflate;
  };
  const std::int64_t q0 = in.q.offset(b, h, i, 0);
  // The scores of `lanes` keys at a time: each key's three sums are sequential dependency chains,
  // which one key at a time left the core waiting on each addition (three quarters of this
  // function's time). Interleaved, every key's sums still see the same operations in the same
  // order, so each score and bound is the same to the bit.
  auto dot_products = [&]<std::size_t lanes>(std::size_t first, std::integral_constant<std::size_t, lanes>) {
    std::int64_t k0[lanes];
    Real dot[lanes], abs_dot[lanes], partial_squares[lanes];
    for (std::size_t l = 0; l < lanes; ++l) {
      k0[l] = in.k.offset(b, g, keys[first + l], 0);
      dot[l] = abs_dot[l] = partial_squares[l] = Real(0);
    }
    for (std::int64_t t = 0; t < p.d_k; ++t) {
      const Real q_t = Real(wide.q[static_cast<std::size_t>(q0 + t)]);
      for (std::size_t l = 0; l < lanes; ++l) {
        // Exact at >= 106 bits, and in double for f32, f16 and bf16 inputs (24-bit significands,
        // exponents far inside double's range).
        const Real product = q_t * Real(wide.k[static_cast<std::size_t>(k0[l] + t)]);
        dot[l] += product;
        abs_dot[l] += abs(product);
        partial_squares[l] += dot[l] * dot[l];
      }
    }
    for (std::size_t l = 0; l < lanes; ++l) score_key(first + l, dot[l], abs_dot[l], partial_squares[l]);
  };
  std::size_t first = 0;
  for (; first + 4 <= n; first += 4) dot_products(first, std::integral_constant<std::size_t, 4>{});
  for (; first < n; ++first) dot_products(first, std::integral_constant<std::size_t, 1>{});
  // The sink (the pipeline's step 5): one more term of the softmax, exact (an f32 input), with no
  // value. It joins as a pseudo-key, index sink_key, whose V row is zeros, so that every bound
  // below covers what it takes from the keys' weights.
  if (const std::optional<double> sink = pipeline.sink(h)) {
    keys.push_back(sink_key);
    s.push_back(Real(*sink));
    magnitude.push_back(Real(0));
    score_sigma.push_back(Real(0));
    if (step2) scaled_abs.push_back(Real(0)), capped_abs.push_back(Real(0)), product_magnitude.push_back(Real(0));
    ++n;
  }
  Real m = *std::max_element(s.begin(), s.end());
  std::vector<Real> e(n);
  Real sum = 0;
  for (std::size_t jj = 0; jj < n; ++jj) {
    e[jj] = exp(s[jj] - m);
    sum += e[jj];
  }
  result.lse = m + log(sum);
  // Dropout (the pipeline's step 6) with the keep mask the implementation reported: a dropped key
  // is in the softmax's sum but carries no value, and the kept ones' sum is scaled by 1 / (1 - p),
  // with p the f32 the problem holds. Without dropout every key is kept and the scale is 1.
  std::vector<std::uint8_t> dropped(n, 0);
  if (pipeline.has_dropout()) {
    if (!in.mask.has_keep()) throw std::logic_error("reference: a dropout problem needs the keep mask its implementation reported (Mask::with_keep)");
    for (std::size_t jj = 0; jj < n; ++jj) dropped[jj] = keys[jj] != sink_key && !pipeline.kept(b, h, i, keys[jj]);
  }
  const double dropout_p = p.dropout.p;
  const Real rescale = Real(1) / (Real(1) - Real(dropout_p));
  for (std::size_t jj = 0; jj < n; ++jj) {
    if (keys[jj] == sink_key) continue;  // no value
    const Real w = e[jj] / sum;
    if (want_weights) result.weights[static_cast<std::size_t>(keys[jj])] = w;
    if (dropped[jj]) continue;
    const std::int64_t v0 = in.v.offset(b, g, keys[jj], 0);
    for (std::int64_t c = 0; c < p.d_v; ++c) result.out[static_cast<std::size_t>(c)] += w * Real(wide.v[static_cast<std::size_t>(v0 + c)]);
  }
  if (dropout_p > 0)
    for (Real& x : result.out) x *= rescale;

  // Error bounds: for this computation (unit roundoff u) and for the naive algorithm in the
  // problem's working precision (which also rounds the scale and can underflow in exp).
  std::vector<double> ln_w(n), eta(n), eta_naive(n);
  const double u_naive = accumulation_unit_roundoff(working_dtype(p.numerics()));
  const double tiny_naive = working_min_subnormal(working_dtype(p.numerics()));
  for (std::size_t jj = 0; jj < n; ++jj) {
    ln_w[jj] = static_cast<double>(s[jj] - result.lse);
    // In Real until scaled by a unit roundoff: magnitude and spread may exceed the double range.
    const Real spread = abs(s[jj] - m);
    // exp's own error, and in double an exp or a scale * dot that underflows (absolute).
    eta[jj] = static_cast<double>(Real(gamma_n(double(p.d_k) + 2, u)) * magnitude[jj] + Real(u) * spread) + arithmetic.exp_error +
              2 * arithmetic.underflow;
    eta_naive[jj] = static_cast<double>(Real(gamma_n(double(p.d_k) + 3, u_naive)) * magnitude[jj] +
                                        Real(u_naive * 1.01) * spread) + 2 * u_naive;
    if (step2 && keys[jj] != sink_key) {  // the sink is not capped
      const double x = static_cast<double>(scaled_abs[jj]), capped = static_cast<double>(capped_abs[jj]);
      eta[jj] += pipeline.product_step_error(static_cast<double>(Real(gamma_n(double(p.d_k) + 2, u)) * product_magnitude[jj]), x, capped, u,
                                             arithmetic.exp_error);
      // A libm's tanh in the working precision: 2 ulps.
      eta_naive[jj] += pipeline.product_step_error(static_cast<double>(Real(gamma_n(double(p.d_k) + 3, u_naive)) * product_magnitude[jj]), x,
                                                   capped, u_naive, 4 * u_naive);
    }
  }
  const std::vector<double> no_value(static_cast<std::size_t>(p.d_v), 0.0);  // the sink's, a dropped key's
  std::vector<double> dropped_key(static_cast<std::size_t>(p.n_k), 0.0);
  for (std::size_t jj = 0; jj < n; ++jj)
    if (dropped[jj]) dropped_key[static_cast<std::size_t>(keys[jj])] = 1;
  auto v_row = [&](std::int64_t j) {
    return j == sink_key || dropped_key[static_cast<std::size_t>(j)] != 0 ? no_value.data() : wide.v.data() + in.v.offset(b, g, j, 0);
  };
  // The bounds below are of the weighted sum before dropout's scale, times the scale after.
  const double value_scale = static_cast<double>(rescale);
  Real lse_coherent = 0;
  std::vector<Real> weighted_sigma(n);  // w_j sigma_j
  for (std::size_t jj = 0; jj < n; ++jj) {
    weighted_sigma[jj] = e[jj] / sum * score_sigma[jj];
    lse_coherent += weighted_sigma[jj];
  }
  result.lse_score_rounding = u_naive * static_cast<double>(lse_coherent);
  // Keys outer, columns inner; each column sums its keys in order.
  std::vector<Real> squares(static_cast<std::size_t>(p.d_v), Real(0));
  for (std::size_t jj = 0; jj < n; ++jj) {
    const double* v = v_row(keys[jj]);
    for (std::size_t c = 0; c < squares.size(); ++c) {
      const Real term = weighted_sigma[jj] * (Real(v[c] * value_scale) - result.out[c]);
      squares[c] += term * term;
    }
  }
  for (std::size_t c = 0; c < squares.size(); ++c) result.score_rounding[c] = u_naive * static_cast<double>(sqrt(squares[c]));
  if (keys.back() == sink_key && n > 1) {
    const Real m_keys = *std::max_element(s.begin(), s.end() - 1);
    const double coherent = sink_coherent_error(u_naive, static_cast<double>(s[n - 1] - m_keys), static_cast<double>(e[n - 1] / sum));
    for (std::size_t c = 0; c < squares.size(); ++c) result.score_rounding[c] += coherent * std::fabs(static_cast<double>(result.out[c]));
    result.lse_score_rounding += coherent;
  }
  // Near the underflow threshold each weight may lose 2 underflows (exp, then the division) and
  // each product w_j v_jc one more, whatever |v_jc| is.
  weighted_sum_bound(ln_w, eta, keys, p.d_v, u, 2 * arithmetic.underflow, v_row, result.bound, &result.magnitude, arithmetic.underflow);
  weighted_sum_bound(ln_w, eta_naive, keys, p.d_v, u_naive, tiny_naive, v_row, result.naive_bound);
  if (dropout_p > 0) {
    // Dropout's scale: 1 / (1 - p) rounds twice and multiplies once more (the naive algorithm
    // scales each weight, a flash-style one the row's sum; 4 roundings cover either), and here
    // 1 - p, the division and the product round once each.
    for (std::size_t c = 0; c < result.bound.size(); ++c) {
      result.magnitude[c] *= value_scale;
      result.bound[c] = result.bound[c] * value_scale * (1 + 4 * u) + 3.03 * u * result.magnitude[c];
      result.naive_bound[c] = result.naive_bound[c] * value_scale * (1 + 5 * u_naive) + 4.04 * u_naive * result.magnitude[c];
    }
  }
  // LSE = m + log(sum): perturbing every score by at most eta_j moves it by at most max_j eta_j;
  // the sum's own rounding (gamma(n)) and log's error on log(sum) <= log(n) add to that, and
  // m + log(sum) rounds once more.
  const double eta_max = *std::max_element(eta.begin(), eta.end());
  result.lse_bound = 1.01 * (eta_max + gamma_n(double(n), u) + arithmetic.exp_error * (1 + std::log(double(n))) +
                             u * std::fabs(static_cast<double>(result.lse)));
  return result;
}

// One row from the case's inputs as they are (widens them for this one row: for tests).
template <class Real>
ReferenceRow<Real> reference_row(const Problem& p, const CaseInputs& in, std::int64_t row, double u, bool want_weights) {
  return reference_row<Real>(p, WidenedInputs(in), row, multiprecision_arithmetic(u), want_weights);
}

// Rounds x once to dtype (the double conversion can only mislead at an exact tie of the
// target format, which the exact value then breaks).
template <class Real>
double round_once(DType dtype, const Real& x) {
  const double r = static_cast<double>(x);
  if (dtype == DType::f64 || !std::isfinite(r)) return r;
  const double y = round_to(dtype, r);
  const double q = ulp_at(dtype, r);
  const double lo = std::floor(r / q) * q;
  if (r - lo == q / 2) {  // r is a tie in dtype
    const Real exact_r = Real(r);
    if (x > exact_r) return round_to(dtype, r + q / 4);
    if (x < exact_r) return round_to(dtype, r - q / 4);
  }
  return y;
}

}  // namespace attn::detail

#pragma once
// One output row of the reference in any Boost.Multiprecision real type. Shared by
// reference.cpp (float128) and the test that checks the stated error bound (256 bits).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.hpp"
#include "core/inputs.hpp"

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
  // The same for the LSE: u_naive * sqrt(sum_j (w_j sigma_j)^2), since d LSE / d s_j = w_j.
  double lse_score_rounding = 0;
};

inline double gamma_n(double n, double u) { return n * u / (1.0 - n * u); }

// Bound on |computed weighted sum of V - exact| for one row, given each weight's exponent
// perturbation eta_j (see reference.hpp). ln_w: log weights; v(j, c): values.
template <class VAt>
void weighted_sum_bound(const std::vector<double>& ln_w, const std::vector<double>& eta, const std::vector<std::int64_t>& keys,
                        std::int64_t d_v, double u, double underflow, VAt v_at, std::vector<double>& bound,
                        std::vector<double>* magnitude = nullptr) {
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

  std::vector<double> err(n);
  for (std::size_t j = 0; j < n; ++j) {
    const double w = std::exp(ln_w[j]);
    const double linear = w * r;
    const double nonlinear = j == j0 ? std::exp(eta[j0] + lse_rest)
                                     : std::exp(ln_w[j] + std::max(0.0, eta[j] + eta[j0] - ln_w[j0]));
    err[j] = std::min(std::isnan(linear) ? nonlinear : linear, nonlinear);
  }
  const double g = gamma_n(2.0 * double(n) + 4.0, u);
  for (std::int64_t c = 0; c < d_v; ++c) {
    double weighted = 0, perturbation = 0, vmax = 0, plain = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const double av = std::fabs(v_at(keys[j], c));
      plain += std::exp(ln_w[j]) * av;
      weighted += (std::exp(ln_w[j]) + err[j]) * av;
      perturbation += err[j] * av;
      vmax = std::max(vmax, av);
    }
    // 1.01: headroom for the double arithmetic of this bound itself.
    bound[static_cast<std::size_t>(c)] = 1.01 * (perturbation + g * weighted + double(n) * underflow * vmax);
    if (magnitude) (*magnitude)[static_cast<std::size_t>(c)] = plain;
  }
}

template <class Real>
ReferenceRow<Real> reference_row(const Problem& p, const CaseInputs& in, std::int64_t row, double u, bool want_weights) {
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

  std::vector<std::int64_t> keys;
  for (std::int64_t j = 0; j < in.mask.key_limit(b, i); ++j)
    if (in.mask.visible(b, h, i, j)) keys.push_back(j);
  if (keys.empty()) {
    result.fully_masked = true;
    result.lse = -std::numeric_limits<Real>::infinity();
    return result;
  }

  const std::size_t n = keys.size();
  std::vector<Real> s(n);
  // A_j = scale * sum_t |q_t k_jt| + |bias_j|, kept in Real: with f64 inputs near overflow it can
  // exceed the double range even though every score fits.
  std::vector<Real> magnitude(n), score_sigma(n);
  const std::int64_t q0 = in.q.offset(b, h, i, 0);
  for (std::size_t jj = 0; jj < n; ++jj) {
    const std::int64_t k0 = in.k.offset(b, g, keys[jj], 0);
    Real dot = 0, abs_dot = 0, partial_squares = 0;
    for (std::int64_t t = 0; t < p.d_k; ++t) {
      const Real product = Real(in.q.get(q0 + t)) * Real(in.k.get(k0 + t));  // exact at >= 106 bits
      dot += product;
      abs_dot += abs(product);
      partial_squares += dot * dot;
    }
    const double bias = in.mask.bias(b, h, i, keys[jj]);
    s[jj] = Real(scale) * dot + Real(bias);
    // Typical error of this score in the working precision: each addition of a sequential dot
    // rounds relative to its partial sum, then the scale and the bias round once more.
    score_sigma[jj] = Real(scale) * sqrt(partial_squares) + abs(s[jj]);
    magnitude[jj] = (Real(scale) * abs_dot + Real(std::fabs(bias))) * Real(1 + 0x1p-50);
  }
  Real m = *std::max_element(s.begin(), s.end());
  std::vector<Real> e(n);
  Real sum = 0;
  for (std::size_t jj = 0; jj < n; ++jj) {
    e[jj] = exp(s[jj] - m);
    sum += e[jj];
  }
  result.lse = m + log(sum);
  for (std::size_t jj = 0; jj < n; ++jj) {
    const Real w = e[jj] / sum;
    if (want_weights) result.weights[static_cast<std::size_t>(keys[jj])] = w;
    const std::int64_t v0 = in.v.offset(b, g, keys[jj], 0);
    for (std::int64_t c = 0; c < p.d_v; ++c) result.out[static_cast<std::size_t>(c)] += w * Real(in.v.get(v0 + c));
  }

  // Error bounds: for this computation (unit roundoff u) and for the naive algorithm in the
  // problem's working precision (which also rounds the scale and can underflow in exp).
  std::vector<double> ln_w(n), eta(n), eta_naive(n);
  const double u_naive = accumulation_unit_roundoff(p.dtype);
  const double tiny_naive = p.dtype == DType::f64 ? 0x1p-1074 : 0x1p-149;
  for (std::size_t jj = 0; jj < n; ++jj) {
    ln_w[jj] = static_cast<double>(s[jj] - result.lse);
    // In Real until scaled by a unit roundoff: magnitude and spread may exceed the double range.
    const Real spread = abs(s[jj] - m);
    eta[jj] = static_cast<double>(Real(gamma_n(double(p.d_k) + 2, u)) * magnitude[jj] + Real(u) * spread) + 2 * u;
    eta_naive[jj] = static_cast<double>(Real(gamma_n(double(p.d_k) + 3, u_naive)) * magnitude[jj] +
                                        Real(u_naive * 1.01) * spread) + 2 * u_naive;
  }
  auto v_at = [&](std::int64_t j, std::int64_t c) { return in.v.get(in.v.offset(b, g, j, c)); };
  Real lse_squares = 0;
  for (std::size_t jj = 0; jj < n; ++jj) {
    const Real term = e[jj] / sum * score_sigma[jj];
    lse_squares += term * term;
  }
  result.lse_score_rounding = u_naive * static_cast<double>(sqrt(lse_squares));
  for (std::int64_t c = 0; c < p.d_v; ++c) {
    Real squares = 0;
    for (std::size_t jj = 0; jj < n; ++jj) {
      const Real term = e[jj] / sum * score_sigma[jj] * (Real(v_at(keys[jj], c)) - result.out[static_cast<std::size_t>(c)]);
      squares += term * term;
    }
    result.score_rounding[static_cast<std::size_t>(c)] = u_naive * static_cast<double>(sqrt(squares));
  }
  weighted_sum_bound(ln_w, eta, keys, p.d_v, u, 0.0, v_at, result.bound, &result.magnitude);
  weighted_sum_bound(ln_w, eta_naive, keys, p.d_v, u_naive, tiny_naive, v_at, result.naive_bound);
  return result;
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

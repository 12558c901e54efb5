#include "core/metrics.hpp"

#include <cmath>
#include <algorithm>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

namespace attn {

std::string_view to_string(FullyMaskedPolicy policy) {
  switch (policy) {
    case FullyMaskedPolicy::zeros: return "zeros";
    case FullyMaskedPolicy::nan: return "nan";
    case FullyMaskedPolicy::any: return "any";
  }
  return "unknown";
}

void worst_at_first_nonfinite(ErrorMetrics& m, const Problem& p, const Mask& mask, const Tensor& out) {
  if (!std::isfinite(m.max_abs) || m.nan_outside_fully_masked() + m.inf_outside_fully_masked() == 0) return;
  const DType out_dtype = p.dtype_of(Role::o);
  for (std::int64_t row = 0; row < p.rows(); ++row) {
    const std::int64_t i = row % p.n_q, h = (row / p.n_q) % p.h_q, b = row / (p.n_q * p.h_q);
    if (mask.row_fully_masked(b, h, i)) continue;
    for (std::int64_t c = 0; c < p.d_v; ++c) {
      const std::int64_t e = row * p.d_v + c;
      if (out.is_poisoned(e) || std::isfinite(out.get(e))) continue;
      m.max_abs = m.max_rel = std::numeric_limits<double>::infinity();
      m.max_abs_index = m.max_rel_index = m.max_ulps_index = e;
      m.max_ulps = ulp_distance(out_dtype, out.get(e), 0.0);
      return;
    }
  }
}

std::string fully_masked_contents(const ErrorMetrics& m) {
  const FullyMaskedPolicy policy = m.policy;
  if (m.fully_masked_violations == 0) return "";
  // Under the nan policy a row of NaN may still break it (NaN in some elements only); the
  // classes are what the rows hold, so list every class the policy does not make right.
  std::string text;
  auto add = [&](std::int64_t rows, std::string_view what) {
    if (rows > 0) text += fmt::format("{}{} {}", text.empty() ? "" : ", ", rows, what);
  };
  if (policy == FullyMaskedPolicy::zeros) add(m.fully_masked_nan_rows, "hold NaN");
  add(m.fully_masked_inf_rows, "hold Inf");
  if (policy == FullyMaskedPolicy::nan) add(m.fully_masked_zero_rows, "hold zeros");
  add(m.fully_masked_finite_rows, "hold finite non-zero values");
  return text;
}

std::string output_coordinates(const Problem& p, std::int64_t flat) {
  if (flat < 0) return "-";
  const std::int64_t c = flat % p.d_v, i = (flat / p.d_v) % p.n_q, h = (flat / (p.d_v * p.n_q)) % p.h_q,
                     b = flat / (p.d_v * p.n_q * p.h_q);
  return fmt::format("b={} h={} i={} c={}", b, h, i, c);
}

namespace {

// One compared element into m's error figures (ErrorMetrics and TensorErrors name them alike):
// the code that measures the output measures every other judged tensor too.
template <class Errors>
void add_error(Errors& m, DType dtype, std::int64_t e, double got, double want, double& err_sq, double& ref_sq) {
  ++m.compared;
  const double err = std::isfinite(got) ? std::fabs(got - want) : std::numeric_limits<double>::infinity();
  const double rel = err / std::max(std::fabs(want), m.rel_floor);
  if (err > m.max_abs || m.max_abs_index < 0) m.max_abs = err, m.max_abs_index = e;
  if (rel > m.max_rel || m.max_rel_index < 0) m.max_rel = rel, m.max_rel_index = e;
  if (std::fabs(want) >= m.rel_floor || !std::isfinite(got)) {
    const std::uint64_t ulps = ulp_distance(dtype, got, want);
    if (ulps > m.max_ulps || m.max_ulps_index < 0) m.max_ulps = ulps, m.max_ulps_index = e;
  }
  err_sq += err * err;
  ref_sq += want * want;
}

template <class Errors>
void finish_errors(Errors& m, double err_sq, double ref_sq) {
  if (m.compared == 0) return;
  m.rms = std::sqrt(err_sq / double(m.compared));
  m.normwise_rel = ref_sq > 0 ? std::sqrt(err_sq / ref_sq) : std::sqrt(err_sq);
}

}  // namespace

TensorErrors measure_tensor(Role role, DType dtype, const Tensor& got, std::span<const double> want) {
  if (std::int64_t(want.size()) != got.numel())
    throw std::invalid_argument(fmt::format("measure_tensor: {} has {} elements where {} are expected", to_string(role), got.numel(), want.size()));
  TensorErrors m;
  m.role = role;
  for (const double w : want) m.reference_max_abs = std::max(m.reference_max_abs, std::fabs(w));
  m.rel_floor = std::max(min_normal(dtype), m.reference_max_abs / 1024.0);
  double err_sq = 0, ref_sq = 0;
  for (std::int64_t e = 0; e < got.numel(); ++e) {
    const double expected = want[std::size_t(e)];
    double value = std::numeric_limits<double>::quiet_NaN();
    if (got.is_poisoned(e)) {
      ++m.unwritten;
    } else {
      value = got.get(e);
      if (std::isnan(value)) ++m.nan;
      else if (std::isinf(value)) ++(value > 0 ? m.pos_inf : m.neg_inf);
    }
    add_error(m, dtype, e, value, expected, err_sq, ref_sq);
  }
  finish_errors(m, err_sq, ref_sq);
  return m;
}

std::string tensor_coordinates(const Problem& p, Role role, std::int64_t flat) {
  if (flat < 0) return "-";
  if (role == Role::d_sink) return fmt::format("d_sink h={}", flat);
  if (role == Role::d_bias) {
    // The bias's own shape: a dimension it broadcasts over is summed, and shows as "*".
    const bool per_batch = varies_over_batch(p.bias.broadcast), per_head = varies_over_head(p.bias.broadcast);
    const std::int64_t j = flat % p.n_k, i = (flat / p.n_k) % p.n_q, h = per_head ? (flat / (p.n_k * p.n_q)) % p.h_q : 0;
    const std::int64_t b = flat / (p.n_k * p.n_q * (per_head ? p.h_q : 1));
    return fmt::format("d_bias b={} h={} i={} j={}", per_batch ? std::to_string(b) : "*", per_head ? std::to_string(h) : "*", i, j);
  }
  // Queries index the rows of dq (and o, d_o), keys those of dk and dv.
  const bool by_key = role == Role::dk || role == Role::dv || role == Role::k || role == Role::v;
  const std::int64_t heads = by_key ? p.h_kv : p.h_q, rows = by_key ? p.n_k : p.n_q;
  const std::int64_t width = role == Role::dq || role == Role::dk || role == Role::q || role == Role::k ? p.d_k : p.d_v;
  const std::int64_t c = flat % width, i = (flat / width) % rows, h = (flat / (width * rows)) % heads, b = flat / (width * rows * heads);
  return fmt::format("{} b={} h={} {}={} c={}", to_string(role), b, h, by_key ? "j" : "i", i, c);
}

ErrorMetrics measure(const Problem& p, const Mask& mask, const Expected& expected, const Tensor& out, const Tensor* lse,
                     FullyMaskedPolicy policy) {
  ErrorMetrics m;
  m.policy = policy;
  const std::int64_t d_v = p.d_v;

  // Census over every row.
  for (std::int64_t row = 0; row < p.rows(); ++row) {
    const std::int64_t i = row % p.n_q, h = (row / p.n_q) % p.h_q, b = row / (p.n_q * p.h_q);
    const bool fully_masked = mask.row_fully_masked(b, h, i);
    m.fully_masked_rows += fully_masked;
    bool violates = false, any_nan = false, any_inf = false, all_zero = true;
    for (std::int64_t c = 0; c < d_v; ++c) {
      const std::int64_t e = row * d_v + c;
      if (out.is_poisoned(e)) {
        ++m.unwritten;
        continue;
      }
      const double x = out.get(e);
      if (std::isnan(x)) {
        ++m.nan, m.fully_masked_nan += fully_masked, any_nan = true;
      } else if (std::isinf(x)) {
        ++(x > 0 ? m.pos_inf : m.neg_inf), m.fully_masked_inf += fully_masked, any_inf = true;
      }
      all_zero &= x == 0.0;
      if (fully_masked) violates |= policy == FullyMaskedPolicy::zeros ? x != 0.0 : policy == FullyMaskedPolicy::nan && !std::isnan(x);
    }
    if (fully_masked) {
      if (any_nan)
        ++m.fully_masked_nan_rows;
      else if (any_inf)
        ++m.fully_masked_inf_rows;
      else if (all_zero)
        ++m.fully_masked_zero_rows;
      else
        ++m.fully_masked_finite_rows;
    }
    m.fully_masked_violations += violates;
  }

  // Errors over the expected rows.
  for (std::size_t r = 0; r < expected.rows.size(); ++r)
    if (!expected.fully_masked[r])
      for (std::int64_t c = 0; c < d_v; ++c)
        m.reference_max_abs = std::max(m.reference_max_abs, std::fabs(expected.out[r * d_v + c]));
  const DType out_dtype = p.dtype_of(Role::o);  // read once, not per element
  m.rel_floor = std::max(min_normal(out_dtype), m.reference_max_abs / 1024.0);
  double err_sq = 0, ref_sq = 0;
  for (std::size_t r = 0; r < expected.rows.size(); ++r) {
    if (expected.fully_masked[r]) continue;
    for (std::int64_t c = 0; c < d_v; ++c) {
      const std::int64_t e = expected.rows[r] * d_v + c;
      const double want = expected.out[r * d_v + c];
      const double got = out.is_poisoned(e) ? std::numeric_limits<double>::quiet_NaN() : out.get(e);
      add_error(m, out_dtype, e, got, want, err_sq, ref_sq);
    }
  }
  finish_errors(m, err_sq, ref_sq);

  if (lse != nullptr) {
    m.has_lse = true;
    for (std::size_t r = 0; r < expected.rows.size(); ++r) {
      const std::int64_t row = expected.rows[r];
      const double got = lse->is_poisoned(row) ? std::numeric_limits<double>::quiet_NaN() : lse->get(row);
      const double want = expected.lse[r];
      if (expected.fully_masked[r]) {
        const bool ok = (std::isinf(got) && got < 0) || (policy == FullyMaskedPolicy::nan && std::isnan(got)) || policy == FullyMaskedPolicy::any;
        m.lse_violations += !ok;
        continue;
      }
      if (!std::isfinite(got)) {
        ++m.lse_violations;
        continue;
      }
      m.lse_max_abs = std::max(m.lse_max_abs, std::fabs(got - want));
      m.lse_reference_max_abs = std::max(m.lse_reference_max_abs, std::fabs(want));
    }
  }
  return m;
}

}  // namespace attn

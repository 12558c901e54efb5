#include "reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include <boost/multiprecision/float128.hpp>

#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "reference/reference_row.hpp"
#include "reference/reference_row_double_word.hpp"

namespace attn {

using Real = boost::multiprecision::float128;
static_assert(std::numeric_limits<Real>::digits >= 100, "the reference needs at least 100 significand bits");

std::vector<std::int64_t> reference_rows(const Problem& p, const ReferenceOptions& options) {
  const std::int64_t total = p.rows();
  const double per_row = double(p.n_k) * double(p.d_k + p.d_v);
  const double affordable = options.max_work / std::max(per_row, 1.0);
  std::vector<std::int64_t> rows;
  if (!(affordable * 2 < double(total))) {  // every row (and a NaN budget: no sampling either)
    rows.resize(static_cast<std::size_t>(total));
    for (std::int64_t r = 0; r < total; ++r) rows[static_cast<std::size_t>(r)] = r;
    return rows;
  }
  // First and last rows always: edge tiles are where kernels go wrong.
  const std::int64_t wanted = std::max(static_cast<std::int64_t>(affordable), options.min_sampled_rows);
  if (wanted * 2 >= total) {
    rows.resize(static_cast<std::size_t>(total));
    for (std::int64_t r = 0; r < total; ++r) rows[static_cast<std::size_t>(r)] = r;
    return rows;
  }
  std::set<std::int64_t> chosen{0, total - 1, p.n_q - 1, total - p.n_q};
  Rng rng(p.seed, stream_row_sample);
  while (std::int64_t(chosen.size()) < wanted) chosen.insert(static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(total))));
  return {chosen.begin(), chosen.end()};
}

ReferenceResult compute_reference(const Problem& p, const CaseInputs& in, const ReferenceOptions& options) {
  return compute_reference_at(p, in, reference_rows(p, options), options);
}

namespace {

std::uint64_t bits_of_double(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// The double word hi + lo (hi = RN(hi + lo)) rounded once to a narrower dtype. Rounding hi is
// right unless hi is itself a tie of dtype (a midpoint is a double, so hi + lo cannot lie across
// one from hi); then lo's sign breaks it, as round_once does with the exact value.
double round_double_word(DType dtype, double hi, double lo) {
  const double r = round_to(dtype, hi);
  if (lo == 0 || !std::isfinite(hi)) return r;
  const double q = ulp_at(dtype, hi);
  if (hi - std::floor(hi / q) * q != q / 2) return r;  // not a tie (either sign)
  return round_to(dtype, lo > 0 ? hi + q / 4 : hi - q / 4);
}

// The value of dtype (f32, f16, bf16) that every real within 2 bound of the double word hi + lo
// rounds to, if there is one (and it is finite): then the exact output, within bound of hi + lo,
// and the float128 reference's unrounded output, within its own smaller bound of the exact one
// (reference.hpp), both round to it.
std::optional<double> settled_in_dtype(DType dtype, double hi, double lo, double bound) {
  if (!std::isfinite(hi) || !std::isfinite(lo) || !(bound >= 0) || !std::isfinite(bound)) return std::nullopt;
  if (bound == 0) return round_double_word(dtype, hi, lo);  // exact (every visible value is 0)
  constexpr double inf = std::numeric_limits<double>::infinity();
  // The ends hi + (lo -+ 2 bound), the inner sum moved one step outwards to cover its own
  // rounding, and then held exactly as double words.
  const detail::DoubleWord low = detail::two_sum(hi, std::nextafter(lo - 2 * bound, -inf));
  const detail::DoubleWord high = detail::two_sum(hi, std::nextafter(lo + 2 * bound, inf));
  const double a = round_double_word(dtype, low.hi, low.lo), b = round_double_word(dtype, high.hi, high.lo);
  if (bits_of_double(a) != bits_of_double(b) || !std::isfinite(a)) return std::nullopt;
  return a;
}

// The same for an f64 output held as the double word hi + lo (|lo| <= ulp(hi) / 2): settled
// when hi - 2 bound .. hi + lo + 2 bound stays strictly inside the half-gaps around hi.
std::optional<double> settled_in_double(double hi, double lo, double bound) {
  if (!std::isfinite(hi) || !std::isfinite(lo) || !(bound >= 0) || !std::isfinite(bound)) return std::nullopt;
  if (hi == 0) {
    if (lo == 0 && bound == 0) return 0.0;  // +0, as float128's sums starting from +0 give
    return std::nullopt;
  }
  constexpr double inf = std::numeric_limits<double>::infinity();
  const double up = std::nextafter(hi, inf) - hi, down = hi - std::nextafter(hi, -inf);  // both exact
  const double reach = (std::fabs(lo) + 2 * bound) * (1 + 0x1p-50);  // covers its own two roundings
  if (!(reach < std::min(up, down) / 2)) return std::nullopt;
  return hi;
}

// Per row, what compute_reference_at keeps.
struct RowSummary {
  double self_abs = 0, self_ulps = 0, self_lse = 0;
  ScoreRounding score_rounding;
};

template <class Row>
RowSummary keep_row(const Problem& p, const Row& row, const std::vector<double>& rounded, double lse_conversion, std::size_t r,
                    ReferenceResult& result) {
  const auto d_v = static_cast<std::size_t>(p.d_v);
  const DType out_dtype = p.dtype_of(Role::o);  // read once per row, not per element
  RowSummary summary;
  result.fully_masked[r] = row.fully_masked;
  result.lse[r] = static_cast<double>(row.lse);
  summary.score_rounding.lse = row.lse_score_rounding;
  if (!row.fully_masked) summary.self_lse = row.lse_bound + lse_conversion;
  for (std::size_t c = 0; c < d_v; ++c) {
    result.out[r * d_v + c] = rounded[c];
    // Both sides round to the dtype: one ulp at the larger of the two values covers it (the
    // extra ulp covers a reference that rounded down below a binade boundary).
    const double larger = std::fabs(rounded[c]) + row.naive_bound[c] + ulp_at(out_dtype, rounded[c]);
    result.naive_bound[r * d_v + c] = row.naive_bound[c] + row.bound[c] + ulp_at(out_dtype, larger);
    summary.self_abs = std::max(summary.self_abs, row.bound[c]);
    summary.score_rounding.out = std::max(summary.score_rounding.out, row.score_rounding[c]);
    // In ulps at the scale of the summed terms: near an output that cancels to zero, ulps of
    // the output itself would measure the cancellation, not the reference.
    const double scale = std::max(std::fabs(rounded[c]), row.magnitude[c]);
    if (row.bound[c] > 0) summary.self_ulps = std::max(summary.self_ulps, row.bound[c] / ulp_at(out_dtype, scale));
  }
  return summary;
}

// The bounded first pass over one row; empty when the bound does not settle every output
// element (or anything in the row is not finite): that row goes to float128.
std::optional<RowSummary> bounded_row(const Problem& p, const detail::WidenedInputs& wide, std::int64_t flat_row, std::size_t r,
                                      ReferenceResult& result) {
  const auto d_v = static_cast<std::size_t>(p.d_v);
  const DType out_dtype = p.dtype_of(Role::o);  // what every output element rounds to, once
  std::vector<double> rounded(d_v);
  auto finite_statistics = [](const auto& row) {
    if (row.fully_masked) return true;
    if (!std::isfinite(row.lse) || !std::isfinite(row.lse_bound) || !std::isfinite(row.lse_score_rounding)) return false;
    for (std::size_t c = 0; c < row.naive_bound.size(); ++c)
      if (!std::isfinite(row.naive_bound[c]) || !std::isfinite(row.score_rounding[c]) || !std::isfinite(row.magnitude[c])) return false;
    return true;
  };
  auto try_double_word = [&]() -> std::optional<RowSummary> {
    const detail::DoubleWordRow row = detail::reference_row_double_word(p, wide, flat_row);
    if (!finite_statistics(row)) return std::nullopt;
    for (std::size_t c = 0; c < d_v; ++c) {
      const auto value = out_dtype == DType::f64 ? settled_in_double(row.out[c], row.out_low[c], row.bound[c])
                                                 : settled_in_dtype(out_dtype, row.out[c], row.out_low[c], row.bound[c]);
      if (!value) return std::nullopt;
      rounded[c] = *value;
    }
    // The LSE is float128's m + log(sum), converted to double once.
    return keep_row(p, row, rounded, row.fully_masked ? 0.0 : ulp_at(DType::f64, row.lse) / 2, r, result);
  };
  // An f64 output, or an LSE in f64 (the working precision of an f64 input, whatever o's dtype):
  // the double pass's LSE is only a few double ulps from the truth, too coarse to judge one in f64.
  if (out_dtype == DType::f64 || working_dtype(p.numerics()) == DType::f64) return try_double_word();
  // f32/f16/bf16 outputs of f32 working precision: double first; about one row in twenty of diffuse f32 data has an element (an
  // output much smaller than the terms it sums) within the double bound of a tie, and takes the
  // double-word pass, 2^47 times tighter, before float128.
  const detail::ReferenceRow<double> row = detail::reference_row<double>(p, wide, flat_row, detail::double_arithmetic, false);
  if (!finite_statistics(row)) return try_double_word();
  for (std::size_t c = 0; c < d_v; ++c) {
    const auto value = settled_in_dtype(out_dtype, row.out[c], 0.0, row.bound[c]);
    if (!value) return try_double_word();
    rounded[c] = *value;
  }
  return keep_row(p, row, rounded, 0.0, r, result);
}

}  // namespace

ReferenceResult compute_reference_at(const Problem& p, const CaseInputs& in, std::vector<std::int64_t> rows,
                                     const ReferenceOptions& options) {
  ReferenceResult result;
  result.rows = std::move(rows);
  result.sampled = std::int64_t(result.rows.size()) < p.rows();
  const std::size_t count = result.rows.size();
  const auto d_v = static_cast<std::size_t>(p.d_v);
  result.out.resize(count * d_v);
  result.naive_bound.resize(count * d_v);
  result.lse.resize(count);
  result.fully_masked.resize(count);
  if (options.weights) result.weights.resize(count * static_cast<std::size_t>(p.n_k));
  std::vector<RowSummary> summaries(count);
  std::vector<std::uint8_t> fell_back(count, 0);
  const detail::WidenedInputs wide(in);
  // Weights are float128's: the bounded pass settles outputs, not weights.
  const bool bounded_pass = options.bounded_pass && !options.weights;
  constexpr double u = 0x1p-113;

  const int threads = options.threads > 0 ? options.threads : default_thread_count();
  parallel_for_ranges(std::int64_t(count), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t idx = begin; idx < end; ++idx) {
      const auto r = static_cast<std::size_t>(idx);
      if (bounded_pass) {
        if (auto summary = bounded_row(p, wide, result.rows[r], r, result)) {
          summaries[r] = *summary;
          continue;
        }
        fell_back[r] = 1;
      }
      const auto row = detail::reference_row<Real>(p, wide, result.rows[r], detail::multiprecision_arithmetic(u), options.weights);
      std::vector<double> rounded(d_v);
      const DType out_dtype = p.dtype_of(Role::o);
      for (std::size_t c = 0; c < d_v; ++c) rounded[c] = detail::round_once(out_dtype, row.out[c]);
      // The LSE converts to double once: half an ulp of it.
      summaries[r] = keep_row(p, row, rounded, row.fully_masked ? 0.0 : ulp_at(DType::f64, static_cast<double>(row.lse)) / 2, r, result);
      if (options.weights)
        for (std::size_t j = 0; j < static_cast<std::size_t>(p.n_k); ++j)
          result.weights[r * static_cast<std::size_t>(p.n_k) + j] = static_cast<double>(row.weights[j]);
    }
  }, threads);
  for (std::size_t r = 0; r < count; ++r) {
    result.self_bound_max_abs = std::max(result.self_bound_max_abs, summaries[r].self_abs);
    result.self_bound_max_ulps = std::max(result.self_bound_max_ulps, summaries[r].self_ulps);
    result.self_bound_lse_max_abs = std::max(result.self_bound_lse_max_abs, summaries[r].self_lse);
    result.score_rounding.out = std::max(result.score_rounding.out, summaries[r].score_rounding.out);
    result.score_rounding.lse = std::max(result.score_rounding.lse, summaries[r].score_rounding.lse);
    result.rows_fallback += fell_back[r];
  }
  return result;
}

}  // namespace attn

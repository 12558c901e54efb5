#include "reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <boost/multiprecision/float128.hpp>

#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "reference/reference_row.hpp"

namespace attn {

using Real = boost::multiprecision::float128;
static_assert(std::numeric_limits<Real>::digits >= 100, "the reference needs at least 100 significand bits");

std::vector<std::int64_t> reference_rows(const Problem& p, const ReferenceOptions& options) {
  const std::int64_t total = p.rows();
  const double per_row = double(p.n_k) * double(p.d_k + p.d_v);
  auto wanted = static_cast<std::int64_t>(options.max_work / std::max(per_row, 1.0));
  wanted = std::max(wanted, options.min_sampled_rows);
  std::vector<std::int64_t> rows;
  if (wanted * 2 >= total) {
    rows.resize(static_cast<std::size_t>(total));
    for (std::int64_t r = 0; r < total; ++r) rows[static_cast<std::size_t>(r)] = r;
    return rows;
  }
  // First and last rows always: edge tiles are where kernels go wrong.
  std::set<std::int64_t> chosen{0, total - 1, p.n_q - 1, total - p.n_q};
  Rng rng(p.seed, stream_row_sample);
  while (std::int64_t(chosen.size()) < wanted) chosen.insert(static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(total))));
  return {chosen.begin(), chosen.end()};
}

ReferenceResult compute_reference(const Problem& p, const CaseInputs& in, const ReferenceOptions& options) {
  return compute_reference_at(p, in, reference_rows(p, options), options);
}

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
  std::vector<double> self_abs(count), self_ulps(count);
  std::vector<ScoreRounding> score_rounding(count);
  constexpr double u = 0x1p-113;

  const int threads = options.threads > 0 ? options.threads : default_thread_count();
  parallel_for_ranges(std::int64_t(count), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t idx = begin; idx < end; ++idx) {
      const auto r = static_cast<std::size_t>(idx);
      auto row = detail::reference_row<Real>(p, in, result.rows[r], u, options.weights);
      result.fully_masked[r] = row.fully_masked;
      result.lse[r] = static_cast<double>(row.lse);
      score_rounding[r].lse = row.lse_score_rounding;
      for (std::size_t c = 0; c < d_v; ++c) {
        const double rounded = detail::round_once(p.dtype, row.out[c]);
        result.out[r * d_v + c] = rounded;
        // Both sides round to the dtype: one ulp at the larger of the two values covers it (the
        // extra ulp covers a reference that rounded down below a binade boundary).
        const double larger = std::fabs(rounded) + row.naive_bound[c] + ulp_at(p.dtype, rounded);
        result.naive_bound[r * d_v + c] = row.naive_bound[c] + row.bound[c] + ulp_at(p.dtype, larger);
        self_abs[r] = std::max(self_abs[r], row.bound[c]);
        score_rounding[r].out = std::max(score_rounding[r].out, row.score_rounding[c]);
        // In ulps at the scale of the summed terms: near an output that cancels to zero, ulps of
        // the output itself would measure the cancellation, not the reference.
        const double scale = std::max(std::fabs(rounded), row.magnitude[c]);
        if (row.bound[c] > 0) self_ulps[r] = std::max(self_ulps[r], row.bound[c] / ulp_at(p.dtype, scale));
      }
      if (options.weights)
        for (std::size_t j = 0; j < static_cast<std::size_t>(p.n_k); ++j)
          result.weights[r * static_cast<std::size_t>(p.n_k) + j] = static_cast<double>(row.weights[j]);
    }
  }, threads);
  for (std::size_t r = 0; r < count; ++r) {
    result.self_bound_max_abs = std::max(result.self_bound_max_abs, self_abs[r]);
    result.score_rounding.out = std::max(result.score_rounding.out, score_rounding[r].out);
    result.score_rounding.lse = std::max(result.score_rounding.lse, score_rounding[r].lse);
    result.self_bound_max_ulps = std::max(result.self_bound_max_ulps, self_ulps[r]);
  }
  return result;
}

}  // namespace attn

#include "impls/cpu_naive/cpu_naive.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include "core/precision.hpp"
#include "core/score_pipeline.hpp"

namespace attn {
namespace {

// Output row `row` (dv elements): copied where the output holds Acc, else rounded by set().
template <class Acc>
void write_row(Tensor& out, std::int64_t row, std::size_t dv, const Acc* o) {
  const std::int64_t first = row * std::int64_t(dv);
  if (holds<Acc>(out)) {
    std::copy_n(o, dv, out.as<Acc>() + first);
  } else {
    for (std::size_t c = 0; c < dv; ++c) out.set(first + std::int64_t(c), static_cast<double>(o[c]));
  }
}

template <class Acc>
void run_in(const RunArgs& a) {
  const Problem& p = a.problem;
  const CaseInputs& in = a.inputs;
  Tensor& out = a.tensors.required_output(Role::o);
  Tensor* lse = a.tensors.output(Role::lse);
  Tensor* weights = a.tensors.output(Role::weights);
  Tensor* keep = a.tensors.output(Role::keep);
  const auto nq = static_cast<std::size_t>(p.n_q), nk = static_cast<std::size_t>(p.n_k);
  const auto dk = static_cast<std::size_t>(p.d_k), dv = static_cast<std::size_t>(p.d_v);
  if (a.workspace.size() < naive_workspace_bytes(p)) throw std::runtime_error("cpu_naive: workspace too small");
  // Workspace: the score matrix, Q, K and V of one head widened to Acc, one output row.
  Acc* scores = reinterpret_cast<Acc*>(a.workspace.data());
  Acc* q = scores + nq * nk;
  Acc* k = q + nq * dk;
  Acc* v = k + nk * dk;
  Acc* o = v + nk * dv;
  const ScorePipeline pipeline(p, in.mask);
  constexpr Acc excluded = -std::numeric_limits<Acc>::infinity();  // exp(-inf - m) == 0 exactly
  const Acc rescale = pipeline.dropout_rescale<Acc>();

  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t h = 0; h < p.h_q; ++h) {
      const std::int64_t g = p.kv_head(h);
      // Widened in bulk (copy_as): a get() per element was 7-10 % of a run at n = 512 and
      // 1-2 % at 2048, O(n d) work that bent the fitted O(n^2) exponent.
      copy_as(in.q, in.q.offset(b, h, 0, 0), std::int64_t(nq * dk), q);
      copy_as(in.k, in.k.offset(b, g, 0, 0), std::int64_t(nk * dk), k);
      copy_as(in.v, in.v.offset(b, g, 0, 0), std::int64_t(nk * dv), v);

      for (std::size_t i = 0; i < nq; ++i) {
        Acc* s = scores + i * nk;
        pipeline.row_scores<Acc>(b, h, std::int64_t(i), p.n_k, [&](std::int64_t j) {
          Acc dot = 0;
          for (std::size_t t = 0; t < dk; ++t) dot += q[i * dk + t] * k[std::size_t(j) * dk + t];
          return dot;
        }, s, excluded);
        Acc m = excluded;
        for (std::size_t j = 0; j < nk; ++j) m = std::max(m, s[j]);
        const std::int64_t row = (b * p.h_q + h) * p.n_q + std::int64_t(i);
        if (keep)  // dropout's keep mask, every key's draw (a masked key's does not matter)
          pipeline.write_keep_row(*keep, b, h, std::int64_t(i));
        if (m == excluded) {  // every key masked: zeros, LSE -inf
          for (std::size_t c = 0; c < dv; ++c) out.set(row * p.d_v + std::int64_t(c), 0.0);
          if (lse) lse->set(row, -std::numeric_limits<double>::infinity());
          if (weights)
            for (std::size_t j = 0; j < nk; ++j) weights->set(row * p.n_k + std::int64_t(j), 0.0);
          continue;
        }
        // Softmax: subtract the row max, exponentiate, normalise. A sink joins the max and the
        // sum (the pipeline's step 5) and nothing else.
        const std::optional<double> sink = pipeline.sink(h);
        if (sink) m = std::max(m, static_cast<Acc>(*sink));
        Acc sum = 0;
        for (std::size_t j = 0; j < nk; ++j) {
          s[j] = std::exp(s[j] - m);
          sum += s[j];
        }
        if (sink) sum += std::exp(static_cast<Acc>(*sink) - m);
        for (std::size_t j = 0; j < nk; ++j) s[j] /= sum;
        // Weighted sum of V, each output summed over j in order; j outermost so V is read row
        // by row (column order made n_k * d_v strided reads, which fell out of cache at large n).
        // Keys of weight 0 (every masked key) are skipped: 0 * V is NaN where V is NaN or
        // infinite, and a masked key's V must not matter.
        // Dropout (the pipeline's step 6) after the weights are reported: P is the softmax's.
        if (weights)
          for (std::size_t j = 0; j < nk; ++j) weights->set(row * p.n_k + std::int64_t(j), static_cast<double>(s[j]));
        if (pipeline.has_dropout())
          for (std::size_t j = 0; j < nk; ++j) s[j] = pipeline.kept(b, h, std::int64_t(i), std::int64_t(j)) ? s[j] * rescale : Acc(0);
        std::fill(o, o + dv, Acc(0));
        for (std::size_t j = 0; j < nk; ++j)
          if (s[j] != Acc(0))
            for (std::size_t c = 0; c < dv; ++c) o[c] += s[j] * v[j * dv + c];
        write_row(out, row, dv, o);
        if (lse) lse->set(row, static_cast<double>(m + std::log(sum)));
      }
    }
  }
}

}  // namespace

std::size_t naive_workspace_bytes(const Problem& p) {
  const std::size_t element = std::size_t(bytes_per_element(working_dtype(p.numerics())));
  const auto nq = static_cast<std::size_t>(p.n_q), nk = static_cast<std::size_t>(p.n_k);
  return element * (nq * nk + nq * static_cast<std::size_t>(p.d_k) + nk * static_cast<std::size_t>(p.d_k + p.d_v) +
                     static_cast<std::size_t>(p.d_v));
}

void naive_attention(const RunArgs& args) {
  with_working_type(args.problem.numerics(), [&]<class Acc>(Acc) { run_in<Acc>(args); });
}

}  // namespace attn

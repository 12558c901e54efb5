#include "reference/reference_backward.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include <boost/multiprecision/float128.hpp>
#include <fmt/format.h>

#include "core/parallel.hpp"
#include "core/score_pipeline.hpp"
#include "reference/reference_row.hpp"

namespace attn {
namespace {

using Real = boost::multiprecision::float128;

std::vector<double> widened(const Tensor& t) {
  std::vector<double> values(static_cast<std::size_t>(t.numel()));
  copy_as<double>(t, 0, t.numel(), values.data());
  return values;
}

}  // namespace

BackwardReference compute_reference_backward(const Problem& p, const CaseInputs& in, const Tensor& d_o, int threads) {
  const Tensor::Shape want_d_o{p.batch, p.h_q, p.n_q, p.d_v};
  if (d_o.shape() != want_d_o)
    throw std::invalid_argument(fmt::format("compute_reference_backward: dO has shape ({}) where [b, h_q, n_q, d_v] is ({})",
                                            fmt::join(d_o.shape(), ", "), fmt::join(want_d_o, ", ")));
  const std::vector<double> q = widened(in.q), k = widened(in.k), v = widened(in.v), go = widened(d_o);
  const ScorePipeline pipeline(p, in.mask);
  const Real scale(p.effective_scale());
  const Real rescale = pipeline.dropout_rescale<Real>();
  const std::int64_t group = p.h_q / p.h_kv;

  BackwardReference r;
  r.dq.assign(static_cast<std::size_t>(p.batch * p.h_q * p.n_q * p.d_k), 0.0);
  r.dk.assign(static_cast<std::size_t>(p.batch * p.h_kv * p.n_k * p.d_k), 0.0);
  r.dv.assign(static_cast<std::size_t>(p.batch * p.h_kv * p.n_k * p.d_v), 0.0);
  const Tensor& bias = in.mask.bias_tensor();
  const bool has_bias = in.mask.has_bias();
  // Tasks that own every element they write, so that each sum runs in one fixed order whatever
  // the threads: a task is a batch and a kv head, widened to every batch (every kv head) where the
  // bias is shared across batches (heads), whose gradient sums over them.
  const bool bias_per_batch = !has_bias || bias.shape()[0] != 1;
  const bool bias_per_head = !has_bias || bias.shape()[1] != 1;
  const std::int64_t batch_tasks = bias_per_batch ? p.batch : 1, head_tasks = bias_per_head ? p.h_kv : 1;
  const std::int64_t tasks = batch_tasks * head_tasks;
  // Per task: its d_sink terms (h_q) and their magnitudes and, where a bias slice is shared, its
  // part of dBias (each task owns the elements it adds to, as it owns its dK and dV).
  std::vector<std::vector<Real>> sink_parts(static_cast<std::size_t>(tasks));
  std::vector<std::vector<double>> sink_term_parts(static_cast<std::size_t>(tasks));
  std::vector<Real> d_bias(has_bias ? static_cast<std::size_t>(bias.numel()) : 0, Real(0));
  std::vector<double> d_bias_terms(d_bias.size(), 0.0);
  // Each task's largest term magnitudes (BackwardReference::term_magnitude), in double: a bound's
  // scale needs no 113 bits.
  struct Magnitudes : BackwardReference::TermMagnitudes {
    double lse = 0;
  };
  std::vector<Magnitudes> magnitudes(static_cast<std::size_t>(tasks));

  parallel_for_ranges(
      tasks,
      [&](std::int64_t first, std::int64_t last) {
        std::vector<Real> dk_block, dv_block, x, s, w, dp;
        std::vector<double> dk_terms, dv_terms, dq_terms, dp_terms;
        for (std::int64_t task = first; task < last; ++task) {
          std::vector<Real>& sink_part = sink_parts[static_cast<std::size_t>(task)];
          std::vector<double>& sink_terms = sink_term_parts[static_cast<std::size_t>(task)];
          Magnitudes& magnitude = magnitudes[static_cast<std::size_t>(task)];
          sink_part.assign(static_cast<std::size_t>(p.h_q), Real(0));
          sink_terms.assign(static_cast<std::size_t>(p.h_q), 0.0);
          const std::int64_t b_first = bias_per_batch ? task / head_tasks : 0, b_last = bias_per_batch ? b_first + 1 : p.batch;
          const std::int64_t g_first = bias_per_head ? task % head_tasks : 0, g_last = bias_per_head ? g_first + 1 : p.h_kv;
          for (std::int64_t b = b_first; b < b_last; ++b)
            for (std::int64_t g = g_first; g < g_last; ++g) {
              dk_block.assign(static_cast<std::size_t>(p.n_k * p.d_k), Real(0));
              dv_block.assign(static_cast<std::size_t>(p.n_k * p.d_v), Real(0));
              dk_terms.assign(static_cast<std::size_t>(p.n_k * p.d_k), 0.0);
              dv_terms.assign(static_cast<std::size_t>(p.n_k * p.d_v), 0.0);
              for (std::int64_t h = g * group; h < (g + 1) * group; ++h)
                for (std::int64_t i = 0; i < p.n_q; ++i) {
                  const std::vector<std::int64_t> keys = detail::visible_keys(in.mask, b, h, i);
                  if (keys.empty()) continue;  // a fully masked row contributes nothing
                  const std::size_t n = keys.size();
                  const std::int64_t q0 = in.q.offset(b, h, i, 0), o0 = d_o.offset(b, h, i, 0);
                  x.assign(n, Real(0)), s.assign(n, Real(0)), w.assign(n, Real(0)), dp.assign(n, Real(0));
                  dp_terms.assign(n, 0.0);
                  // Steps 1 to 3: x = scale <q, k> (products exact), s = f(x) + bias.
                  Real m = -std::numeric_limits<Real>::infinity();
                  for (std::size_t jj = 0; jj < n; ++jj) {
                    const std::int64_t k0 = in.k.offset(b, g, keys[jj], 0);
                    Real dot = 0;
                    for (std::int64_t t = 0; t < p.d_k; ++t) dot += Real(q[std::size_t(q0 + t)]) * Real(k[std::size_t(k0 + t)]);
                    x[jj] = dot * scale;
                    s[jj] = pipeline.capped<Real>(x[jj]) + Real(in.mask.bias(b, h, i, keys[jj]));
                    if (s[jj] > m) m = s[jj];
                  }
                  // Step 5: the sink, one more term of the denominator.
                  const std::optional<double> sink = pipeline.sink(h);
                  if (sink && Real(*sink) > m) m = Real(*sink);
                  Real sum = sink ? Real(exp(Real(*sink) - m)) : Real(0);
                  const Real sink_term = sum;
                  for (std::size_t jj = 0; jj < n; ++jj) sum += w[jj] = exp(s[jj] - m);
                  magnitude.lse = std::max(magnitude.lse, std::fabs(static_cast<double>(m + log(sum))));
                  // Step 6 and dropout's step 7: P, dP = Z r <dO, v>, D = sum P dP.
                  Real d = 0;
                  double d_terms = 0;
                  for (std::size_t jj = 0; jj < n; ++jj) {
                    w[jj] /= sum;
                    if (!pipeline.kept(b, h, i, keys[jj])) continue;
                    const std::int64_t v0 = in.v.offset(b, g, keys[jj], 0);
                    Real dot = 0;
                    double terms = 0;
                    for (std::int64_t c = 0; c < p.d_v; ++c) {
                      dot += Real(go[std::size_t(o0 + c)]) * Real(v[std::size_t(v0 + c)]);
                      terms += std::fabs(go[std::size_t(o0 + c)] * v[std::size_t(v0 + c)]);
                    }
                    dp[jj] = dot * rescale;
                    dp_terms[jj] = terms * static_cast<double>(rescale);
                    d += w[jj] * dp[jj];
                    d_terms += static_cast<double>(w[jj]) * dp_terms[jj];
                  }
                  if (sink) {
                    sink_part[std::size_t(h)] -= sink_term / sum * d;
                    sink_terms[std::size_t(h)] += static_cast<double>(sink_term / sum) * d_terms;
                  }
                  const std::int64_t dq0 = ((b * p.h_q + h) * p.n_q + i) * p.d_k;
                  std::vector<Real> dq_row(static_cast<std::size_t>(p.d_k), Real(0));
                  dq_terms.assign(static_cast<std::size_t>(p.d_k), 0.0);
                  for (std::size_t jj = 0; jj < n; ++jj) {
                    const std::int64_t j = keys[jj];
                    const Real ds = w[jj] * (dp[jj] - d);
                    const double ds_terms = static_cast<double>(w[jj]) * (dp_terms[jj] + d_terms);
                    if (has_bias) {
                      const std::size_t at = std::size_t(bias.offset(bias_per_batch ? b : 0, bias_per_head ? h : 0, i, j));
                      d_bias[at] += ds;
                      d_bias_terms[at] += ds_terms;
                    }
                    const Real slope = pipeline.product_slope(x[jj]) * scale;
                    const Real dx = ds * slope;
                    const double dx_terms = ds_terms * std::fabs(static_cast<double>(slope));
                    const std::int64_t k0 = in.k.offset(b, g, j, 0);
                    for (std::int64_t t = 0; t < p.d_k; ++t) {
                      dq_row[std::size_t(t)] += dx * Real(k[std::size_t(k0 + t)]);
                      dk_block[std::size_t(j * p.d_k + t)] += dx * Real(q[std::size_t(q0 + t)]);
                      dq_terms[std::size_t(t)] += dx_terms * std::fabs(k[std::size_t(k0 + t)]);
                      dk_terms[std::size_t(j * p.d_k + t)] += dx_terms * std::fabs(q[std::size_t(q0 + t)]);
                    }
                    if (pipeline.kept(b, h, i, j)) {
                      const Real weight = w[jj] * rescale;
                      for (std::int64_t c = 0; c < p.d_v; ++c) {
                        dv_block[std::size_t(j * p.d_v + c)] += weight * Real(go[std::size_t(o0 + c)]);
                        dv_terms[std::size_t(j * p.d_v + c)] += static_cast<double>(weight) * std::fabs(go[std::size_t(o0 + c)]);
                      }
                    }
                  }
                  for (std::int64_t t = 0; t < p.d_k; ++t) {
                    r.dq[std::size_t(dq0 + t)] = static_cast<double>(dq_row[std::size_t(t)]);
                    magnitude.dq = std::max(magnitude.dq, dq_terms[std::size_t(t)]);
                  }
                }
              const std::int64_t k_base = (b * p.h_kv + g) * p.n_k;
              for (std::int64_t e = 0; e < p.n_k * p.d_k; ++e) r.dk[std::size_t(k_base * p.d_k + e)] = static_cast<double>(dk_block[std::size_t(e)]);
              for (std::int64_t e = 0; e < p.n_k * p.d_v; ++e) r.dv[std::size_t(k_base * p.d_v + e)] = static_cast<double>(dv_block[std::size_t(e)]);
              for (const double t : dk_terms) magnitude.dk = std::max(magnitude.dk, t);
              for (const double t : dv_terms) magnitude.dv = std::max(magnitude.dv, t);
            }
        }
      },
      threads > 0 ? threads : default_thread_count());

  for (const Magnitudes& m : magnitudes) {
    r.term_magnitude.dq = std::max(r.term_magnitude.dq, m.dq);
    r.term_magnitude.dk = std::max(r.term_magnitude.dk, m.dk);
    r.term_magnitude.dv = std::max(r.term_magnitude.dv, m.dv);
    r.lse_max_abs = std::max(r.lse_max_abs, m.lse);
  }
  if (pipeline.has_sink()) {
    r.d_sink.assign(static_cast<std::size_t>(p.h_q), 0.0);
    for (std::int64_t h = 0; h < p.h_q; ++h) {
      Real total = 0;
      double terms = 0;
      for (std::size_t t = 0; t < sink_parts.size(); ++t) {  // in task order
        total += sink_parts[t][std::size_t(h)];
        terms += sink_term_parts[t][std::size_t(h)];
      }
      r.d_sink[std::size_t(h)] = static_cast<double>(total);
      r.term_magnitude.d_sink = std::max(r.term_magnitude.d_sink, terms);
    }
  }
  r.d_bias.reserve(d_bias.size());
  for (const Real& e : d_bias) r.d_bias.push_back(static_cast<double>(e));
  for (const double t : d_bias_terms) r.term_magnitude.d_bias = std::max(r.term_magnitude.d_bias, t);
  return r;
}

}  // namespace attn

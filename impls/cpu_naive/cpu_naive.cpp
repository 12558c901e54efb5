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

// The backward pass (cpu_naive.hpp), materialised: per query head the whole P, and dP turned into
// dS in place, n_q x n_k each (and the scaled products, where the soft-cap's slope is taken, with
// one). Workspace per kv group: Q and dO of one head, K and V, dK and dV accumulated over the
// group's heads, the matrices, one row of dQ; with sinks each row's sink weight and dσ per query
// head, with a bias dBias in the bias's shape (both summed over the whole pass, whichever are asked for).
template <class Acc>
void backward_in(const RunArgs& a) {
  const Problem& p = a.problem;
  const CaseInputs& in = a.inputs;
  const Tensor* d_o_tensor = a.tensors.input(Role::d_o);
  if (d_o_tensor == nullptr) throw std::logic_error("cpu_naive: a backward pass without dO");
  Tensor& dq_out = a.tensors.required_output(Role::dq);
  Tensor& dk_out = a.tensors.required_output(Role::dk);
  Tensor& dv_out = a.tensors.required_output(Role::dv);
  Tensor* d_sink_out = a.tensors.output(Role::d_sink);
  Tensor* d_bias_out = a.tensors.output(Role::d_bias);
  const auto nq = static_cast<std::size_t>(p.n_q), nk = static_cast<std::size_t>(p.n_k);
  const auto dk = static_cast<std::size_t>(p.d_k), dv = static_cast<std::size_t>(p.d_v);
  if (a.workspace.size() < naive_workspace_bytes(p)) throw std::runtime_error("cpu_naive: workspace too small");
  const ScorePipeline pipeline(p, in.mask);
  Acc* q = reinterpret_cast<Acc*>(a.workspace.data());
  Acc* d_o = q + nq * dk;
  Acc* k = d_o + nq * dv;
  Acc* v = k + nk * dk;
  Acc* dk_acc = v + nk * dv;
  Acc* dv_acc = dk_acc + nk * dk;
  Acc* weights = dv_acc + nk * dv;  // P
  Acc* ds = weights + nq * nk;      // dP, then dS
  Acc* dq_row = ds + nq * nk;
  Acc* products = dq_row + dk;  // the scaled products, with soft-capping only
  Acc* sink_weights = products + (p.softcap ? nq * nk : 0);  // each row's P_i,sink, with sinks only
  Acc* d_sink = sink_weights + (p.sinks.enabled ? nq : 0);   // per query head, with sinks only
  Acc* d_bias = d_sink + (p.sinks.enabled ? std::size_t(p.h_q) : 0);  // the bias's shape, with a bias only
  if (d_sink_out != nullptr && !p.sinks.enabled) throw std::logic_error("cpu_naive: d_sink asked for a problem without sinks");
  if (d_bias_out != nullptr && !(p.bias.enabled && d_bias_out->numel() <= std::int64_t(broadcast_elements(p, p.bias.broadcast))))
    throw std::logic_error("cpu_naive: d_bias asked for without a bias of the problem's extents");
  if (d_sink_out != nullptr) std::fill(d_sink, d_sink + p.h_q, Acc(0));
  if (d_bias_out != nullptr) std::fill(d_bias, d_bias + d_bias_out->numel(), Acc(0));
  // A bias shared over batches (heads) has extent 1 there: its gradient sums over them.
  const bool bias_per_batch = d_bias_out != nullptr && d_bias_out->shape()[0] != 1;
  const bool bias_per_head = d_bias_out != nullptr && d_bias_out->shape()[1] != 1;
  const Acc scale = static_cast<Acc>(p.effective_scale());
  const Acc rescale = pipeline.dropout_rescale<Acc>();
  const std::int64_t group = p.h_q / p.h_kv;
  constexpr Acc excluded = -std::numeric_limits<Acc>::infinity();

  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t g = 0; g < p.h_kv; ++g) {
      copy_as(in.k, in.k.offset(b, g, 0, 0), std::int64_t(nk * dk), k);
      copy_as(in.v, in.v.offset(b, g, 0, 0), std::int64_t(nk * dv), v);
      std::fill(dk_acc, dk_acc + nk * dk, Acc(0));
      std::fill(dv_acc, dv_acc + nk * dv, Acc(0));
      for (std::int64_t h = g * group; h < (g + 1) * group; ++h) {
        copy_as(in.q, in.q.offset(b, h, 0, 0), std::int64_t(nq * dk), q);
        copy_as(*d_o_tensor, d_o_tensor->offset(b, h, 0, 0), std::int64_t(nq * dv), d_o);
        // P, row by row as the forward computes it: scores of the visible keys, -inf for the
        // others (their weight is then exactly 0, and every later step skips a weight of 0, as
        // the forward does), the max (and the sink's), the normalised exponentials. A fully
        // masked row is all zeros and contributes nothing.
        for (std::size_t i = 0; i < nq; ++i) {
          const Acc* qi = q + i * dk;
          Acc* w = weights + i * nk;
          Acc m = excluded;
          for (std::size_t j = 0; j < nk; ++j) {
            w[j] = excluded;
            if (!pipeline.visible(b, h, std::int64_t(i), std::int64_t(j))) continue;
            Acc dot = 0;
            for (std::size_t t = 0; t < dk; ++t) dot += qi[t] * k[j * dk + t];
            const Acc x = dot * scale;
            if (pipeline.modifies_product()) products[i * nk + j] = x;
            w[j] = pipeline.capped<Acc>(x) + static_cast<Acc>(in.mask.bias(b, h, std::int64_t(i), std::int64_t(j)));
            m = std::max(m, w[j]);
          }
          if (m == excluded) {
            std::fill(w, w + nk, Acc(0));
            if (p.sinks.enabled) sink_weights[i] = Acc(0);
            continue;
          }
          const std::optional<double> sink = pipeline.sink(h);
          if (sink) m = std::max(m, static_cast<Acc>(*sink));
          const Acc sink_exp = sink ? std::exp(static_cast<Acc>(*sink) - m) : Acc(0);
          Acc sum = sink_exp;
          for (std::size_t j = 0; j < nk; ++j) sum += w[j] = std::exp(w[j] - m);
          for (std::size_t j = 0; j < nk; ++j) w[j] /= sum;
          if (sink) sink_weights[i] = sink_exp / sum;
        }
        // dV += (P Z r)^T dO, summed over the rows in order.
        for (std::size_t i = 0; i < nq; ++i)
          for (std::size_t j = 0; j < nk; ++j) {
            const Acc w = weights[i * nk + j];
            if (w == Acc(0) || !pipeline.kept(b, h, std::int64_t(i), std::int64_t(j))) continue;
            const Acc kept_weight = w * rescale;
            for (std::size_t c = 0; c < dv; ++c) dv_acc[j * dv + c] += kept_weight * d_o[i * dv + c];
          }
        // dP = Z r dO V^T; D_i = sum_j P_ij dP_ij; dS = P (dP - D) through the soft-cap's slope
        // and the scale, in place; 0 wherever P is. dσ_h -= P_i,sink D_i and dBias += dS (before
        // the slope: the bias is added after the soft-cap), over b, h and i in order.
        for (std::size_t i = 0; i < nq; ++i) {
          const Acc* w = weights + i * nk;
          Acc* row = ds + i * nk;
          Acc d = 0;
          for (std::size_t j = 0; j < nk; ++j) {
            row[j] = Acc(0);
            if (w[j] == Acc(0) || !pipeline.kept(b, h, std::int64_t(i), std::int64_t(j))) continue;
            for (std::size_t c = 0; c < dv; ++c) row[j] += d_o[i * dv + c] * v[j * dv + c];
            row[j] *= rescale;
            d += w[j] * row[j];
          }
          if (d_sink_out != nullptr) d_sink[h] -= sink_weights[i] * d;
          Acc* bias_row = d_bias_out == nullptr ? nullptr
                                                : d_bias + d_bias_out->offset(bias_per_batch ? b : 0, bias_per_head ? h : 0, std::int64_t(i), 0);
          for (std::size_t j = 0; j < nk; ++j)
            if (w[j] != Acc(0)) {
              const Acc slope = pipeline.modifies_product() ? pipeline.product_slope(products[i * nk + j]) : Acc(1);
              const Acc ds_ij = w[j] * (row[j] - d);
              if (bias_row != nullptr) bias_row[j] += ds_ij;
              row[j] = ds_ij * slope * scale;
            }
        }
        // dQ = dS K, row by row; dK += dS^T Q, summed over the rows in order. Pairs of weight 0
        // are skipped: 0 * K is NaN where a masked key's K is.
        for (std::size_t i = 0; i < nq; ++i) {
          std::fill(dq_row, dq_row + dk, Acc(0));
          for (std::size_t j = 0; j < nk; ++j) {
            if (weights[i * nk + j] == Acc(0)) continue;
            const Acc dx = ds[i * nk + j];
            for (std::size_t t = 0; t < dk; ++t) {
              dq_row[t] += dx * k[j * dk + t];
              dk_acc[j * dk + t] += dx * q[i * dk + t];
            }
          }
          const std::int64_t row = (b * p.h_q + h) * p.n_q + std::int64_t(i);
          for (std::size_t t = 0; t < dk; ++t) dq_out.set(row * p.d_k + std::int64_t(t), static_cast<double>(dq_row[t]));
        }
      }
      const std::int64_t k_base = (b * p.h_kv + g) * p.n_k;
      for (std::size_t e = 0; e < nk * dk; ++e) dk_out.set(k_base * p.d_k + std::int64_t(e), static_cast<double>(dk_acc[e]));
      for (std::size_t e = 0; e < nk * dv; ++e) dv_out.set(k_base * p.d_v + std::int64_t(e), static_cast<double>(dv_acc[e]));
    }
  if (d_sink_out != nullptr)
    for (std::int64_t h = 0; h < p.h_q; ++h) d_sink_out->set(h, static_cast<double>(d_sink[h]));
  if (d_bias_out != nullptr)
    for (std::int64_t e = 0; e < d_bias_out->numel(); ++e) d_bias_out->set(e, static_cast<double>(d_bias[e]));
}

}  // namespace

std::size_t naive_workspace_bytes(const Problem& p) {
  const std::size_t element = std::size_t(bytes_per_element(working_dtype(p.numerics())));
  const auto nq = static_cast<std::size_t>(p.n_q), nk = static_cast<std::size_t>(p.n_k);
  const auto dk = static_cast<std::size_t>(p.d_k), dv = static_cast<std::size_t>(p.d_v);
  if (p.operation == Operation::backward) {
    const std::size_t matrices = p.softcap ? 3 : 2;  // P, dP/dS, and the scaled products with a soft-cap
    // dσ's and dBias's accumulators, whether asked for or not: the yardstick always asks.
    const std::size_t sinks = p.sinks.enabled ? nq + std::size_t(p.h_q) : 0;
    const std::size_t bias = p.bias.enabled ? std::size_t(broadcast_elements(p, p.bias.broadcast)) : 0;
    return element * (nq * (dk + dv) + 2 * nk * (dk + dv) + matrices * nq * nk + dk + sinks + bias);
  }
  return element * (nq * nk + nq * dk + nk * (dk + dv) + dv);
}

void naive_attention(const RunArgs& args) {
  with_working_type(args.problem.numerics(), [&]<class Acc>(Acc) {
    if (args.problem.operation == Operation::backward)
      backward_in<Acc>(args);
    else
      run_in<Acc>(args);
  });
}

}  // namespace attn

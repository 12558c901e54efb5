#include "verification/backward_mistakes.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "core/metrics.hpp"
#include "core/rng.hpp"
#include "core/score_pipeline.hpp"

namespace attn {

const std::vector<KnownBackwardMistake>& known_backward_mistakes() {
  using M = BackwardMistake;
  static const std::vector<KnownBackwardMistake> catalogue{
      {M::d_omitted, "d_omitted", "D_i = sum_j P_ij dP_ij (= <dO_i, O_i>) was left out: dS = P * dP instead of P * (dP - D)"},
      {M::d_from_another_row, "d_from_another_row", "D_i was computed from another row's O: <dO_i, O_{i+1}> instead of <dO_i, O_i>"},
      {M::dk_not_summed_over_group, "dk_not_summed_over_group",
       "under GQA each query head's dK overwrote its kv head's instead of adding to it: dK holds the group's last query head alone"},
      {M::dk_scale_missing, "dk_scale_missing", "dK was computed without the softmax scale: sum_i dS_ij q_i instead of scale * sum_i dS_ij q_i"},
      {M::dv_p_transposed, "dv_p_transposed", "dV used P where P^T belongs: dV_j = sum_i P_ji dO_i instead of sum_i P_ij dO_i"},
      {M::mask_ignored, "mask_ignored",
       "the backward did not apply the causal mask, window or padding: P = exp(s - LSE) recomputed over every key"},
      {M::softcap_slope_missing, "softcap_slope_missing", "dS was not multiplied by the soft-cap's slope 1 - tanh^2(x / c)"},
      {M::dropout_mask_ignored, "dropout_mask_ignored", "the backward took every weight as kept: dropout's keep mask left out of dP and dV"},
      {M::dq_order_varies, "dq_order_varies", "dQ's sum over keys ran in an order that changes from run to run (as atomic adds do)"},
      {M::d_sink_sign_flipped, "d_sink_sign_flipped", "the sinks' gradient has the wrong sign: sum P_i,sink D_i instead of -sum P_i,sink D_i"},
      {M::d_bias_not_summed, "d_bias_not_summed",
       "dBias of a bias shared over batches or heads was overwritten by each batch and head in turn instead of summed over them"},
  };
  return catalogue;
}

const KnownBackwardMistake& known_backward_mistake(BackwardMistake id) {
  for (const KnownBackwardMistake& m : known_backward_mistakes())
    if (m.id == id) return m;
  throw std::logic_error("known_backward_mistake: not in the catalogue");
}

namespace {

// The problem's visibility without its window and padding (the bool mask kept): what mask_ignored sees.
Problem without_window_and_padding(Problem p) {
  p.window = Window{};
  p.padding = KeyPadding{};
  return p;
}

}  // namespace

bool backward_mistake_applies(BackwardMistake mistake, const Problem& p, const Mask& mask) {
  switch (mistake) {
    case BackwardMistake::dk_not_summed_over_group: return p.h_kv < p.h_q;
    case BackwardMistake::mask_ignored: return !p.window.is_none() || !p.padding.valid_len.empty();
    case BackwardMistake::softcap_slope_missing: return p.softcap.has_value();
    case BackwardMistake::dropout_mask_ignored: return p.dropout.enabled();
    case BackwardMistake::d_from_another_row: return p.n_q > 1;
    case BackwardMistake::d_sink_sign_flipped: return mask.has_sinks();
    case BackwardMistake::d_bias_not_summed: {
      if (!mask.has_bias()) return false;
      const auto& shape = mask.bias_tensor().shape();
      return (shape[0] == 1 && p.batch > 1) || (shape[1] == 1 && p.h_q > 1);
    }
    default: return mask.count_visible() > 0;
  }
}

template <class T>
void backward_as_written(std::optional<BackwardMistake> mistake, const Problem& p, const CaseInputs& in, const Tensor& d_o_tensor,
                         Gradients& out, std::uint64_t run) {
  const auto nq = std::size_t(p.n_q), nk = std::size_t(p.n_k), dk = std::size_t(p.d_k), dv = std::size_t(p.d_v);
  const ScorePipeline pipeline(p, in.mask);
  // mask_ignored's P is the right forward's (its LSE) taken over every key its window and padding hide.
  const Problem unmasked = without_window_and_padding(p);
  std::optional<Mask> seen_mask;
  if (mistake == BackwardMistake::mask_ignored) seen_mask.emplace(in.mask.with_visibility_of(unmasked));
  const Mask& seen = seen_mask ? *seen_mask : in.mask;
  const T scale = static_cast<T>(p.effective_scale());
  const T rescale = pipeline.dropout_rescale<T>();
  const std::int64_t group = p.h_q / p.h_kv;
  auto kept = [&](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    return mistake == BackwardMistake::dropout_mask_ignored || pipeline.kept(b, h, i, j);
  };
  std::vector<T> q(nq * dk), k(nk * dk), v(nk * dv), go(nq * dv), x(nq * nk), prob(nq * nk), dp(nq * nk), dk_acc(nk * dk), dv_acc(nk * dv),
      dk_head(nk * dk), o_rows(nq * dv), d(nq), dq_row(dk);
  std::vector<std::size_t> order(nk);
  Rng order_stream(run, 0x6261636b776172ull);  // "backwar": dq_order_varies' stream
  // dσ per query head and dBias in the bias's shape, summed over the whole pass where asked for.
  const bool want_sink = out.holds(Role::d_sink), want_bias = out.holds(Role::d_bias);
  std::vector<T> sink_weight(nq), d_sink(want_sink ? std::size_t(p.h_q) : 0), d_bias(want_bias ? std::size_t(out.d_bias.numel()) : 0);
  const bool bias_per_batch = want_bias && out.d_bias.shape()[0] != 1, bias_per_head = want_bias && out.d_bias.shape()[1] != 1;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t g = 0; g < p.h_kv; ++g) {
      copy_as(in.k, in.k.offset(b, g, 0, 0), std::int64_t(nk * dk), k.data());
      copy_as(in.v, in.v.offset(b, g, 0, 0), std::int64_t(nk * dv), v.data());
      std::fill(dk_acc.begin(), dk_acc.end(), T(0));
      std::fill(dv_acc.begin(), dv_acc.end(), T(0));
      for (std::int64_t h = g * group; h < (g + 1) * group; ++h) {
        copy_as(in.q, in.q.offset(b, h, 0, 0), std::int64_t(nq * dk), q.data());
        copy_as(d_o_tensor, d_o_tensor.offset(b, h, 0, 0), std::int64_t(nq * dv), go.data());
        // P of the head, row by row as the forward computes it (its LSE over the visible keys and
        // the sink), taken over the keys this backward sees; dP; O (for D from another row).
        for (std::size_t i = 0; i < nq; ++i) {
          T m = -std::numeric_limits<T>::infinity();
          for (std::size_t j = 0; j < nk; ++j) {
            T dot = 0;
            for (std::size_t t = 0; t < dk; ++t) dot += q[i * dk + t] * k[j * dk + t];
            x[i * nk + j] = dot * scale;
            if (pipeline.visible(b, h, std::int64_t(i), std::int64_t(j)))
              m = std::max(m, pipeline.capped<T>(x[i * nk + j]) + static_cast<T>(in.mask.bias(b, h, std::int64_t(i), std::int64_t(j))));
          }
          T* row = prob.data() + i * nk;
          std::fill(row, row + nk, T(0));
          std::fill(o_rows.begin() + std::ptrdiff_t(i * dv), o_rows.begin() + std::ptrdiff_t((i + 1) * dv), T(0));
          d[i] = 0;
          sink_weight[i] = 0;
          if (m == -std::numeric_limits<T>::infinity()) continue;  // fully masked: contributes nothing
          const std::optional<double> sink = pipeline.sink(h);
          if (sink) m = std::max(m, static_cast<T>(*sink));
          T sum = sink ? std::exp(static_cast<T>(*sink) - m) : T(0);
          for (std::size_t j = 0; j < nk; ++j)
            if (pipeline.visible(b, h, std::int64_t(i), std::int64_t(j)))
              sum += std::exp(pipeline.capped<T>(x[i * nk + j]) + static_cast<T>(in.mask.bias(b, h, std::int64_t(i), std::int64_t(j))) - m);
          const T lse = m + std::log(sum);
          if (sink) sink_weight[i] = std::exp(static_cast<T>(*sink) - lse);
          for (std::size_t j = 0; j < nk; ++j) {
            dp[i * nk + j] = 0;
            if (!seen.visible(b, h, std::int64_t(i), std::int64_t(j))) continue;
            row[j] = std::exp(pipeline.capped<T>(x[i * nk + j]) + static_cast<T>(in.mask.bias(b, h, std::int64_t(i), std::int64_t(j))) - lse);
            if (!kept(b, h, std::int64_t(i), std::int64_t(j))) continue;
            T dot = 0;
            for (std::size_t c = 0; c < dv; ++c) dot += go[i * dv + c] * v[j * dv + c];
            dp[i * nk + j] = dot * rescale;
            d[i] += row[j] * dp[i * nk + j];
            for (std::size_t c = 0; c < dv; ++c) o_rows[i * dv + c] += row[j] * rescale * v[j * dv + c];
          }
        }
        if (mistake == BackwardMistake::d_omitted) std::fill(d.begin(), d.end(), T(0));
        if (mistake == BackwardMistake::d_from_another_row) {
          std::vector<T> shifted(nq);
          for (std::size_t i = 0; i < nq; ++i) {
            const std::size_t other = (i + 1) % nq;
            for (std::size_t c = 0; c < dv; ++c) shifted[i] += go[i * dv + c] * o_rows[other * dv + c];
          }
          d = shifted;
        }
        std::fill(dk_head.begin(), dk_head.end(), T(0));
        for (std::size_t i = 0; i < nq; ++i) {
          std::fill(dq_row.begin(), dq_row.end(), T(0));
          std::iota(order.begin(), order.end(), std::size_t(0));
          if (mistake == BackwardMistake::dq_order_varies)
            for (std::size_t j = nk; j > 1; --j) std::swap(order[j - 1], order[std::size_t(order_stream.next() % j)]);
          if (want_sink) d_sink[std::size_t(h)] += (mistake == BackwardMistake::d_sink_sign_flipped ? T(1) : T(-1)) * sink_weight[i] * d[i];
          T* bias_row = want_bias ? d_bias.data() + out.d_bias.offset(bias_per_batch ? b : 0, bias_per_head ? h : 0, std::int64_t(i), 0) : nullptr;
          for (const std::size_t j : order) {
            const T weight = prob[i * nk + j];
            if (weight == T(0)) continue;
            const T slope = mistake == BackwardMistake::softcap_slope_missing ? T(1) : pipeline.product_slope(x[i * nk + j]);
            const T ds = weight * (dp[i * nk + j] - d[i]);
            if (bias_row != nullptr) bias_row[j] = mistake == BackwardMistake::d_bias_not_summed ? ds : bias_row[j] + ds;
            const T dx = ds * slope * scale;
            const T dk_factor = mistake == BackwardMistake::dk_scale_missing ? dx / scale : dx;
            for (std::size_t t = 0; t < dk; ++t) {
              dq_row[t] += dx * k[j * dk + t];
              dk_head[j * dk + t] += dk_factor * q[i * dk + t];
            }
          }
          const std::int64_t dq0 = ((b * p.h_q + h) * p.n_q + std::int64_t(i)) * p.d_k;
          for (std::size_t t = 0; t < dk; ++t) out.dq.set(dq0 + std::int64_t(t), static_cast<double>(dq_row[t]));
          for (std::size_t j = 0; j < nk; ++j) {
            // dv_p_transposed reads P at (j, i): rows and keys swapped, nothing where out of range.
            const bool transposed = mistake == BackwardMistake::dv_p_transposed;
            if (transposed && (j >= nq || i >= nk)) continue;
            const std::size_t pi = transposed ? j : i, pj = transposed ? i : j;
            if (!kept(b, h, std::int64_t(pi), std::int64_t(pj))) continue;
            const T weight = prob[pi * nk + pj] * rescale;
            if (weight == T(0)) continue;
            for (std::size_t c = 0; c < dv; ++c) dv_acc[j * dv + c] += weight * go[i * dv + c];
          }
        }
        if (mistake == BackwardMistake::dk_not_summed_over_group)
          dk_acc = dk_head;
        else
          for (std::size_t e = 0; e < dk_acc.size(); ++e) dk_acc[e] += dk_head[e];
      }
      const std::int64_t k_base = (b * p.h_kv + g) * p.n_k;
      for (std::size_t e = 0; e < nk * dk; ++e) out.dk.set(k_base * p.d_k + std::int64_t(e), static_cast<double>(dk_acc[e]));
      for (std::size_t e = 0; e < nk * dv; ++e) out.dv.set(k_base * p.d_v + std::int64_t(e), static_cast<double>(dv_acc[e]));
    }
  for (std::size_t h = 0; h < d_sink.size(); ++h) out.d_sink.set(std::int64_t(h), static_cast<double>(d_sink[h]));
  for (std::size_t e = 0; e < d_bias.size(); ++e) out.d_bias.set(std::int64_t(e), static_cast<double>(d_bias[e]));
}

template void backward_as_written<float>(std::optional<BackwardMistake>, const Problem&, const CaseInputs&, const Tensor&, Gradients&,
                                         std::uint64_t);
template void backward_as_written<double>(std::optional<BackwardMistake>, const Problem&, const CaseInputs&, const Tensor&, Gradients&,
                                          std::uint64_t);
template void backward_as_written<long double>(std::optional<BackwardMistake>, const Problem&, const CaseInputs&, const Tensor&, Gradients&,
                                               std::uint64_t);

Diagnosis diagnose_backward(const Problem& p, const CaseInputs& in, const Tensor& d_o, const Gradients& observed, const Verdict& verdict,
                            const Gradients* rerun) {
  Diagnosis d;
  d.ran = true;
  d.rows = p.rows();
  if (rerun != nullptr)
    if (std::string where = first_gradient_difference(p, observed, *rerun); !where.empty())
      d.nondeterminism = "nondeterministic: two runs of its backward on the same inputs differ at " + where;
  for (const KnownBackwardMistake& mistake : known_backward_mistakes()) {
    if (mistake.id == BackwardMistake::dq_order_varies || !backward_mistake_applies(mistake.id, p, in.mask)) continue;
    // The parameters' gradients are predicted (and compared) where the implementation gave them.
    if ((mistake.id == BackwardMistake::d_sink_sign_flipped && !observed.holds(Role::d_sink)) ||
        (mistake.id == BackwardMistake::d_bias_not_summed && !observed.holds(Role::d_bias)))
      continue;
    d.tested.emplace_back(mistake.name);
    Gradients predicted = make_gradients(p, in.mask);
    for (Role role : parameter_gradient_roles)
      if (!observed.holds(role)) predicted.of(role) = Tensor{};
    backward_as_written<long double>(mistake.id, p, in, d_o, predicted);
    bool matches = true;
    double worst_share = 0, worst_abs = 0, worst_tolerance = 0;
    for (Role role : observed.roles()) {
      const RoleVerdict* judged = verdict.role(role);
      const double tolerance = judged != nullptr ? judged->tolerance : 0.0;
      const Tensor &got = observed.of(role), &want = predicted.of(role);
      double max_abs = 0;
      for (std::int64_t e = 0; e < got.numel() && matches; ++e) {
        const double diff = std::fabs(got.get(e) - want.get(e));
        if (!(diff <= tolerance)) matches = false;
        max_abs = std::max(max_abs, diff);
      }
      if (!matches) break;
      const double share = tolerance > 0 ? max_abs / tolerance : 0.0;
      if (share >= worst_share) worst_share = share, worst_abs = max_abs, worst_tolerance = tolerance;
    }
    if (matches)
      d.matches.push_back({std::string(mistake.name), fmt::format("the gradients match {}", mistake.description), worst_abs, worst_tolerance});
  }
  std::stable_sort(d.matches.begin(), d.matches.end(),
                   [](const DiagnosisMatch& a, const DiagnosisMatch& b) { return a.max_abs / std::max(a.tolerance, 1e-300) < b.max_abs / std::max(b.tolerance, 1e-300); });
  if (d.matches.empty()) d.note = fmt::format("none of the {} backward mistakes tested matches every gradient", d.tested.size());
  return d;
}

}  // namespace attn

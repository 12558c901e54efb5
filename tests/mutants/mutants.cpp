#include "tests/mutants/mutants.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/score_pipeline.hpp"

namespace attn::mutants {
namespace {

using M = Mistake;
using Which = std::optional<Mistake>;  // none: the control

// ---- The mistaken pieces of the mask, evaluated locally (core/mask.cpp's rules, one changed) ----

// Mask::key_range with the window and the padding as the mutant (mis)reads them.
std::pair<std::int64_t, std::int64_t> key_range_as_written(Which mistake, const Problem& p, std::int64_t b, std::int64_t i) {
  Window w = p.window;
  const bool causal = w.is_causal(), sliding = !w.is_none() && !causal;
  if (mistake == M::causal_ignored && causal) w = Window{};
  if ((mistake == M::causal_alignment_swapped && causal) || (mistake == M::window_alignment_swapped && sliding))
    w.align = w.align == Align::top_left ? Align::bottom_right : Align::top_left;
  // One key more before the diagonal: j >= i + delta - left - 1 (a `>` written `>=` one key early).
  if (mistake == M::window_lower_bound_off_by_one && w.left != Window::unbounded) w.left += 1;
  auto [lo, hi] = w.key_range(i, p.n_q, p.n_k);
  if (mistake == M::causal_strict && causal) hi = std::min(hi, std::max<std::int64_t>(i + w.delta(p.n_q, p.n_k), 0));  // key i + delta masked
  if (mistake != M::padding_ignored) {
    const std::int64_t leak = mistake == M::padding_one_key_leaks ? 1 : 0;  // j <= valid_len
    if (p.padding.kind == KeyPadding::Kind::per_batch)
      hi = std::min({hi, p.padding.valid_len[static_cast<std::size_t>(b)] + leak, p.n_k});
    if (p.padding.kind == KeyPadding::Kind::per_query)
      hi = std::min({hi, p.padding.valid_len[static_cast<std::size_t>(b * p.n_q + i)] + leak, p.n_k});
  }
  if (mistake == M::last_key_dropped) hi -= 1;  // for (j = lo; j < hi - 1; ++j)
  return {lo, std::max(lo, hi)};
}

// The boolean mask's flag for (b, h, i, j), whatever causality and padding say. The flags are
// [bb, hh, n_q, n_k] with bb = batch or 1 and hh = h_q or 1 by the mask's broadcast.
bool bool_flag(const Problem& p, const Mask& mask, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  const auto& flags = mask.bool_flags();
  if (flags.empty()) return true;
  const Broadcast bc = p.bool_mask.broadcast;
  const bool per_batch = bc == Broadcast::per_batch || bc == Broadcast::per_batch_head;
  const bool per_head = bc == Broadcast::per_head || bc == Broadcast::per_batch_head;
  const std::int64_t index =
      (((per_batch ? b : 0) * (per_head ? p.h_q : 1) + (per_head ? h : 0)) * p.n_q + i) * p.n_k + j;
  return flags[static_cast<std::size_t>(index)] != 0;
}

// ---- The other mistakes' pieces ----

double scale_as_written(Which mistake, const Problem& p) {
  if (mistake == M::scale_one) return 1.0;
  if (mistake == M::scale_one_over_dk && !p.scale) return 1.0 / double(p.d_k);
  return p.effective_scale();
}

std::int64_t kv_head_as_written(Which mistake, const Problem& p, std::int64_t h) {
  return mistake == M::kv_head_mapping ? h % p.h_kv : p.kv_head(h);
}

// Where (b, h)'s K and V are read from as flat [n_k, d] blocks of the dense BHSD tensors: block
// b * h_kv + kv_head(h); kv_head_as_query_head takes block b * h_q + h (another batch's or
// head's data), and -1 past the end of the tensor, which it reads as zeros (what a bounds-checked
// load such as a TMA copy returns out of bounds).
std::int64_t kv_block_as_written(Which mistake, const Problem& p, std::int64_t b, std::int64_t h) {
  if (mistake != M::kv_head_as_query_head) return b * p.h_kv + kv_head_as_written(mistake, p, h);
  const std::int64_t block = b * p.h_q + h;
  return block < p.batch * p.h_kv ? block : -1;
}

// The query head whose output row receives head h's result.
std::int64_t output_head_as_written(Which mistake, const Problem& p, std::int64_t h) {
  return mistake == M::output_rows_permuted ? (h + 1) % p.h_q : h;
}

// The stand-in score a masked_fill gives masked keys: -1, or -1e4 in f16 (where -1e9 overflows).
double masked_fill_value(const Problem& p) { return p.dtype == DType::f16 ? -1e4 : -1.0; }

// ---- The one implementation ----

// Scores in Acc (double for f64 problems, float otherwise), in the same order as cpu_naive:
// dot over d_k, times scale, plus bias; row max; exp(s - m); sum; divide; P V over keys in order.
// softmax_over_queries: every score of one (b, h) first, then each key's column normalised over
// the queries that see it; O = P V. The LSE written is the row's own (the kernel's statistics
// are per column, so a row LSE is what a caller would read in vain).
template <class Acc>
void run_softmax_over_queries(const RunArgs& a) {
  Tensor& out = a.tensors.required_output(Role::o);
  Tensor* lse = a.tensors.output(Role::lse);
  Tensor* weights = a.tensors.output(Role::weights);
  const Problem& p = a.problem;
  const CaseInputs& in = a.inputs;
  const auto nq = static_cast<std::size_t>(p.n_q), nk = static_cast<std::size_t>(p.n_k);
  const ScorePipeline pipeline(p, in.mask);
  constexpr Acc excluded = -std::numeric_limits<Acc>::infinity();
  std::vector<Acc> s(nq * nk);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h) {
      const std::int64_t g = p.kv_head(h);
      for (std::size_t i = 0; i < nq; ++i)
        pipeline.row_scores<Acc>(b, h, std::int64_t(i), p.n_k, [&](std::int64_t j) {
          Acc dot = 0;
          for (std::int64_t t = 0; t < p.d_k; ++t)
            dot += static_cast<Acc>(in.q.get(in.q.offset(b, h, std::int64_t(i), t))) * static_cast<Acc>(in.k.get(in.k.offset(b, g, j, t)));
          return dot;
        }, s.data() + i * nk, excluded);
      if (Tensor* keep = a.tensors.output(Role::keep))  // reported as drawn; dropout is not applied
        for (std::size_t i = 0; i < nq; ++i) pipeline.write_keep_row(*keep, b, h, std::int64_t(i));
      for (std::size_t i = 0; i < nq; ++i) {  // the row LSE, from the raw scores
        Acc m = excluded, sum = 0;
        for (std::size_t j = 0; j < nk; ++j) m = std::max(m, s[i * nk + j]);
        if (m != excluded)
          for (std::size_t j = 0; j < nk; ++j) sum += std::exp(s[i * nk + j] - m);
        if (lse) lse->set((b * p.h_q + h) * p.n_q + std::int64_t(i), m == excluded ? -std::numeric_limits<double>::infinity() : double(m + std::log(sum)));
      }
      for (std::size_t j = 0; j < nk; ++j) {  // the mistake: normalise each column
        Acc m = excluded, sum = 0;
        for (std::size_t i = 0; i < nq; ++i) m = std::max(m, s[i * nk + j]);
        for (std::size_t i = 0; i < nq; ++i) {
          auto& w = s[i * nk + j];
          w = m == excluded ? Acc(0) : std::exp(w - m);
          sum += w;
        }
        if (sum > 0)
          for (std::size_t i = 0; i < nq; ++i) s[i * nk + j] /= sum;
      }
      for (std::size_t i = 0; i < nq; ++i) {
        const std::int64_t row = (b * p.h_q + h) * p.n_q + std::int64_t(i);
        for (std::int64_t c = 0; c < p.d_v; ++c) {
          Acc o = 0;
          for (std::size_t j = 0; j < nk; ++j)
            if (s[i * nk + j] != Acc(0)) o += s[i * nk + j] * static_cast<Acc>(in.v.get(in.v.offset(b, g, std::int64_t(j), c)));
          out.set(row * p.d_v + c, static_cast<double>(o));
        }
        if (weights)
          for (std::size_t j = 0; j < nk; ++j) weights->set(row * p.n_k + std::int64_t(j), static_cast<double>(s[i * nk + j]));
      }
    }
}

template <class Acc>
void run_in(Which mistake, const RunArgs& a, std::uint64_t run_number) {
  if (mistake == M::softmax_over_queries) return run_softmax_over_queries<Acc>(a);
  Tensor& out = a.tensors.required_output(Role::o);
  Tensor* lse = a.tensors.output(Role::lse);
  Tensor* weights = a.tensors.output(Role::weights);
  Tensor* keep = a.tensors.output(Role::keep);
  if (mistake == M::output_all_zeros) {  // the kernel never ran; the caller's buffers were zeroed
    for (std::int64_t e = 0; e < out.numel(); ++e) out.set(e, 0.0);
    if (lse)
      for (std::int64_t e = 0; e < lse->numel(); ++e) lse->set(e, 0.0);
    if (weights)
      for (std::int64_t e = 0; e < weights->numel(); ++e) weights->set(e, 0.0);
    if (keep)  // the keep mask it reports is drawn, as the control's (the output is what it forgot)
      for (std::int64_t e = 0; e < keep->numel(); ++e) keep->set(e, 1.0);
    return;
  }
  const Problem& p = a.problem;
  const CaseInputs& in = a.inputs;
  const auto nk = static_cast<std::size_t>(p.n_k);
  const auto dk = static_cast<std::size_t>(p.d_k), dv = static_cast<std::size_t>(p.d_v);
  const Acc scale = static_cast<Acc>(scale_as_written(mistake, p));
  // ALiBi's mistakes: the mask with the bias as they write it.
  const bool alibi_mistake = (mistake == M::alibi_slopes_reversed || mistake == M::alibi_sign_flipped) && p.bias.enabled &&
                             p.bias.kind == BiasSpec::Kind::alibi;
  const std::optional<Mask> mask_as_written = alibi_mistake ? std::optional(in.mask.with_bias(alibi_bias_as_written(*mistake, p))) : std::nullopt;
  const Mask& mask = mask_as_written ? *mask_as_written : in.mask;
  const ScorePipeline pipeline(p, mask);
  constexpr Acc excluded = -std::numeric_limits<Acc>::infinity();  // exp(-inf - m) == 0 exactly
  const Acc fill = static_cast<Acc>(masked_fill_value(p));
  // Dropout (the pipeline's step 6) on the built-in stream; dropout_not_rescaled forgets 1 / (1 - p).
  const Acc rescale = mistake == M::dropout_not_rescaled ? Acc(1) : pipeline.dropout_rescale<Acc>();

  std::vector<Acc> q(dk), k(nk * dk), v(nk * dv), s(nk), o(dv);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t h = 0; h < p.h_q; ++h) {
      const std::int64_t block = kv_block_as_written(mistake, p, b, h);
      for (std::size_t e = 0; e < nk * dk; ++e)
        k[e] = block < 0 ? Acc(0) : static_cast<Acc>(in.k.get(block * p.n_k * p.d_k + std::int64_t(e)));
      for (std::size_t e = 0; e < nk * dv; ++e)
        v[e] = block < 0 ? Acc(0) : static_cast<Acc>(in.v.get(block * p.n_k * p.d_v + std::int64_t(e)));

      for (std::int64_t i = 0; i < p.n_q; ++i) {
        for (std::size_t t = 0; t < dk; ++t) q[t] = static_cast<Acc>(in.q.get(in.q.offset(b, h, i, std::int64_t(t))));
        // Scores, scaled and masked.
        for (std::size_t j = 0; j < nk; ++j) {
          if (!sees(mistake, p, in.mask, b, h, i, std::int64_t(j))) {
            s[j] = mistake == M::masked_fill ? fill : excluded;
            continue;
          }
          Acc dot = 0;
          for (std::size_t t = 0; t < dk; ++t) dot += q[t] * k[j * dk + t];
          s[j] = softcap_as_written<Acc>(mistake, pipeline, p, dot * scale, static_cast<Acc>(mask.bias(b, h, i, std::int64_t(j))));
        }
        Acc m = mistake == M::row_max_init_finite ? static_cast<Acc>(finite_row_max_init) : excluded;
        for (std::size_t j = 0; j < nk; ++j) m = std::max(m, s[j]);

        // The sink joins the max (rows that see no key stay fully masked, below).
        const std::optional<double> sink = mistake == M::sink_ignored || m == excluded ? std::nullopt : pipeline.sink(h);
        if (sink) m = std::max(m, static_cast<Acc>(*sink));
        const std::int64_t row = (b * p.h_q + h) * p.n_q + i;  // LSE and weights: the right row
        if (keep) pipeline.write_keep_row(*keep, b, h, i);
        const std::int64_t out_row = (b * p.h_q + output_head_as_written(mistake, p, h)) * p.n_q + i;
        if (m == excluded) {  // every key masked: zeros, LSE -inf
          for (std::size_t c = 0; c < dv; ++c) out.set(out_row * p.d_v + std::int64_t(c), 0.0);
          if (lse) lse->set(row, -std::numeric_limits<double>::infinity());
          if (weights)
            for (std::size_t j = 0; j < nk; ++j) weights->set(row * p.n_k + std::int64_t(j), 0.0);
          continue;
        }
        // Softmax: exponentiate (less the row max), sum, normalise.
        const bool subtract_max = mistake != M::no_max_subtraction;
        Acc sum = 0;
        for (std::size_t j = 0; j < nk; ++j) {
          s[j] = subtract_max ? std::exp(s[j] - m) : std::exp(s[j]);
          sum += s[j];
        }
        if (sink) {
          const Acc sink_term = subtract_max ? std::exp(static_cast<Acc>(*sink) - m) : std::exp(static_cast<Acc>(*sink));
          sum += sink_term;
          if (mistake == M::sink_in_numerator)  // every seen key's numerator gets the sink's term too
            for (std::size_t j = 0; j < nk; ++j)
              if (sees(mistake, p, in.mask, b, h, i, std::int64_t(j))) s[j] += sink_term;
        }
        if (mistake != M::weights_not_normalised)
          for (std::size_t j = 0; j < nk; ++j) s[j] /= sum;  // row_max_init_finite: 0 / 0 where every exp underflowed
        if (mistake == M::weights_rounded_to_bf16)
          for (std::size_t j = 0; j < nk; ++j) s[j] = static_cast<Acc>(round_to(DType::bf16, static_cast<double>(s[j])));
        // Weighted sum of V. Keys of weight 0 (every excluded key) are skipped, so a masked key's
        // V (NaN or infinite included) changes nothing; masked_value_nan_leaks multiplies them too.
        std::fill(o.begin(), o.end(), Acc(0));
        for (std::size_t j = 0; j < nk; ++j) {
          const Acc w = !pipeline.has_dropout() ? s[j] : pipeline.kept(b, h, i, std::int64_t(j)) ? s[j] * rescale : Acc(0);
          if (w != Acc(0) || mistake == M::masked_nonfinite_leak)
            for (std::size_t c = 0; c < dv; ++c) o[c] += w * v[j * dv + c];
        }
        for (std::size_t c = 0; c < dv; ++c) out.set(out_row * p.d_v + std::int64_t(c), static_cast<double>(o[c]));
        if (lse) {
          const Acc natural = subtract_max ? m + std::log(sum) : std::log(sum);
          // lse_base2: max * log2(e) + log2(sum), what an exp2-based kernel holds, returned as it is.
          lse->set(row, mistake == M::lse_base2 ? static_cast<double>(m * std::numbers::log2e_v<Acc> + std::log2(sum)) : static_cast<double>(natural));
        }
        if (weights)
          for (std::size_t j = 0; j < nk; ++j) weights->set(row * p.n_k + std::int64_t(j), static_cast<double>(s[j]));
      }
    }
  }
  // A race between the blocks writing neighbouring rows: on even-numbered runs the pair of rows
  // r, r + 1 (r moving with the run number) lands swapped; odd-numbered runs are right.
  if (mistake == M::nondeterministic && p.rows() >= 2 && run_number % 2 == 0) {
    const std::int64_t r = std::int64_t((run_number / 2) % std::uint64_t(p.rows() - 1));
    for (std::int64_t c = 0; c < p.d_v; ++c) {
      const auto first = out.bits(r * p.d_v + c);
      out.set_bits(r * p.d_v + c, out.bits((r + 1) * p.d_v + c));
      out.set_bits((r + 1) * p.d_v + c, first);
    }
  }
}

// What this mutant does beyond the catalogue's sentence: the instance of the mistake it makes.
std::string_view instance(Mistake mistake) {
  switch (mistake) {
    case M::masked_fill: return "masked scores filled with -1 (-1e4 in f16)";
    case M::last_key_tile_dropped: return "tiles of 16 keys, the partial last one dropped when n_k > 16";
    case M::row_max_init_finite: return "the row max starts at -1e4";
    case M::output_rows_permuted: return "head h's output row written at head (h + 1) % h_q";
    case M::masked_nonfinite_leak: return "P V over masked keys too, with weight 0";
    case M::nondeterministic: return "every other run writes two neighbouring output rows swapped";
    default: return "";
  }
}

std::string description(Which mistake) {
  if (!mistake) return "no mistake (the control)";
  const std::string_view detail = instance(*mistake);
  return std::string(known_mistake(*mistake).description) + (detail.empty() ? "" : " (" + std::string(detail) + ")");
}

class MutantAttention final : public Implementation {
 public:
  explicit MutantAttention(Which mistake) : mistake_(mistake) {}
  std::string name() const override { return "mutant_" + std::string(to_string(mistake_)); }
  Capabilities describe() const override {
    Capabilities c;
    c.summary = "deliberately wrong attention (test only): " + description(mistake_) +
                "; single-threaded, f64 or f32 for f32/f16/bf16";
    c.dtypes = {DType::f64, DType::f32, DType::f16, DType::bf16};
    declare_every_mask_and_shape(c);
    c.returns_lse = true;
    c.returns_weights = true;
    c.deterministic = true;
    c.fully_masked = FullyMaskedPolicy::zeros;
    // The control leaves masked keys out of P V: NaN in a masked V row never reaches it. Declared,
    // property 13 is a failure (not a finding) for the mutant that multiplies them in.
    c.masked_nonfinite_safe = true;
    c.score_modifications = {ScoreModification::softcap, ScoreModification::sink, ScoreModification::dropout};
    return c;
  }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem&) const override { return 0; }  // allocates its own
  void run(const RunArgs& args) const override {
    const std::uint64_t run_number = runs_.fetch_add(1);
    if (args.problem.dtype == DType::f64)
      run_in<double>(mistake_, args, run_number);
    else
      run_in<float>(mistake_, args, run_number);
  }

 private:
  Which mistake_;
  mutable std::atomic<std::uint64_t> runs_{0};  // nondeterministic_rows's race depends on it
};

class BackwardMutant final : public Implementation {
 public:
  explicit BackwardMutant(std::optional<BackwardMistake> mistake) : mistake_(mistake) {}
  std::string name() const override {
    return mistake_ ? "mutant_" + std::string(known_backward_mistake(*mistake_).name) : "mutant_backward_control";
  }
  Capabilities describe() const override {
    Capabilities c = forward_.describe();
    c.summary = "deliberately wrong backward pass (test only): " +
                (mistake_ ? std::string(known_backward_mistake(*mistake_).description) : std::string("no mistake (the control)")) +
                "; the control's forward; single-threaded, f64 or f32 for f32/f16/bf16";
    c.operations = {Operation::forward, Operation::backward};
    c.parameter_gradients = true;
    return c;
  }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem&) const override { return 0; }  // allocates its own
  void run(const RunArgs& args) const override {
    if (args.problem.operation != Operation::backward) return forward_.run(args);
    const Tensor* d_o = args.tensors.input(Role::d_o);
    if (d_o == nullptr) throw std::logic_error("a backward pass without dO");
    // Computed into harness-owned copies, then written to the outputs element by element.
    Gradients computed = make_gradients(args.problem, args.inputs.mask);
    for (Role role : parameter_gradient_roles)
      if (args.tensors.output(role) == nullptr) computed.of(role) = Tensor{};
    const std::uint64_t run_number = runs_.fetch_add(1);
    if (args.problem.dtype == DType::f64)
      backward_as_written<double>(mistake_, args.problem, args.inputs, *d_o, computed, run_number);
    else
      backward_as_written<float>(mistake_, args.problem, args.inputs, *d_o, computed, run_number);
    for (Role role : computed.roles()) {
      Tensor& out = args.tensors.required_output(role);
      for (std::int64_t e = 0; e < out.numel(); ++e) out.set_bits(e, computed.of(role).bits(e));
    }
  }

 private:
  std::optional<BackwardMistake> mistake_;
  MutantAttention forward_{std::nullopt};
  mutable std::atomic<std::uint64_t> runs_{0};  // dq_order_varies draws its order from it
};

}  // namespace

std::unique_ptr<Implementation> make_backward_mutant(std::optional<BackwardMistake> mistake) {
  return std::make_unique<BackwardMutant>(mistake);
}

std::vector<std::unique_ptr<Implementation>> make_all_backward() {
  std::vector<std::unique_ptr<Implementation>> all;
  for (const KnownBackwardMistake& m : known_backward_mistakes()) all.push_back(make_backward_mutant(m.id));
  return all;
}

std::string_view to_string(std::optional<Mistake> mistake) { return mistake ? name_of(*mistake) : "control"; }

const std::vector<Mistake>& all_mistakes() {
  static const std::vector<Mistake> mistakes{
      M::scale_one,         M::scale_one_over_dk,     M::masked_fill,    M::causal_ignored,
      M::causal_alignment_swapped, M::padding_ignored, M::no_max_subtraction,       M::last_key_tile_dropped,
      M::kv_head_mapping, M::weights_not_normalised, M::output_rows_permuted,
      M::softmax_over_queries,     M::causal_strict,          M::weights_rounded_to_bf16,  M::padding_one_key_leaks,
      M::kv_head_as_query_head,    M::row_max_init_finite,    M::masked_nonfinite_leak,   M::last_key_dropped,
      M::output_all_zeros,        M::nondeterministic,       M::softcap_ignored,         M::softcap_clipped,
      M::softcap_after_bias,       M::window_alignment_swapped, M::window_lower_bound_off_by_one, M::alibi_slopes_reversed,
      M::alibi_sign_flipped,       M::lse_base2,                M::sink_ignored,             M::sink_in_numerator,
      M::dropout_not_rescaled};
  return mistakes;
}

bool sees(std::optional<Mistake> mistake, const Problem& p, const Mask& mask, std::int64_t b, std::int64_t h, std::int64_t i,
          std::int64_t j) {
  if (!mistake) return mask.visible(b, h, i, j);
  switch (*mistake) {
    case M::causal_ignored:
    case M::causal_alignment_swapped:
    case M::padding_ignored:
    case M::causal_strict:
    case M::padding_one_key_leaks:
    case M::last_key_dropped:
    case M::window_alignment_swapped:
    case M::window_lower_bound_off_by_one: {
      const auto [lo, hi] = key_range_as_written(mistake, p, b, i);
      return lo <= j && j < hi && bool_flag(p, mask, b, h, i, j);
    }
    case M::last_key_tile_dropped: {
      // Loops over full tiles, then forgets the remainder tile (only once a full tile exists).
      const std::int64_t full_tiles_end = p.n_k / key_tile * key_tile;
      if (p.n_k > key_tile && j >= full_tiles_end) return false;
      return mask.visible(b, h, i, j);
    }
    default: return mask.visible(b, h, i, j);
  }
}

std::unique_ptr<Implementation> make_mutant(Mistake mistake) { return std::make_unique<MutantAttention>(mistake); }

std::vector<std::unique_ptr<Implementation>> make_all() {
  std::vector<std::unique_ptr<Implementation>> all;
  for (Mistake m : all_mistakes()) all.push_back(make_mutant(m));
  return all;
}

std::unique_ptr<Implementation> make_correct_control() { return std::make_unique<MutantAttention>(std::nullopt); }

}  // namespace attn::mutants

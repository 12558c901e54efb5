#include "verification/mistakes.hpp"

#include <cstdlib>
#include <stdexcept>

namespace attn {

const std::vector<KnownMistake>& known_mistakes() {
  using M = MistakeId;
  static const std::vector<KnownMistake> catalogue{
      {M::scale_one, "scale_one", "the scores were not scaled (scale 1 instead of the expected scale)"},
      {M::scale_one_over_dk, "scale_one_over_dk", "the scores were divided by d_k instead of sqrt(d_k)"},
      {M::scale_constant, "scale_constant", "the scores were scaled by another constant (an explicit scale ignored, 1/sqrt(d_v), ...)"},
      {M::softcap_ignored, "softcap_ignored", "the soft-cap was ignored: the scaled scores used as they are"},
      {M::softcap_clipped, "softcap_clipped", "the scores were clipped to [-c, c] instead of soft-capped, c tanh(s / c)"},
      {M::softcap_after_bias, "softcap_after_bias", "the soft-cap was applied after the bias, c tanh((s + bias) / c), instead of before it"},
      {M::alibi_slopes_reversed, "alibi_slopes_reversed", "ALiBi's slopes were taken in reverse head order: head h got head h_q - 1 - h's slope"},
      {M::alibi_sign_flipped, "alibi_sign_flipped", "ALiBi's bias was added with the wrong sign: + slope |i + delta - j|, favouring distant keys"},
      {M::sink_ignored, "sink_ignored", "the attention sink was ignored: the softmax over the keys alone"},
      {M::sink_in_numerator, "sink_in_numerator", "the sink's term exp(sigma - m) was added to every weight's numerator as well as to the denominator"},
      {M::dropout_not_rescaled, "dropout_not_rescaled", "dropout's kept weights were not scaled by 1 / (1 - p): the output shrinks by 1 - p"},
      {M::causal_alignment_swapped, "causal_alignment_swapped", "a top-left causal mask where bottom-right was asked, or the reverse"},
      {M::causal_ignored, "causal_ignored", "the causal part of the mask was ignored"},
      {M::padding_ignored, "padding_ignored", "the key padding (valid lengths) was ignored"},
      {M::causal_strict, "causal_strict", "a strict causal mask: j < i + delta instead of j <= i + delta (the diagonal key masked)"},
      {M::window_alignment_swapped, "window_alignment_swapped", "a window placed top-left where bottom-right was asked, or the reverse"},
      {M::window_ignored, "window_ignored", "the window was ignored: every key seen"},
      {M::window_lower_bound_ignored, "window_lower_bound_ignored", "a sliding window computed as causal: the keys before the window were seen"},
      {M::window_lower_bound_off_by_one, "window_lower_bound_off_by_one", "a window's lower bound off by one: one key more or one fewer before the diagonal"},
      {M::padding_one_key_leaks, "padding_one_key_leaks", "key padding off by one: j <= valid_len, the first padded key seen"},
      {M::padding_batch0_for_all, "padding_batch0_for_all", "every batch padded to batch 0's valid length (valid_len[b] read as valid_len[0])"},
      {M::last_key_tile_dropped, "last_key_tile_dropped", "the partial last tile of keys was not processed"},
      {M::last_key_dropped, "last_key_dropped", "the last key of each row's range was never processed (the key loop stops one short)"},
      {M::masked_fill, "masked_fill", "masked keys were given a finite score (-1, -1e4, -1e9, ...) instead of being excluded"},
      {M::k_transposed, "k_transposed", "each head's K was read as [d_k, n_k] instead of [n_k, d_k]"},
      {M::kv_head_mapping, "kv_head_mapping", "query head h read kv head h % h_kv instead of h / (h_q / h_kv)"},
      {M::kv_head_as_query_head, "kv_head_as_query_head", "GQA ignored: K and V read at query head h's own offset, as if they had h_q heads"},
      {M::layout_ignored, "layout_ignored", "tensors handed over as BSHD were read and written as BHSD"},
      {M::isolated_rows, "isolated_rows", "the output is right except in a few rows (a store to the wrong row, a race, one tile)"},
      {M::weights_not_normalised, "weights_not_normalised", "exp(s - max) was never divided by the row sum"},
      {M::no_max_subtraction, "no_max_subtraction", "exp(s) instead of exp(s - max): large scores overflow"},
      {M::softmax_over_queries, "softmax_over_queries", "the softmax normalised down each key's column (over the queries) instead of along the row"},
      {M::weights_rounded_to_bf16, "weights_rounded_to_bf16", "the softmax weights were rounded to bf16 before P V"},
      {M::lse_base2, "lse_base2", "the LSE was returned in base 2 (max * log2(e) + log2(sum)) instead of the natural log"},
      {M::row_max_init_finite, "row_max_init_finite", "the row max started at a finite value instead of -inf: rows far below it underflow to 0/0"},
      {M::masked_nonfinite_leak, "masked_nonfinite_leak", "NaN/Inf in masked K/V rows reached visible outputs (0 * NaN)"},
      {M::output_all_zeros, "output_all_zeros", "the output was left as zeros (the kernel never ran)"},
      {M::output_rows_permuted, "output_rows_permuted", "output rows were written at the wrong place (heads, batches or rows shifted)"},
      {M::fully_masked_rows_off_policy, "fully_masked_rows_off_policy", "right wherever a key is visible; the fully masked rows break the declared policy"},
      {M::nondeterministic, "nondeterministic", "two runs on the same inputs differ in bits (a race)"},
  };
  return catalogue;
}

Tensor alibi_bias_as_written(MistakeId mistake, const Problem& p) {
  Tensor bias(p.dtype_of(Role::bias), {1, p.h_q, p.n_q, p.n_k});
  const std::int64_t delta = alibi_delta(p);
  const double sign = mistake == MistakeId::alibi_sign_flipped ? 1.0 : -1.0;
  for (std::int64_t h = 0; h < p.h_q; ++h) {
    const double slope = alibi_slope(mistake == MistakeId::alibi_slopes_reversed ? p.h_q - 1 - h : h, p.h_q);
    for (std::int64_t i = 0; i < p.n_q; ++i)
      for (std::int64_t j = 0; j < p.n_k; ++j) bias.set(bias.offset(0, h, i, j), sign * slope * double(std::llabs(i + delta - j)));
  }
  return bias;
}

const KnownMistake& known_mistake(MistakeId id) {
  const auto& all = known_mistakes();
  const auto index = static_cast<std::size_t>(id);
  // The catalogue is kept in enum order; a mistake added out of order is a bug caught on first use.
  if (index >= all.size() || all[index].id != id) throw std::logic_error("verification/mistakes.cpp: the catalogue is out of MistakeId order");
  return all[index];
}

}  // namespace attn

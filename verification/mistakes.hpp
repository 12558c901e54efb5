#pragma once
// The catalogue of known mistakes: the wrong answers attention kernels are known to give, each
// with a stable id, a name (what the verify JSON and the diagnosis print) and a description. The
// diagnosis (diagnosis.hpp) names a failure by testing these against the output; the mutants
// (tests/mutants/) are deliberate implementations of some of them, so that the kill matrix and
// the diagnosis speak of the same mistakes under the same names.
#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

#include "core/problem.hpp"
#include "core/score_pipeline.hpp"
#include "core/tensor.hpp"

namespace attn {

enum class MistakeId {
  scale_one,                     // the scores not scaled
  scale_one_over_dk,             // divided by d_k instead of sqrt(d_k)
  scale_constant,                // another constant scale (fitted)
  softcap_ignored,               // no soft-capping: the scaled scores used as they are
  softcap_clipped,               // the scores clipped to [-c, c] instead of c tanh(s / c)
  softcap_after_bias,            // c tanh((s + bias) / c): the cap applied after the bias
  alibi_slopes_reversed,         // ALiBi's slopes in reverse head order: head h given head h_q - 1 - h's
  alibi_sign_flipped,            // ALiBi added with the wrong sign: + slope_h |i + delta - j|
  sink_ignored,                  // the sink left out of the denominator
  sink_in_numerator,             // the sink's term exp(sigma_h - m) added to every weight's numerator too
  dropout_not_rescaled,          // dropout's kept weights not divided by 1 - p
  causal_alignment_swapped,      // top-left where bottom-right was asked, or the reverse
  causal_ignored,                // no causal mask
  padding_ignored,               // no key padding
  causal_strict,                 // j < i + delta: the diagonal key masked
  window_alignment_swapped,      // a window's diagonal placed top-left where bottom-right was asked, or the reverse
  window_ignored,                // no window at all
  window_lower_bound_ignored,    // a sliding window computed as causal: every key before it seen
  window_lower_bound_off_by_one, // i + delta - left - 1 <= j or i + delta - left + 1 <= j
  padding_one_key_leaks,         // j <= valid_len: the first padded key seen
  padding_batch0_for_all,        // valid_len[b] read as valid_len[0]
  last_key_tile_dropped,         // the partial last key tile never processed
  last_key_dropped,              // the last key of each row's range never processed
  masked_fill,                   // masked keys given a finite score instead of excluded
  k_transposed,                  // each head's K read as [d_k, n_k]
  kv_head_mapping,               // query head h reads kv head h % h_kv
  kv_head_as_query_head,         // K/V read at query head h's offset (GQA ignored)
  layout_ignored,                // BSHD tensors read and written as BHSD
  isolated_rows,                 // right except in a few rows
  weights_not_normalised,        // never divided by the row sum
  no_max_subtraction,            // exp(s) instead of exp(s - max)
  softmax_over_queries,          // the softmax down each key's column
  weights_rounded_to_bf16,       // P rounded to bf16 before P V
  lse_base2,                     // the LSE returned in base 2 (log2 of the row sum), as exp2-based kernels hold it
  row_max_init_finite,           // the row max starts at a finite value
  masked_nonfinite_leak,         // NaN/Inf in masked K/V rows reach visible outputs
  output_all_zeros,              // O left as zeros
  output_rows_permuted,          // rows written at the wrong place
  fully_masked_rows_off_policy,  // only the fully masked rows break the declared policy
  nondeterministic,              // two runs on the same inputs differ in bits
};

// A visible key's score from its scaled product with soft-capping (the score pipeline's step 2,
// core/score_pipeline.hpp) written as a mistake writes it: softcap_ignored, softcap_clipped or
// softcap_after_bias; no mistake, another one, or a problem without a cap: as the pipeline asks
// (ScorePipeline::score's operations). The mutants compute it, the diagnosis predicts with it.
template <class T>
T softcap_as_written(std::optional<MistakeId> mistake, const ScorePipeline& pipeline, const Problem& p, T scaled, T bias) {
  if (!p.softcap || mistake == MistakeId::softcap_ignored) return scaled + bias;
  const T cap = static_cast<T>(*p.softcap);
  if (mistake == MistakeId::softcap_clipped) return std::clamp(scaled, -cap, cap) + bias;
  if (mistake == MistakeId::softcap_after_bias) return pipeline.capped<T>(scaled + bias);
  return pipeline.capped<T>(scaled) + bias;
}

// ALiBi's bias [1, h_q, n_q, n_k] as a mistake writes it (alibi_slopes_reversed,
// alibi_sign_flipped; any other: the problem's own), rounded to the bias role's dtype as Mask
// rounds the right one. The mutants compute with it, the diagnosis predicts with it.
Tensor alibi_bias_as_written(MistakeId mistake, const Problem& p);

struct KnownMistake {
  MistakeId id;
  std::string_view name;         // stable: "scale_one", ... (the JSON's diagnosis.matches[].hypothesis)
  std::string_view description;  // one sentence
};

// Every known mistake, in MistakeId order (the diagnosis tries them roughly in this order).
const std::vector<KnownMistake>& known_mistakes();
const KnownMistake& known_mistake(MistakeId id);
inline std::string_view name_of(MistakeId id) { return known_mistake(id).name; }

}  // namespace attn

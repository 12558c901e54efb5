#pragma once
// Deliberately wrong attention implementations ("mutants"), test builds only. Each makes one
// mistake that kernel writers actually make; the property suite and verify must catch every one.
// All of them are the same plain single-threaded implementation (mutants.cpp) with one switch
// flipped; with no switch flipped it is the correct control, "mutant_control", which must pass
// everything (so a kill is the mistake's doing, not the harness's or the scaffolding's).
//
// Every mutant declares returns_lse, returns_weights, deterministic, fully_masked = zeros,
// masked_nonfinite_safe and all four dtypes, and supports every problem with a causal window or none: nothing excuses it from a check.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/mask.hpp"
#include "core/problem.hpp"
#include "impls/implementation.hpp"

namespace attn::mutants {

enum class Mistake {
  none,                              // the control
  no_scaling,                        // scale 1 instead of effective_scale()
  scale_one_over_dk,                 // 1/d_k instead of 1/sqrt(d_k) (an explicit scale is still used)
  masked_fill_minus_one,             // masked scores set to -1 (-1e4 in f16), not excluded
  causal_ignored,                    // the causal part of the mask ignored
  causal_alignment_swapped,          // top-left where bottom-right is asked, and vice versa
  padding_ignored,                   // key padding (valid lengths) ignored
  no_max_subtraction,                // exp(s) instead of exp(s - max)
  last_key_tile_dropped,             // keys in tiles of 16; the partial last tile dropped when n_k > 16
  gqa_head_mapping_ignored,          // kv head h % h_kv instead of h / (h_q / h_kv)
  weights_not_normalised,            // exp(s - m) never divided by the row sum (the LSE is right)
  query_rows_swapped_between_heads,  // head h's output row written at head (h + 1) % h_q
  softmax_over_queries,              // each key's scores normalised down the column (over queries), not along the row
  causal_strict,                     // causal j < i + delta instead of j <= i + delta (the diagonal masked)
  weights_rounded_to_bf16,           // the softmax weights P rounded to bf16 before P V (a bf16 tensor core's input)
  padding_one_key_leaks,             // key padding j <= valid_len instead of j < valid_len: one padded key seen
  kv_head_as_query_head,             // K/V read at query head h's offset, as if they had h_q heads (zeros past the end)
  row_max_init_finite,               // the row max starts at -1e4, not -inf: rows whose scores all lie below underflow to 0/0
  masked_value_nan_leaks,            // P V over every key, masked ones with weight 0: 0 * NaN in a masked V row leaks
  last_visible_key_dropped,          // keys j < limit - 1: the last key of the row's causal/padding range never processed
  output_left_zeros,                 // never runs: O (and LSE, weights) left as zero-initialised memory
  nondeterministic_rows,             // every other run writes two neighbouring output rows swapped (a race)
};

// "no_scaling", ...; "control" for Mistake::none. The implementation is named "mutant_" + this.
std::string_view to_string(Mistake mistake);
// The 21 mistakes, in the order above (Mistake::none excluded).
const std::vector<Mistake>& all_mistakes();

// The tile width of last_key_tile_dropped.
inline constexpr std::int64_t key_tile = 16;
// row_max_init_finite's initial row maximum.
inline constexpr double finite_row_max_init = -1e4;

std::unique_ptr<Implementation> make_mutant(Mistake mistake);  // Mistake::none: the control
std::vector<std::unique_ptr<Implementation>> make_all();       // the 21 mutants, in all_mistakes() order
std::unique_ptr<Implementation> make_correct_control();        // "mutant_control"

// Whether the implementation with `mistake` treats key j as visible to query i of (b, h): the
// Mask's answer, except for the mask mistakes (causal_ignored, causal_alignment_swapped,
// padding_ignored, last_key_tile_dropped, causal_strict, padding_one_key_leaks, last_visible_key_dropped),
// which evaluate visibility with the mistake applied.
// masked_fill_minus_one sees what the Mask sees; its mistake is what it does with the rest.
bool sees(Mistake mistake, const Problem& problem, const Mask& mask, std::int64_t b, std::int64_t h, std::int64_t i,
          std::int64_t j);

}  // namespace attn::mutants

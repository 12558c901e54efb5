#pragma once
// Deliberately wrong attention implementations ("mutants"), test builds only. Each makes one
// mistake that kernel writers actually make; the property suite and verify must catch every one.
// All of them are the same plain single-threaded implementation (mutants.cpp) with one switch
// flipped; with no switch flipped it is the correct control, "mutant_control", which must pass
// everything (so a kill is the mistake's doing, not the harness's or the scaffolding's).
//
// Every mutant declares returns_lse, returns_weights, deterministic, fully_masked = zeros and
// all four dtypes, and supports every problem: nothing excuses it from a check.
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
};

// "no_scaling", ...; "control" for Mistake::none. The implementation is named "mutant_" + this.
std::string_view to_string(Mistake mistake);
// The 11 mistakes, in the order above (Mistake::none excluded).
const std::vector<Mistake>& all_mistakes();

// The tile width of last_key_tile_dropped.
inline constexpr std::int64_t key_tile = 16;

std::unique_ptr<Implementation> make_mutant(Mistake mistake);  // Mistake::none: the control
std::vector<std::unique_ptr<Implementation>> make_all();       // the 11 mutants, in all_mistakes() order
std::unique_ptr<Implementation> make_correct_control();        // "mutant_control"

// Whether the implementation with `mistake` treats key j as visible to query i of (b, h): the
// Mask's answer, except for the mask mistakes (causal_ignored, causal_alignment_swapped,
// padding_ignored, last_key_tile_dropped), which evaluate visibility with the mistake applied.
// masked_fill_minus_one sees what the Mask sees; its mistake is what it does with the rest.
bool sees(Mistake mistake, const Problem& problem, const Mask& mask, std::int64_t b, std::int64_t h, std::int64_t i,
          std::int64_t j);

}  // namespace attn::mutants

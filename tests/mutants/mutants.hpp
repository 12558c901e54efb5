#pragma once
// Deliberately wrong attention implementations ("mutants"), test builds only. Each makes one
// mistake that kernel writers actually make; the property suite and verify must catch every one.
// All of them are the same plain single-threaded implementation (mutants.cpp) with one switch
// flipped; with no switch flipped it is the correct control, "mutant_control", which must pass
// everything (so a kill is the mistake's doing, not the harness's or the scaffolding's).
//
// Every mutant declares returns_lse, returns_weights, deterministic, fully_masked = zeros,
// masked_nonfinite_safe and all four dtypes, and supports every problem: nothing excuses it from a check.
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "core/mask.hpp"
#include "core/problem.hpp"
#include "impls/implementation.hpp"
#include "verification/backward_mistakes.hpp"
#include "verification/mistakes.hpp"

namespace attn::mutants {

// Each mutant is an instance of one known mistake of the catalogue (verification/mistakes.hpp),
// named "mutant_" + its name there, so the kill matrix and the diagnosis speak of the same
// mistakes. What each mutant does exactly (the fill, the tile, the initial max) is in mutants.cpp
// and the README. The control is no mistake: std::nullopt where a mistake is optional.
using Mistake = MistakeId;

// The mistake's name in the catalogue; "control" for none.
std::string_view to_string(std::optional<Mistake> mistake);
// The 31 mistakes that have a mutant, in a fixed order (make_all()'s).
const std::vector<Mistake>& all_mistakes();

// The tile width of last_key_tile_dropped.
inline constexpr std::int64_t key_tile = 16;
// row_max_init_finite's initial row maximum.
inline constexpr double finite_row_max_init = -1e4;

std::unique_ptr<Implementation> make_mutant(Mistake mistake);
std::vector<std::unique_ptr<Implementation>> make_all();       // the 31 mutants, in all_mistakes() order
std::unique_ptr<Implementation> make_correct_control();        // "mutant_control"

// The backward mutants: the control's forward, and a backward computed by backward_as_written
// (verification/backward_mistakes.hpp) in the working precision with one backward mistake made,
// each gradient rounded once to its dtype. Named "mutant_" + the mistake's name; with none, the
// correct "mutant_backward_control". They declare the forward and the backward, deterministic,
// the parameters' gradients (d_sink, d_bias) and everything the forward mutants declare.
std::unique_ptr<Implementation> make_backward_mutant(std::optional<BackwardMistake> mistake);
std::vector<std::unique_ptr<Implementation>> make_all_backward();  // one per known backward mistake, in catalogue order

// Whether the implementation with `mistake` treats key j as visible to query i of (b, h): the
// Mask's answer, except for the mask mistakes (causal_ignored, causal_alignment_swapped,
// padding_ignored, last_key_tile_dropped, causal_strict, padding_one_key_leaks, last_key_dropped,
// window_alignment_swapped, window_lower_bound_off_by_one),
// which evaluate visibility with the mistake applied. None: the control, the Mask's answer.
// masked_fill sees what the Mask sees; its mistake is what it does with the rest.
bool sees(std::optional<Mistake> mistake, const Problem& problem, const Mask& mask, std::int64_t b, std::int64_t h, std::int64_t i,
          std::int64_t j);

}  // namespace attn::mutants

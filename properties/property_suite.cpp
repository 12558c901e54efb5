#include "properties/property_suite.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "properties/property_detail.hpp"

namespace attn {
namespace {

using namespace property_detail;

std::vector<Property> build_suite() {
  // Dropout changes what the other properties compare (a row's output depends on its keep mask,
  // which moves with the positions): only property 20 draws it.
  ProblemSpace any;
  std::erase(any.score_modifications, ScoreModification::dropout);
  // A sink takes weight from the keys: rows sum to less than one, a constant added to V adds less
  // than itself, the output may leave the values' hull towards 0, and a shift of every score is
  // not one of the sink's. Properties 1, 4, 5 and 14 are about the softmax over keys alone.
  ProblemSpace sinkless = any;
  std::erase(sinkless.score_modifications, ScoreModification::sink);
  ProblemSpace masked = any;  // a masked key in every problem
  masked.needs_mask = true;
  ProblemSpace permutable = any;  // only masks that permuting queries or keys within the visible prefix keeps
  permutable.masks = MaskSupport{false, false, true, false, false, false, false};
  ProblemSpace causal = any;
  causal.needs_causal = true;
  ProblemSpace gqa = any;
  gqa.needs_gqa = true;
  ProblemSpace large = any;
  large.regimes = {Regime::large};
  ProblemSpace fully_masked = any;
  fully_masked.wants_fully_masked = true;
  ProblemSpace shiftable = sinkless;  // scores near the overflow leave no room for an offset
  shiftable.regimes = {Regime::diffuse, Regime::peaked, Regime::saturated, Regime::sparse_int, Regime::uniform01};
  // 14 and 15 are about the scores' arithmetic, not tile edges (3, 12 reach those): a quarter of
  // the work keeps their reference evaluations cheap.
  shiftable.max_work = any.max_work / 4;
  ProblemSpace rescaled = any;
  rescaled.max_work = any.max_work / 4;
  // 14 shifts every score of a row by one offset, which a soft-cap does not ignore: uncapped.
  shiftable.score_modifications.clear();
  // 16 sets a cap of its own, 2^27 above the scores: not near the overflow (the cap would be past
  // it), no drawn cap, and a bias (whose place relative to the cap it then cannot tell) allowed.
  ProblemSpace sink = rescaled;
  sink.needs_sink = true;
  ProblemSpace far_cap = rescaled;
  far_cap.regimes = shiftable.regimes;
  far_cap.score_modifications.clear();

  ProblemSpace windowed = rescaled;
  windowed.needs_window = true;
  ProblemSpace alibi = rescaled;
  alibi.needs_alibi = true;
  ProblemSpace dropout = rescaled;
  dropout.score_modifications.push_back(ScoreModification::dropout);
  dropout.needs_dropout = true;

  // The backward's (21 to 27): each problem runs the forward, then the backward. A fifth of the
  // forward's work: the backward reference sums every gradient in float128.
  ProblemSpace backward = any;
  backward.operation = Operation::backward;
  backward.max_work = any.max_work / 5;
  ProblemSpace backward_any = backward;  // 21 judges dropout's gradients given the reported keep mask
  backward_any.score_modifications.push_back(ScoreModification::dropout);
  ProblemSpace backward_masked = backward;
  backward_masked.needs_mask = true;
  ProblemSpace backward_linear = backward;  // 23: 2 dO stays finite and exact
  backward_linear.regimes = shiftable.regimes;
  ProblemSpace backward_balanced = backward;  // 24: each row's weights sum to one and dS is linear in dP
  backward_balanced.score_modifications.clear();
  ProblemSpace backward_shiftable = backward_linear;  // 25: a shift of V moves every dP_ij and D_i alike only when sum_j P_ij = 1
  std::erase(backward_shiftable.score_modifications, ScoreModification::sink);
  ProblemSpace backward_gqa = backward;
  backward_gqa.needs_gqa = true;

  using Caps = const Capabilities&;
  auto a_backward = [](Caps c) {
    const auto has = [&](Operation o) { return std::find(c.operations.begin(), c.operations.end(), o) != c.operations.end(); };
    return !has(Operation::backward) ? std::string("needs a backward pass (declares none)")
           : !has(Operation::forward) ? std::string("needs a forward pass to feed its backward (declares none)")
                                      : std::string();
  };
  auto a_masked_backward = [a_backward](Caps c) {
    return !a_backward(c).empty() ? a_backward(c) : masks_keys(c.masks) ? std::string() : std::string("needs a mask that excludes keys");
  };
  auto a_deterministic_backward = [a_backward](Caps c) {
    return !a_backward(c).empty() ? a_backward(c) : c.deterministic ? std::string() : std::string("needs deterministic (declares nondeterministic)");
  };
  auto a_grouped_backward = [a_backward](Caps c) {
    return !a_backward(c).empty() ? a_backward(c) : c.gqa ? std::string() : std::string("needs GQA (declares MHA only)");
  };
  auto returns_weights = [](Caps c) { return c.returns_weights ? "" : std::string("needs returns_weights (returns no weights)"); };
  auto a_mask = [](Caps c) {
    return masks_keys(c.masks) ? ""
           : c.masks.bias      ? std::string("needs a mask that excludes keys (declares only an additive bias)")
                               : std::string("needs a mask (declares none)");
  };
  auto a_causal_mask = [](Caps c) {
    return c.masks.causal_top_left || c.masks.causal_bottom_right ? "" : std::string("needs a causal mask (declares none)");
  };
  auto grouped_heads = [](Caps c) { return c.gqa ? "" : std::string("needs GQA (declares MHA only)"); };
  auto deterministic = [](Caps c) { return c.deterministic ? "" : std::string("needs deterministic (declares nondeterministic)"); };
  auto unless_declared_safe = [](Caps c) { return !c.masked_nonfinite_safe; };
  auto soft_capping = [](Caps c) { return lists(c, ScoreModification::softcap) ? "" : std::string("needs soft-capping (does not list it)"); };
  auto window_and_mask = [](Caps c) {
    return !c.masks.windows    ? std::string("needs windows beyond causal (declares none)")
           : !c.masks.bool_mask ? std::string("needs a boolean mask, the window's explicit form (declares none)")
                                : std::string();
  };
  auto bias = [](Caps c) { return c.masks.bias ? "" : std::string("needs an additive bias (declares none)"); };
  auto sink_key_form = [](Caps c) {
    return !lists(c, ScoreModification::sink)   ? std::string("needs attention sinks (does not list them)")
           : !c.masks.bool_mask || !c.masks.bias ? std::string("needs a boolean mask and a bias, the sink's explicit form (declares them not)")
                                                 : std::string();
  };

  auto lists_dropout = [](Caps c) { return lists(c, ScoreModification::dropout) ? "" : std::string("needs dropout (does not list it)"); };
  std::vector<Property> suite{
      {1, "the weights of every visible row sum to one", sinkless, returns_weights, weights_of_visible_rows_sum_to_one, {}},
      {2, "masked keys get exactly zero weight, and large finite values in their K and V change no output bit", masked, a_mask,
       masked_keys_change_nothing, {}},
      {3, "permuting queries permutes the output rows, and permuting keys with their values leaves the output unchanged", permutable,
       {}, permutations_commute, {}},
      {4, "adding a constant to every value row adds it to the output, and scaling V scales O", sinkless, {},
       values_shift_and_scale_the_output, {}},
      {5, "every output coordinate lies within the visible values of that coordinate", sinkless, {}, outputs_lie_within_the_visible_values, {}},
      {6, "batches and heads are independent: changing one never changes another's output", any, {},
       batches_and_heads_are_independent, {}},
      {7, "under a causal mask, a row's output ignores keys beyond its horizon", causal, a_causal_mask,
       causal_rows_ignore_keys_beyond_their_horizon, {}},
      {8, "grouped-query attention equals multi-head attention with the K and V heads repeated", gqa, grouped_heads,
       grouped_heads_equal_repeated_heads, {}},
      {9, "scores near the dtype's overflow give finite outputs", large, {}, large_scores_give_finite_outputs, {}},
      {10, "repeated runs on the same input are bitwise equal", any, deterministic, repeated_runs_are_bitwise_equal, {}},
      {11, "fully masked rows follow the declared policy, and no NaN appears anywhere else", fully_masked, a_mask,
       fully_masked_rows_follow_the_policy, {}},
      {12, "the output agrees with the high-precision reference under the pass rule", any, {}, agrees_with_the_reference, {}},
      {13, "non-finite values (NaN, +-Inf) in masked K and V rows stay out of the outputs of rows that do not see them", masked, a_mask,
       masked_nonfinite_values_stay_out, unless_declared_safe},
      {14, "adding one vector to every key leaves the output unchanged (softmax ignores a per-row offset)", shiftable, {},
       shifting_every_key_changes_nothing, {}},
      {15, "Q multiplied by a power of two c with the scale divided by c gives the same output", rescaled, {},
       scaling_q_against_the_scale_changes_nothing, {}},
      {16, "a soft-cap far above every score changes nothing beyond the pass rule", far_cap, soft_capping,
       a_soft_cap_far_above_every_score_changes_nothing, {}},
      {17, "a window's output equals attention over exactly its window's keys given as a boolean mask", windowed, window_and_mask,
       a_window_equals_its_keys_as_a_boolean_mask, {}},
      {18, "ALiBi equals the same problem with its bias given as a plain additive bias", alibi, bias,
       alibi_equals_its_bias_given_explicitly, {}},
      {19, "a sink equals one more key with a zero value whose score is the sink's logit", sink, sink_key_form,
       a_sink_equals_one_more_key_of_zero_value, {}},
      {20, "dropout's output agrees with the reference given its reported keep mask, which keeps at the rate 1 - p; one seed gives one mask, "
           "another seed another",
       dropout, lists_dropout, dropout_keeps_at_its_rate_and_follows_its_seed, {}},
      {21, "the gradients dQ, dK and dV (and dσ, dBias where given) agree with the high-precision reference under the pass rule", backward_any, a_backward,
       gradients_agree_with_the_reference, {}},
      {22, "keys masked in every row get dK = dV = 0 exactly, and fully masked rows dQ = 0 exactly", backward_masked, a_masked_backward,
       masked_keys_and_rows_get_zero_gradients, {}},
      {23, "doubling dO doubles every gradient exactly", backward_linear, a_deterministic_backward, doubling_d_o_doubles_every_gradient, {}},
      {24, "the keys' gradients dK sum to zero over the keys of every kv head (no soft-cap, no sink)", backward_balanced, a_backward,
       key_gradients_sum_to_zero, {}},
      {25, "adding one vector to every value row leaves dQ and dK unchanged", backward_shiftable, a_backward,
       shifting_every_value_leaves_dq_and_dk_unchanged, {}},
      {26, "grouped-query gradients equal multi-head ones with K and V repeated, dK and dV summed over each group", backward_gqa,
       a_grouped_backward, grouped_head_gradients_equal_summed_repeated_heads, {}},
      {27, "repeated backward runs on the same inputs are bitwise equal", backward, a_deterministic_backward,
       repeated_backward_runs_are_bitwise_equal, {}},
  };
  for (auto& property : suite)
    if (!property.missing) property.missing = [](Caps) { return std::string(); };
  return suite;
}

}  // namespace

const std::vector<Property>& property_suite() {
  static const std::vector<Property> suite = build_suite();
  return suite;
}

}  // namespace attn

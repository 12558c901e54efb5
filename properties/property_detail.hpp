#pragma once
// Inside the property suite (property_suite.hpp): what its files share. The problem generator
// (problem_space.cpp), the checks (checks_masks_and_values.cpp, checks_structure_and_numerics.cpp, checks_variants.cpp,
// on the helpers of check_support.cpp), the suite's table (property_suite.cpp) and the RapidCheck
// driver (property_runner.cpp). Private to properties/.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/inputs.hpp"
#include "core/pass_rule.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "properties/property_suite.hpp"

namespace attn::property_detail {

// b * h_q * n_q * n_k * (d_k + d_v): the work a problem's budget caps.
double work_of(const Problem& p);
// Whether a declared mask can exclude keys (an additive bias alone cannot).
bool masks_keys(const MaskSupport& m);

// ---- what the checks share (check_support.cpp) ----

struct Outputs {
  Tensor out, lse, weights;
  Tensor keep;  // dropout's keep mask, on dropout problems
  std::string error;  // what it threw, if it did: run_failed_prefix and the message
};
// A check's message that starts with it reports a run that threw or crashed: a failure wherever
// it happens, never a finding (a crash inside a check whose mismatch would be one is still a crash).
inline constexpr std::string_view run_failed_prefix = "run threw: ";

// A check's own problem (a changed scale, the MHA form of a GQA case, ...) that the
// implementation does not declare or refuses: the draw tests nothing, which is not a failure
// (a fixed-scale kernel cannot be asked about another scale). The runner discards the draw.
struct DerivedProblemRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs an implementation on fresh poisoned outputs; what it throws is kept in Outputs::error.
// Every problem goes through covers() and supports() first, as verify's cases do: one refused
// throws DerivedProblemRefused.
Outputs run(const Implementation& impl, const Problem& p, const CaseInputs& in);
// Extra randomness a check needs, drawn from the problem's seed (never from RapidCheck), so the
// repro string alone reruns it.
Rng check_rng(const Problem& p, std::uint64_t purpose);
std::int64_t out_index(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t c);
// First element where the rows of two outputs differ in bits, or "".
std::string first_bit_difference(const Problem& p, const Tensor& expected, const Tensor& got, std::int64_t b, std::int64_t h,
                                 std::int64_t i_expected, std::int64_t i_got, const char* what);
// The pass rule's verdict for an output against the exact answer for these inputs (judge/).
Verdict judge_against_reference(const Implementation& impl, const Problem& p, const CaseInputs& in, const Outputs& o);
std::string verdict_failure(const Verdict& v, const char* what);
// A copy of the inputs with the data of another seed: what "changing" a slice draws from.
CaseInputs other_data(const Problem& p);
// K and V of each kv head repeated for every query head of its group: the MHA form of a GQA case.
CaseInputs with_repeated_kv(const Problem& p, const CaseInputs& in);
// Copies element range [from, from + count) of src into dst.
void copy_range(const Tensor& src, Tensor& dst, std::int64_t from, std::int64_t count);
// The unit roundoff a property's rounding allowance is measured in (the pass rule's: the
// problem's working precision, coarsened for the implementation's matrix products).
double unit_roundoff_for(const Implementation& impl, const Problem& p);
// k times an a-priori naive bound plus the pass rule's ulp floor, in ulps of `ulp_dtype` at `magnitude`.
double allowance_from_pass_rule(const Implementation& impl, const Problem& p, DType ulp_dtype, double naive_bound, double magnitude);

// ---- the backward pass's (properties 21 to 27; p.operation is backward) ----

struct BackwardOutputs {
  Outputs forward;     // the implementation's own forward on the case (its O, LSE, keep mask)
  Gradients gradients;
  std::string error;   // what the forward or the backward threw: run_failed_prefix and the message
};
// Its forward, then its backward fed that forward's O and LSE, as verify runs a backward case.
BackwardOutputs run_backward(const Implementation& impl, const Problem& p, const CaseInputs& in, const Tensor& d_o);
// The same backward again on the forward outputs of `first` (and another dO): what a check that
// changes only dO, or repeats the backward, runs.
BackwardOutputs rerun_backward(const Implementation& impl, const Problem& p, const CaseInputs& in, const Tensor& d_o, const BackwardOutputs& first);
// The gradients' verdict against the backward reference (with the forward's keep mask under dropout).
Verdict judge_gradients_against_reference(const Implementation& impl, const Problem& p, const CaseInputs& in, const Tensor& d_o,
                                          const BackwardOutputs& o);

// ---- the checks: "" when the property holds on the problem, else what broke ----

std::string weights_of_visible_rows_sum_to_one(const Implementation& impl, const Problem& p);
std::string masked_keys_change_nothing(const Implementation& impl, const Problem& p);
std::string masked_nonfinite_values_stay_out(const Implementation& impl, const Problem& p);
std::string permutations_commute(const Implementation& impl, const Problem& p);
std::string values_shift_and_scale_the_output(const Implementation& impl, const Problem& p);
std::string outputs_lie_within_the_visible_values(const Implementation& impl, const Problem& p);
std::string batches_and_heads_are_independent(const Implementation& impl, const Problem& p);
std::string causal_rows_ignore_keys_beyond_their_horizon(const Implementation& impl, const Problem& p);
std::string grouped_heads_equal_repeated_heads(const Implementation& impl, const Problem& p);
std::string large_scores_give_finite_outputs(const Implementation& impl, const Problem& p);
std::string repeated_runs_are_bitwise_equal(const Implementation& impl, const Problem& p);
std::string fully_masked_rows_follow_the_policy(const Implementation& impl, const Problem& p);
std::string agrees_with_the_reference(const Implementation& impl, const Problem& p);
std::string shifting_every_key_changes_nothing(const Implementation& impl, const Problem& p);
std::string scaling_q_against_the_scale_changes_nothing(const Implementation& impl, const Problem& p);
std::string a_soft_cap_far_above_every_score_changes_nothing(const Implementation& impl, const Problem& p);
std::string a_window_equals_its_keys_as_a_boolean_mask(const Implementation& impl, const Problem& p);
std::string alibi_equals_its_bias_given_explicitly(const Implementation& impl, const Problem& p);
std::string a_sink_equals_one_more_key_of_zero_value(const Implementation& impl, const Problem& p);
std::string dropout_keeps_at_its_rate_and_follows_its_seed(const Implementation& impl, const Problem& p);
std::string gradients_agree_with_the_reference(const Implementation& impl, const Problem& p);
std::string masked_keys_and_rows_get_zero_gradients(const Implementation& impl, const Problem& p);
std::string doubling_d_o_doubles_every_gradient(const Implementation& impl, const Problem& p);
std::string key_gradients_sum_to_zero(const Implementation& impl, const Problem& p);
std::string shifting_every_value_leaves_dq_and_dk_unchanged(const Implementation& impl, const Problem& p);
std::string grouped_head_gradients_equal_summed_repeated_heads(const Implementation& impl, const Problem& p);
std::string repeated_backward_runs_are_bitwise_equal(const Implementation& impl, const Problem& p);

}  // namespace attn::property_detail

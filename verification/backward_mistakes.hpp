#pragma once
// The catalogue of known backward-pass mistakes: the wrong gradients attention kernels are known
// to give (many of FlashAttention's fixed bugs are of these kinds), each with a stable name and a
// description, and backward_as_written, the gradients with one of them made. The diagnosis of a
// failed backward case (verification/verify.cpp) predicts each hypothesis's gradients with it in
// long double; the backward mutants (tests/mutants/) compute theirs with it in the working
// precision: the kill matrix and the diagnosis speak of the same mistakes under the same names.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/inputs.hpp"
#include "core/pass_rule.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "judge/judge.hpp"
#include "verification/diagnosis.hpp"

namespace attn {

enum class BackwardMistake {
  d_omitted,                 // D_i = sum_j P_ij dP_ij left out: dS = P dP
  d_from_another_row,        // D_i = <dO_i, O_i'> with the next row's O (i' = i + 1, wrapping)
  dk_not_summed_over_group,  // GQA: each query head's dK overwrites the group's instead of adding to it
  dk_scale_missing,          // dK = sum_i dS_ij q_i without the softmax scale
  dv_p_transposed,           // dV_j = sum_i P_ji dO_i: P where P^T belongs
  mask_ignored,              // the backward recomputes P = exp(s - LSE) over every key: causal, window, padding not applied
  softcap_slope_missing,     // dS not multiplied by the soft-cap's slope 1 - tanh^2(x / c)
  dropout_mask_ignored,      // the backward takes every weight as kept: Z left out of dP and dV
  dq_order_varies,           // dQ's sum over keys in an order that changes from run to run (as atomics do)
  d_sink_sign_flipped,       // dσ_h = +sum P_i,sink D_i: the sink's gradient with the wrong sign
  d_bias_not_summed,         // a broadcast bias: each batch's and head's dS overwrites dBias instead of adding to it
};

struct KnownBackwardMistake {
  BackwardMistake id;
  std::string_view name;         // stable: the JSON's diagnosis.matches[].hypothesis
  std::string_view description;  // one sentence: what the gradients match
};

// Every known backward mistake, in BackwardMistake order (the diagnosis tries them in this order).
const std::vector<KnownBackwardMistake>& known_backward_mistakes();
const KnownBackwardMistake& known_backward_mistake(BackwardMistake id);

// Whether the mistake changes anything on this problem (the diagnosis tests only those): the
// soft-cap's slope needs a cap, dropout's mask dropout, dK's group sum GQA, the mask a masked pair,
// dσ's sign sinks, dBias's sum a bias shared over more than one batch or head.
bool backward_mistake_applies(BackwardMistake mistake, const Problem& problem, const Mask& mask);

// dQ, dK and dV of the problem (reference/README.md, "The backward pass") computed in T from the
// stored inputs and dO with `mistake` made (none: the right gradients), written into `out`
// (make_gradients' shapes; each element rounded once to its dtype), and dσ and dBias where `out`
// holds them (make_gradients with the mask). P and dP of one head are
// materialised; the forward's O and LSE are its own (exact to T). run: a call counter, which only
// dq_order_varies reads (its summation order is drawn from it). T: float, double or long double.
template <class T>
void backward_as_written(std::optional<BackwardMistake> mistake, const Problem& problem, const CaseInputs& inputs, const Tensor& d_o,
                         Gradients& out, std::uint64_t run = 0);

// The diagnosis of a failed backward case: each applicable mistake's gradients predicted in long
// double on the judged inputs (with the reported keep mask), rounded to their dtypes and held to
// the tolerances the verdict gave dq, dk and dv (and d_sink, d_bias where observed holds them); a
// mistake every gradient matches is named. rerun:
// a second run's gradients, or null; when its bits differ the failure is named nondeterministic.
Diagnosis diagnose_backward(const Problem& problem, const CaseInputs& inputs, const Tensor& d_o, const Gradients& observed,
                            const Verdict& verdict, const Gradients* rerun);

}  // namespace attn

#pragma once
// The judge: one output of one case against the high-precision reference, under the pass rule.
// It computes the reference from the exact inputs given, runs the naive algorithm in the same
// precision as the rule's yardstick (first checked against the a-priori bound the reference
// derives for it, so a broken yardstick cannot hide a broken output), measures the output and
// returns the verdict. CPU-only: `attnbench verify` judges every implementation through it, and
// the installed package gives it to other projects as attnbench::judge.
#include <array>
#include <span>
#include <string>
#include <vector>

#include "core/inputs.hpp"
#include "core/metrics.hpp"
#include "core/pass_rule.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "reference/reference.hpp"
#include "reference/reference_backward.hpp"

namespace attn {

// What every output of one case is judged against: built once per case, shared by every output.
struct Yardstick {
  ReferenceResult reference;
  ErrorMetrics baseline;           // the naive algorithm's error in the same precision
  double baseline_bound_ratio = 0;  // max |naive - reference| / its a-priori bound (<= 1 is sound)
  std::string baseline_problem;     // empty when the baseline is sound, else what broke (every verdict fails)
  double reference_seconds = 0;
  Expected expected() const { return {reference.rows, reference.out, reference.lse, reference.fully_masked}; }
};

Yardstick make_yardstick(const Problem& problem, const CaseInputs& inputs, const ReferenceOptions& options = {});

// How an output is held to the rule: what its producer declares.
struct JudgeOptions {
  PassRule rule;
  FullyMaskedPolicy fully_masked = FullyMaskedPolicy::zeros;  // what a row that sees no key holds
  MatmulPrecision matmul_precision = MatmulPrecision::working;  // coarser products or accumulation (Capabilities::judged_precision)
};

// The verdict is per role (verdict.roles: o, and lse when the output comes with one), each with
// its error and tolerance; the case passes when every role does.
struct Judgement {
  ErrorMetrics metrics;
  Verdict verdict;
};

// out: [b, h_q, n_q, d_v] in the problem's dtype; lse: [b, h_q, n_q, 1] (f64 for f64 problems,
// else f32) or null when the output comes without one.
Judgement judge_output(const Problem& problem, const CaseInputs& inputs, const Yardstick& yardstick, const Tensor& out, const Tensor* lse,
                       const JudgeOptions& options = {});

// Dropout's keep mask [b, h_q, n_q, n_k] as an implementation reported it (core/score_pipeline.hpp,
// step 6), judged on its own, over the visible pairs only (a masked key's entry does not matter):
// every entry 0 or 1, and the number kept inside the binomial band of N visible pairs kept with
// probability 1 - p at a two-sided level of 1e-6 (a correct stream fails it once in a million
// cases; a kernel that keeps everything, or drops with the wrong p, fails it at once on any case
// with a few hundred pairs). The verdict's role is keep; max_abs is |kept fraction - (1 - p)|,
// tolerance the band's half-width as a fraction. usable: the mask has the problem's shape and is
// binary where visible, so that a reference can be computed with it (a rate outside the band is
// still usable: the output is judged given the mask all the same).
struct KeepJudgement {
  RoleVerdict verdict;
  bool usable = true;
};
KeepJudgement judge_keep(const Problem& problem, const Mask& mask, const Tensor& keep);
// Adds a keep mask's verdict to an output's: its role, and its failure to the case's.
void add_keep_verdict(Verdict& verdict, RoleVerdict keep);

// The inputs with the keep mask an implementation reported (Mask::with_keep), borrowing Q, K and V:
// what a dropout case's yardstick is built on, as the reference takes the reported mask.
CaseInputs with_reported_keep(const CaseInputs& inputs, const Tensor& keep);

// Both steps for one output: the reference, the yardstick and the verdict. A dropout problem needs
// its keep mask (judged too, judge_keep); throws InputError without it.
Judgement judge_case(const Problem& problem, const CaseInputs& inputs, const Tensor& out, const Tensor* lse, const JudgeOptions& options = {},
                     const ReferenceOptions& reference = {}, const Tensor* keep = nullptr);

// The backward pass (reference/README.md, "The backward pass"). What the gradients of one case
// are judged against: the backward reference and the naive backward's errors in the same precision
// (the rule's yardstick), built once per case (per reported keep mask with dropout). inputs carry
// that keep mask (with_reported_keep) when the problem has dropout.
struct BackwardYardstick {
  BackwardReference reference;
  // The naive backward's errors: dq, dk, dv, then d_sink and d_bias where the problem has sinks
  // and a bias (the yardstick asks for them whether or not the judged implementation computes them).
  std::vector<TensorErrors> baseline;
  double reference_seconds = 0;
  std::span<const double> expected(Role gradient) const;
  // The rule's term rounding of a gradient (core/pass_rule.hpp, judge_gradient): its term
  // magnitude times the working precision's unit roundoff, plus the relative error of P recomputed
  // from an LSE rounded to its dtype (the LSE's unit roundoff times max |LSE|), plus that of
  // D_i = <dO_i, O_i> from an O rounded to its dtype (o's unit roundoff: FlashAttention's D reads
  // the f16 or bf16 O it wrote).
  double term_rounding(Role gradient, const Problem& problem) const;
  const TensorErrors& baseline_of(Role gradient) const;
  bool has(Role gradient) const;  // whether the problem has the gradient (a baseline for it)
};
// What every backward pass computes and is judged on.
inline constexpr std::array<Role, 3> gradient_roles{Role::dq, Role::dk, Role::dv};
// What one computes where it declares Capabilities::parameter_gradients and the problem has sinks
// (d_sink) or a bias (d_bias): judged by the same rule when given, else named as not computed.
inline constexpr std::array<Role, 2> parameter_gradient_roles{Role::d_sink, Role::d_bias};

BackwardYardstick make_backward_yardstick(const Problem& problem, const CaseInputs& inputs, const Tensor& d_o, int threads = 0);

// The verdict has one role per gradient given (dq, dk, dv, and d_sink, d_bias where `gradients`
// holds them: Gradients::roles), each with its error and tolerance; errors holds their
// measurements in the same order. not_computed: the parameter gradients the problem has that were
// not given (the implementation does not declare them), neither judged nor a pass.
struct GradientJudgement {
  std::vector<TensorErrors> errors;
  Verdict verdict;
  std::vector<Role> not_computed;
};
GradientJudgement judge_gradients(const Problem& problem, const BackwardYardstick& yardstick, const Gradients& gradients,
                                  const JudgeOptions& options = {});

// Where two runs' gradients differ in bits: "dq b=0 h=1 i=3 c=0 (0.25 then 0.2500001), 12 elements
// of dq differ", or "" when every bit agrees (over the gradients the first holds).
std::string first_gradient_difference(const Problem& problem, const Gradients& first, const Gradients& second);

}  // namespace attn

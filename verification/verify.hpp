#pragma once
// Verification: every selected implementation on every case, against the high-precision
// reference, under the pass rule. The pass rule's yardstick is the naive algorithm in the same
// precision (cpu_naive's code), whose own error is first checked against the a-priori bound
// the reference derives for it, so a broken yardstick cannot hide a broken kernel.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/pass_rule.hpp"
#include "impls/registry.hpp"
#include "verification/diagnosis.hpp"
#include "reference/reference.hpp"

namespace attn {

enum class Status { pass, fail, skip };
std::string_view to_string(Status status);

// A case's inputs from elsewhere than its repro string (a user's own tensors, `check --inputs`,
// the Python package's judge()), and, when they were captured with it, the output to judge.
struct GivenInputs {
  CaseInputs inputs;
  std::string from;  // where they are, for reports: "the tensors in DIR"
  // Set: this is the output of every implementation run on the case (each a name for whoever
  // produced it), judged where it lies: nothing is run, allocated or copied for it.
  std::optional<Tensor> out;
  std::optional<Tensor> lse;  // with out, when the LSE was given too
  std::optional<Tensor> keep;  // with out, dropout's keep mask (a dropout case's output is judged given it)
};

struct VerifyOptions {
  PassRule rule;
  ReferenceOptions reference;
  // The index of each case in the full case list (a --shard runs part of it); empty: 0, 1, ...
  std::vector<std::size_t> case_numbers;
  // What a failing output is diagnosed with (verification/diagnosis.hpp); enabled by default.
  DiagnosisOptions diagnosis;
  // A case an implementation does not support runs as its projection onto what the
  // implementation declares (impls/capability_space.hpp); false: it is skipped.
  bool project = true;
  // Set: each case's inputs come from here (called with the problem and its case number) instead
  // of generate_inputs; nothing is projected. Failures are diagnosed on the given inputs (the
  // hypotheses keep their boolean mask and bias: Mask::with_visibility_of).
  std::function<GivenInputs(const Problem&, std::size_t case_number)> given_inputs;
};

// The reference and baseline facts of one case, shared by every implementation run on it.
// A projected case has a context of its own (its problem is the projection).
struct CaseContext {
  std::size_t index = 0;
  Problem problem;
  bool reference_computed = false;       // false: every implementation skipped the case
  std::int64_t rows_total = 0;
  std::int64_t rows_checked = 0;
  bool sampled = false;
  double reference_self_bound_ulps = 0;  // the reference's stated error, in output ulps
  std::int64_t reference_rows_float128 = 0;  // rows the reference's bounded pass left to float128
  ScoreRounding score_rounding;          // the pass rule's floor on the yardsticks (ReferenceResult::score_rounding)
  ErrorMetrics baseline;                 // the naive algorithm's error (of the output: a forward case)
  // A backward case's: the naive backward's errors and each gradient's term rounding (the pass
  // rule's floor on its yardstick, core/pass_rule.hpp's judge_gradient), in the same order: dq, dk,
  // dv, then d_sink and d_bias where the problem has sinks and a bias.
  std::vector<TensorErrors> gradient_baseline;
  std::vector<double> gradient_term_rounding;
  double baseline_bound_ratio = 0;       // max |naive - reference| / a-priori bound (<= 1 is sound)
  std::string baseline_problem;          // empty when the baseline is sound, else what broke
  double reference_seconds = 0;
  // Empty: the inputs are generate_inputs(problem), which the repro string reruns. Else where the
  // given inputs are (VerifyOptions::given_inputs): the repro string cannot regenerate them.
  std::string inputs_from;
};

struct Record {
  std::string implementation;
  const CaseContext* context = nullptr;  // owned by the VerifyRun
  Status status = Status::skip;
  std::string skip_reason;
  // The named case when what ran is its projection (context->problem); empty otherwise.
  std::string projected_from;
  std::string projection;  // what the projection changed, e.g. 'dtype f16 -> f32, h_kv 2 -> 8'
  ErrorMetrics metrics;                  // the output's (a forward case)
  std::vector<TensorErrors> gradients;   // a backward case's: dq, dk, dv (d_sink, d_bias where computed)
  // A backward case's parameter gradients the problem has but the implementation does not declare
  // (Capabilities::parameter_gradients): not asked for, not judged.
  std::vector<Role> gradients_not_computed;
  Verdict verdict;
  // A failed backward case: what its rerun on the reference's O and LSE (rounded to their dtypes)
  // says: whether the forward or the backward is at fault; "" when not rerun (a pass, or outputs
  // given rather than computed: Implementation::outputs_given).
  std::string isolation;
  double seconds = 0;  // wall time of the implementation's run (not a benchmark)
  // For a failure with an output: the known mistakes the output matches (diagnosis.ran false otherwise).
  Diagnosis diagnosis;
  std::string diagnosis_skipped;  // why a failure was not diagnosed (DiagnosisOptions::max_cases, a replay diagnosed before)
};

struct VerifyRun {
  std::vector<std::unique_ptr<CaseContext>> cases;  // one per problem run (a case and its projections)
  std::size_t named_cases = 0;                      // cases asked for
  std::vector<Record> records;
  // Per implementation, the features its declaration says it should be tested on.
  std::map<std::string, std::vector<std::string>> declared_features;
  int passed() const;
  int failed() const;
  int skipped() const;
  // Cases that ran (passed or failed) for one implementation.
  int ran(const std::string& implementation) const;
};

// What one implementation's run covered: cases that ran, and the features of the problems that
// ran against those it declares.
struct Coverage {
  int ran = 0, projected = 0, skipped = 0;
  std::map<std::string, int> exercised;  // feature -> cases
  std::vector<std::string> missing;      // declared, never exercised
};
Coverage coverage_of(const VerifyRun& run, const std::string& implementation);

// The memory verifying one case holds at its peak, in bytes, by part: the inputs (Q, K, V, mask,
// bias), the reference (inputs widened to double, its per-row results, each thread's row buffers),
// the yardstick (the naive algorithm's outputs and its n_q x n_k score workspace) and an
// implementation's outputs (twice: a failure is rerun; with dropout, its keep masks too). In double: a size typed by mistake (n_q =
// 10^9) must give a figure, not overflow.
struct CaseMemory {
  double inputs = 0, reference = 0, yardstick = 0, outputs = 0, workspace = 0;
  double total() const { return inputs + reference + yardstick + outputs + workspace; }
};
CaseMemory case_memory(const Problem& p, const ReferenceOptions& reference, const std::vector<const Implementation*>& implementations = {});

// Throws InputError, naming the case and what it needs, for a case that cannot fit in the memory
// available here (core/memory.hpp): refused before anything is allocated.
void check_case_memory(const Problem& p, const ReferenceOptions& reference, const std::vector<const Implementation*>& implementations = {});

// Runs implementations × cases in case order. on_record is called as each record is made,
// so a caller can print and save progressively. Every case's memory is checked first
// (check_case_memory), so an impossible case is refused before any case runs.
VerifyRun verify(const std::vector<const Implementation*>& implementations, const std::vector<Problem>& cases,
                 const VerifyOptions& options, const std::function<void(const VerifyRun&, const Record&)>& on_record = {});

// What verify() checks first: each case valid (Problem::validate) and within memory (check_case_memory).
void check_cases(const std::vector<Problem>& cases, const ReferenceOptions& reference, const std::vector<const Implementation*>& implementations = {});

namespace detail {
// verify() without its checks, for run_verify (verification/run.hpp), which checks the cases
// before telling its observers the run started.
VerifyRun verify_checked(const std::vector<const Implementation*>& implementations, const std::vector<Problem>& cases,
                         const VerifyOptions& options, const std::function<void(const VerifyRun&, const Record&)>& on_record);
}  // namespace detail

}  // namespace attn

#pragma once
// Diagnosis of a failed case: which known mistake the observed output matches. Each hypothesis
// ("the scores were divided by d_k", "the causal mask was ignored", ...) is turned into the output
// it predicts, recomputed on the case's own inputs, and the observed output is judged against that
// prediction with the case's pass rule and yardstick. A hypothesis that passes is named, as a
// sentence a kernel author can act on. properties/README.md lists the hypotheses, how each is
// recomputed and what bounds the cost.
#include <cstdint>
#include <string>
#include <vector>

#include "core/inputs.hpp"
#include "core/metrics.hpp"
#include "core/pass_rule.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"

namespace attn {

struct DiagnosisOptions {
  bool enabled = true;
  // Multiply-adds in 113-bit arithmetic one hypothesis may spend in the reference; beyond it the
  // diagnosis checks a seeded sample of rows (always with the rows where the failure shows).
  double max_work = 1.0e6;
  std::int64_t min_rows = 16;
  int threads = 0;  // 0: every core
  // Failing cases diagnosed per implementation in one verify run (0: every one). A kernel that
  // fails a hundred cases has one or two mistakes, which the first failures name; the rest would
  // cost seconds each and say it again.
  int max_cases = 8;
};

// How verify judged the case: the same rule and yardstick judge every hypothesis.
struct DiagnosisJudging {
  PassRule rule;
  ErrorMetrics baseline;        // the naive algorithm's error on the case
  ScoreRounding score_rounding;
  double precision_scale = 1.0;
  FullyMaskedPolicy policy = FullyMaskedPolicy::zeros;  // the implementation's declared policy
  ErrorMetrics observed;        // the failing output's metrics (where its worst element is)
  bool lse_agrees = false;      // the implementation returned an LSE and it passed
  // A second run's output on the same inputs, or null. When its bits differ from the first run's
  // the failure is named nondeterministic, and a hypothesis is named only if both runs match it.
  const Tensor* rerun = nullptr;
  // The LSE the implementation returned, or null, and the tolerance its verdict held it to: when
  // the output is right and the LSE is not, the LSE's own mistakes are tested (lse_base2).
  const Tensor* lse = nullptr;
  double lse_tolerance = 0;
};

struct DiagnosisMatch {
  std::string hypothesis;   // a stable name: scale_one, scale_one_over_dk, causal_ignored, ...
  std::string explanation;  // "the output matches scale = 1/d_k: divided by d_k instead of sqrt(d_k)"
  double max_abs = 0;       // the observed output's error against the hypothesis's prediction
  double tolerance = 0;     // what the pass rule allows there
};

struct Diagnosis {
  bool ran = false;                     // false: no output to diagnose, or diagnosis turned off
  std::vector<DiagnosisMatch> matches;  // every hypothesis that passed, best (smallest error / tolerance) first
  std::vector<std::string> tested;      // the hypotheses that applied to the problem, in the order tried
  std::int64_t rows = 0;                // output rows compared per hypothesis
  std::string note;                     // with no match: what the evidence still says, or ""
  // "nondeterministic: two runs on the same inputs differ at b=0 h=1 i=3 c=0 (...)", or "".
  std::string nondeterminism;
  // What the fully masked rows that break the declared policy hold ("2 hold NaN, 1 holds the mean
  // of V over all keys, instead of zeros"), or "".
  std::string fully_masked_rows;
  // The nondeterminism, else the best match's explanation, else "no known mistake matches" (with
  // the note); then "; fully masked rows: ..." when they break the policy. "" when !ran.
  std::string summary() const;
};

// Tests every applicable hypothesis against `out` (the failing output of one run on `inputs`).
Diagnosis diagnose(const Problem& problem, const CaseInputs& inputs, const Tensor& out, const DiagnosisJudging& judging,
                   const DiagnosisOptions& options = {});

}  // namespace attn

#include "judge/judge.hpp"

#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "impls/cpu_naive/cpu_naive.hpp"

namespace attn {
namespace {

// The naive output against the reference's a-priori bound for it.
void check_baseline(Yardstick& y, const Problem& p, const Tensor& naive_out) {
  const ReferenceResult& ref = y.reference;
  const auto d_v = static_cast<std::size_t>(p.d_v);
  double worst = 0;
  std::int64_t worst_index = -1;
  for (std::size_t r = 0; r < ref.rows.size(); ++r) {
    if (ref.fully_masked[r]) continue;
    for (std::size_t c = 0; c < d_v; ++c) {
      const std::int64_t e = ref.rows[r] * p.d_v + std::int64_t(c);
      const double err = std::fabs(naive_out.get(e) - ref.out[r * d_v + c]);
      const double bound = ref.naive_bound[r * d_v + c];
      const double ratio = err == 0 ? 0 : (bound > 0 ? err / bound : std::numeric_limits<double>::infinity());
      if (!(ratio <= worst)) worst = ratio, worst_index = e;
    }
  }
  y.baseline_bound_ratio = worst;
  if (!(worst <= 1.0))
    y.baseline_problem = fmt::format("the naive baseline's error exceeds its a-priori bound by {:.3g}x at {}: the oracle is unsound", worst,
                                     output_coordinates(p, worst_index));
}

}  // namespace

Yardstick make_yardstick(const Problem& p, const CaseInputs& in, const ReferenceOptions& options) {
  // The reference and the naive yardstick compute the forward pass: judged against them, another
  // operation would pass or fail on numbers it never had to match. verify skips such a case before.
  if (p.operation != Operation::forward)
    throw InputError(fmt::format("{}: the reference computes the forward pass only, so nothing can judge this problem yet",
                                 to_string(p.operation)));
  Yardstick y;
  const auto start = std::chrono::steady_clock::now();
  y.reference = compute_reference(p, in, options);
  y.reference_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Tensor naive_out = make_output(p), naive_lse = make_lse(p);
  std::vector<std::byte> workspace(naive_workspace_bytes(p));
  naive_attention(RunArgs{p, in, RoleTensors::forward(in, naive_out, &naive_lse), workspace});
  y.baseline = measure(p, in.mask, y.expected(), naive_out, &naive_lse, FullyMaskedPolicy::zeros);
  check_baseline(y, p, naive_out);
  return y;
}

Judgement judge_output(const Problem& p, const CaseInputs& in, const Yardstick& y, const Tensor& out, const Tensor* lse,
                       const JudgeOptions& options) {
  Judgement j;
  j.metrics = measure(p, in.mask, y.expected(), out, lse, options.fully_masked);
  worst_at_first_nonfinite(j.metrics, p, in.mask, out);
  j.verdict = judge(options.rule, p.numerics(), j.metrics, y.baseline, y.reference.score_rounding,
                    precision_scale(working_dtype(p.numerics()), options.matmul_precision));
  if (!y.baseline_problem.empty()) {  // the yardstick of every role
    j.verdict.pass = false;
    j.verdict.reasons.push_back(y.baseline_problem);
    for (RoleVerdict& role : j.verdict.roles) {
      role.pass = false;
      role.reasons.push_back(y.baseline_problem);
    }
  }
  return j;
}

Judgement judge_case(const Problem& p, const CaseInputs& in, const Tensor& out, const Tensor* lse, const JudgeOptions& options,
                     const ReferenceOptions& reference) {
  p.validate();
  return judge_output(p, in, make_yardstick(p, in, reference), out, lse, options);
}

}  // namespace attn

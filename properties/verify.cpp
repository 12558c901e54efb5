#include "properties/verify.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>

#include <fmt/format.h>

#include "impls/cpu_naive/cpu_naive.hpp"

namespace attn {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Expected expected_of(const ReferenceResult& ref) {
  return {ref.rows, ref.out, ref.lse, ref.fully_masked};
}

struct Output {
  Tensor out, lse;
};

// Runs an implementation on fresh poisoned outputs; exceptions propagate.
Output run_once(const Implementation& impl, const Problem& p, const CaseInputs& in, bool want_lse) {
  Output o{make_output(p), make_lse(p)};
  std::vector<std::byte> workspace(impl.workspace_bytes(p));
  impl.run(RunArgs{p, in, o.out, want_lse ? &o.lse : nullptr, nullptr, workspace});
  return o;
}

// Checks the naive baseline against the reference's a-priori bound for it.
void check_baseline(CaseContext& ctx, const ReferenceResult& ref, const Tensor& naive_out) {
  const Problem& p = ctx.problem;
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
  ctx.baseline_bound_ratio = worst;
  if (!(worst <= 1.0))
    ctx.baseline_problem = fmt::format("the naive baseline's error exceeds its a-priori bound by {:.3g}x at {}: the oracle is unsound",
                                       worst, output_coordinates(p, worst_index));
}

}  // namespace

std::string_view to_string(Status status) {
  switch (status) {
    case Status::pass: return "pass";
    case Status::fail: return "fail";
    case Status::skip: return "skip";
  }
  return "?";
}

int VerifyRun::passed() const { return int(std::count_if(records.begin(), records.end(), [](auto& r) { return r.status == Status::pass; })); }
int VerifyRun::failed() const { return int(std::count_if(records.begin(), records.end(), [](auto& r) { return r.status == Status::fail; })); }
int VerifyRun::skipped() const { return int(std::count_if(records.begin(), records.end(), [](auto& r) { return r.status == Status::skip; })); }

VerifyRun verify(const std::vector<const Implementation*>& implementations, const std::vector<Problem>& cases,
                 const VerifyOptions& options, const std::function<void(const VerifyRun&, const Record&)>& on_record) {
  VerifyRun run;
  for (std::size_t index = 0; index < cases.size(); ++index) {
    const Problem& p = cases[index];
    p.validate();
    auto ctx = std::make_unique<CaseContext>();
    ctx->index = options.case_numbers.empty() ? index : options.case_numbers.at(index);
    ctx->problem = p;
    ctx->rows_total = p.rows();

    const CaseInputs in = generate_inputs(p);
    const auto ref_start = std::chrono::steady_clock::now();
    const ReferenceResult ref = compute_reference(p, in, options.reference);
    ctx->reference_seconds = seconds_since(ref_start);
    ctx->rows_checked = std::int64_t(ref.rows.size());
    ctx->sampled = ref.sampled;
    ctx->reference_self_bound_ulps = ref.self_bound_max_ulps;
    ctx->reference_rows_float128 = ref.rows_fallback;
    ctx->score_rounding = ref.score_rounding;
    const Expected expected = expected_of(ref);

    // The yardstick: the naive algorithm in the same precision.
    Output naive{make_output(p), make_lse(p)};
    std::vector<std::byte> naive_workspace(naive_workspace_bytes(p));
    naive_attention(RunArgs{p, in, naive.out, &naive.lse, nullptr, naive_workspace});
    ctx->baseline = measure(p, in.mask, expected, naive.out, &naive.lse, FullyMaskedPolicy::zeros);
    check_baseline(*ctx, ref, naive.out);
    run.cases.push_back(std::move(ctx));
    const CaseContext& context = *run.cases.back();

    for (const Implementation* impl : implementations) {
      Record record;
      record.implementation = impl->name();
      record.context = &context;
      const Capabilities caps = impl->describe();
      const Support support = std::find(caps.dtypes.begin(), caps.dtypes.end(), p.dtype) == caps.dtypes.end()
                                  ? Support::no(fmt::format("dtype {} not supported", to_string(p.dtype)))
                                  : impl->supports(p);
      if (!support.ok) {
        record.status = Status::skip;
        record.skip_reason = support.reason;
      } else {
        const auto start = std::chrono::steady_clock::now();
        try {
          Output o = run_once(*impl, p, in, caps.returns_lse);
          record.seconds = seconds_since(start);
          record.metrics = measure(p, in.mask, expected, o.out, caps.returns_lse ? &o.lse : nullptr, caps.fully_masked);
          const double scale = precision_scale(p.dtype, caps.matmul_unit_roundoff);
          record.verdict = judge(options.rule, p.dtype, record.metrics, context.baseline, context.score_rounding, scale);
          if (!record.verdict.pass && options.diagnosis.enabled) {
            const bool lse_agrees = caps.returns_lse && std::none_of(record.verdict.reasons.begin(), record.verdict.reasons.end(),
                                                                     [](const std::string& r) { return r.find("LSE") != std::string::npos; });
            record.diagnosis = diagnose(p, in, o.out,
                                        DiagnosisJudging{options.rule, context.baseline, context.score_rounding, scale,
                                                         caps.fully_masked, record.metrics, lse_agrees},
                                        options.diagnosis);
          }
        } catch (const std::exception& e) {
          record.seconds = seconds_since(start);
          record.verdict.pass = false;
          record.verdict.reasons.push_back(fmt::format("run failed: {}", e.what()));
        }
        if (!context.baseline_problem.empty()) {
          record.verdict.pass = false;
          record.verdict.reasons.push_back(context.baseline_problem);
        }
        record.status = record.verdict.pass ? Status::pass : Status::fail;
      }
      run.records.push_back(std::move(record));
      if (on_record) on_record(run, run.records.back());
    }
  }
  return run;
}

}  // namespace attn

#include "properties/verify.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/parallel.hpp"
#include "impls/capability_space.hpp"
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

int VerifyRun::ran(const std::string& implementation) const {
  return int(std::count_if(records.begin(), records.end(),
                           [&](auto& r) { return r.implementation == implementation && r.status != Status::skip; }));
}

Coverage coverage_of(const VerifyRun& run, const std::string& implementation) {
  Coverage c;
  for (const Record& r : run.records) {
    if (r.implementation != implementation) continue;
    if (r.status == Status::skip) {
      ++c.skipped;
      continue;
    }
    ++c.ran;
    if (!r.projected_from.empty()) ++c.projected;
    for (const std::string& f : features_of(r.context->problem)) ++c.exercised[f];
  }
  if (auto declared = run.declared_features.find(implementation); declared != run.declared_features.end())
    for (const std::string& f : declared->second)
      if (!c.exercised.count(f)) c.missing.push_back(f);
  return c;
}

namespace {

// What an implementation runs for a case. An implementation that declares several layouts gets
// them in turn, case by case (every layout within any set of three or more cases); a case that
// names a layout keeps it. Then the problem is resolved against what it declares and supports.
Resolution plan_for(const Implementation& impl, const Capabilities& caps, const Problem& p, std::size_t case_number, bool project) {
  Problem wanted = p;
  if (p.layout == Layout::bhsd && caps.layouts.size() > 1) wanted.layout = caps.layouts[case_number % caps.layouts.size()];
  if (!project) {
    Resolution r;
    const Support s = covers(caps, wanted).ok ? impl.supports(wanted) : covers(caps, wanted);
    if (s.ok)
      r.problem = wanted;
    else
      r.skip_reason = s.reason;
    return r;
  }
  Resolution r = resolve(impl, wanted);
  if (r.problem && !(*r.problem == p) && !r.projected) {
    r.projected = true;
    r.changes = fmt::format("layout bhsd -> {}", to_string(r.problem->layout));
  } else if (r.projected && wanted.layout != p.layout) {
    r.changes = fmt::format("layout bhsd -> {}, {}", to_string(wanted.layout), r.changes);
  }
  return r;
}

// A problem ready to run implementations on: its inputs and reference live while the case does.
struct Prepared {
  const CaseContext* context = nullptr;
  std::optional<CaseInputs> inputs_storage;  // a Mask needs its problem to exist
  ReferenceResult reference;
  const CaseInputs& inputs() const { return *inputs_storage; }
  Expected expected() const { return expected_of(reference); }
};

// The reference, the yardstick and their facts for one problem.
std::unique_ptr<CaseContext> prepare_case(const Problem& p, std::size_t number, const VerifyOptions& options, Prepared& prepared) {
  const CaseInputs& in = prepared.inputs_storage.emplace(generate_inputs(p));
  auto ctx = std::make_unique<CaseContext>();
  ctx->index = number;
  ctx->problem = p;
  ctx->rows_total = p.rows();
  ctx->reference_computed = true;
  const auto ref_start = std::chrono::steady_clock::now();
  prepared.reference = compute_reference(p, in, options.reference);
  const ReferenceResult& ref = prepared.reference;
  ctx->reference_seconds = seconds_since(ref_start);
  ctx->rows_checked = std::int64_t(ref.rows.size());
  ctx->sampled = ref.sampled;
  ctx->reference_self_bound_ulps = ref.self_bound_max_ulps;
  ctx->reference_rows_float128 = ref.rows_fallback;
  ctx->score_rounding = ref.score_rounding;
  // The yardstick: the naive algorithm in the same precision.
  Output naive{make_output(p), make_lse(p)};
  std::vector<std::byte> naive_workspace(naive_workspace_bytes(p));
  naive_attention(RunArgs{p, in, naive.out, &naive.lse, nullptr, naive_workspace});
  ctx->baseline = measure(p, in.mask, prepared.expected(), naive.out, &naive.lse, FullyMaskedPolicy::zeros);
  check_baseline(*ctx, ref, naive.out);
  return ctx;
}

void run_record(Record& record, const Implementation& impl, const Capabilities& caps, const Prepared& prepared, const VerifyOptions& options,
                int& diagnosed) {
  const CaseContext& context = *prepared.context;
  const CaseInputs& in = prepared.inputs();
  const Problem& p = context.problem;
  const auto start = std::chrono::steady_clock::now();
  try {
    Output o = run_once(impl, p, in, caps.returns_lse);
    record.seconds = seconds_since(start);
    record.metrics = measure(p, in.mask, prepared.expected(), o.out, caps.returns_lse ? &o.lse : nullptr, caps.fully_masked);
    const double scale = precision_scale(p.dtype, caps.matmul_unit_roundoff);
    record.verdict = judge(options.rule, p.dtype, record.metrics, context.baseline, context.score_rounding, scale);
    const bool diagnose_this = options.diagnosis.max_cases <= 0 || diagnosed < options.diagnosis.max_cases;
    if (!record.verdict.pass && options.diagnosis.enabled && !diagnose_this)
      record.diagnosis_skipped = fmt::format("not diagnosed: {} failures of {} were already; rerunning this case alone diagnoses it",
                                             options.diagnosis.max_cases, impl.name());
    if (!record.verdict.pass && options.diagnosis.enabled && diagnose_this) {
      ++diagnosed;
      const bool lse_agrees = caps.returns_lse && std::none_of(record.verdict.reasons.begin(), record.verdict.reasons.end(),
                                                               [](const std::string& r) { return r.find("LSE") != std::string::npos; });
      // A second run on the same inputs: if its bits differ, the failure is nondeterminism.
      std::optional<Output> rerun;
      try {
        rerun = run_once(impl, p, in, caps.returns_lse);
      } catch (const std::exception&) {  // the first run's failure is what is diagnosed
      }
      record.diagnosis = diagnose(p, in, o.out,
                                  DiagnosisJudging{options.rule, context.baseline, context.score_rounding, scale, caps.fully_masked,
                                                   record.metrics, lse_agrees, rerun ? &rerun->out : nullptr},
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

}  // namespace

CaseMemory case_memory(const Problem& p, const ReferenceOptions& reference, const std::vector<const Implementation*>& implementations) {
  const double b = double(p.batch), hq = double(p.h_q), hkv = double(p.h_kv), nq = double(p.n_q), nk = double(p.n_k);
  const double dk = double(p.d_k), dv = double(p.d_v), e = bytes_per_element(p.dtype);
  const double q = b * hq * nq * dk, k = b * hkv * nk * dk, v = b * hkv * nk * dv, o = b * hq * nq * dv, rows = b * hq * nq;
  auto mask_elements = [&](Broadcast bc) {
    const bool per_batch = bc == Broadcast::per_batch || bc == Broadcast::per_batch_head;
    const bool per_head = bc == Broadcast::per_head || bc == Broadcast::per_batch_head;
    return (per_batch ? b : 1.0) * (per_head ? hq : 1.0) * nq * nk;
  };
  CaseMemory m;
  m.inputs = e * (q + k + v) + 8.0 * double(p.padding.valid_len.size());
  if (p.bool_mask.enabled) m.inputs += mask_elements(p.bool_mask.broadcast);
  if (p.bias.enabled) m.inputs += e * mask_elements(p.bias.broadcast);
  // Rows the reference computes: all, or about max_work's worth when sampling is asked for.
  const double work_per_row = nk * (dk + dv);
  double ref_rows = rows;
  if (rows * work_per_row > 2.0 * reference.max_work)
    ref_rows = std::min(rows, std::max(double(reference.min_sampled_rows), reference.max_work / work_per_row));
  const double threads = reference.threads > 0 ? reference.threads : default_thread_count();
  // Per row kept: out and naive_bound (d_v doubles each), lse, the flags, its index and summary.
  // Per thread: a few n_k-long vectors of doubles and key indices while a row is computed.
  m.reference = 8.0 * (q + k + v) + ref_rows * (16.0 * dv + 8.0 + 2.0 + 8.0 + sizeof(double) * 8.0) + threads * 64.0 * (nk + dv);
  if (reference.weights) m.reference += ref_rows * nk * 8.0;
  const double acc = p.dtype == DType::f64 ? 8.0 : 4.0;
  m.yardstick = e * o + acc * rows + acc * (nq * nk + nq * dk + nk * (dk + dv) + dv);
  m.outputs = 2.0 * (e * o + acc * rows);
  // Asked only once the rest fits: the implementations' size_t arithmetic is meant for sizes that can run.
  if (m.total() < double(std::numeric_limits<std::int64_t>::max()))
    for (const Implementation* impl : implementations) m.workspace = std::max(m.workspace, double(impl->workspace_bytes(p)));
  return m;
}

void check_case_memory(const Problem& p, const ReferenceOptions& reference, const std::vector<const Implementation*>& implementations) {
  const auto available = available_memory_bytes();
  if (!available) return;
  const CaseMemory m = case_memory(p, reference, {});
  // The figures are refused before an implementation is asked for its workspace (see case_memory).
  const CaseMemory with_workspace = m.total() <= *available ? case_memory(p, reference, implementations) : m;
  if (with_workspace.total() <= *available) return;
  throw InputError(fmt::format("case '{}' needs about {} of memory (inputs {}, reference {}, naive yardstick {}, outputs {}{}); {} is "
                               "available here",
                               p.repro(), format_bytes(with_workspace.total()), format_bytes(m.inputs), format_bytes(m.reference),
                               format_bytes(m.yardstick), format_bytes(m.outputs),
                               with_workspace.workspace > 0 ? ", implementation workspace " + format_bytes(with_workspace.workspace) : "",
                               format_bytes(*available)));
}

VerifyRun verify(const std::vector<const Implementation*>& implementations, const std::vector<Problem>& cases,
                 const VerifyOptions& options, const std::function<void(const VerifyRun&, const Record&)>& on_record) {
  for (const Problem& p : cases) {
    p.validate();
    check_case_memory(p, options.reference, implementations);
  }
  VerifyRun run;
  run.named_cases = cases.size();
  std::vector<Capabilities> caps;
  std::vector<int> diagnosed(implementations.size(), 0);  // failing cases diagnosed, per implementation
  for (const Implementation* impl : implementations) {
    caps.push_back(impl->describe());
    run.declared_features[impl->name()] = declared_features(caps.back());
  }
  for (std::size_t index = 0; index < cases.size(); ++index) {
    const Problem& p = cases[index];
    p.validate();
    const std::size_t number = options.case_numbers.empty() ? index : options.case_numbers.at(index);
    // What each implementation runs, decided before any input or reference is built: a case no
    // implementation supports costs a few calls to supports().
    std::vector<Resolution> plans;
    for (std::size_t n = 0; n < implementations.size(); ++n) plans.push_back(plan_for(*implementations[n], caps[n], p, number, options.project));
    // One context per distinct problem, built when the first implementation needs it.
    std::vector<std::unique_ptr<Prepared>> prepared;
    const CaseContext* skipped_context = nullptr;
    for (std::size_t n = 0; n < implementations.size(); ++n) {
      const Resolution& plan = plans[n];
      Record record;
      record.implementation = implementations[n]->name();
      if (!plan.problem) {
        if (!skipped_context) {
          auto ctx = std::make_unique<CaseContext>();
          ctx->index = number;
          ctx->problem = p;
          ctx->rows_total = p.rows();
          run.cases.push_back(std::move(ctx));
          skipped_context = run.cases.back().get();
        }
        record.context = skipped_context;
        record.status = Status::skip;
        record.skip_reason = plan.skip_reason;
      } else {
        auto found = std::find_if(prepared.begin(), prepared.end(), [&](auto& c) { return c->context->problem == *plan.problem; });
        if (found == prepared.end()) {
          auto ready = std::make_unique<Prepared>();
          run.cases.push_back(prepare_case(*plan.problem, number, options, *ready));
          ready->context = run.cases.back().get();
          prepared.push_back(std::move(ready));
          found = prepared.end() - 1;
        }
        record.context = (*found)->context;
        if (plan.projected) {
          record.projected_from = p.repro();
          record.projection = plan.changes;
        }
        run_record(record, *implementations[n], caps[n], **found, options, diagnosed[n]);
      }
      run.records.push_back(std::move(record));
      if (on_record) on_record(run, run.records.back());
    }
  }
  return run;
}

}  // namespace attn

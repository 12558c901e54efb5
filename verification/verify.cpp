#include "verification/verify.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/parallel.hpp"
#include "core/precision.hpp"
#include "impls/capability_space.hpp"
#include "judge/judge.hpp"
#include "verification/backward_mistakes.hpp"

namespace attn {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Output {
  Tensor out, lse;
  Tensor keep;  // dropout's keep mask; empty without dropout
};

// Runs an implementation on fresh poisoned outputs; exceptions propagate. A dropout problem's
// keep mask is always asked for: its output cannot be judged without it.
Output run_once(const Implementation& impl, const Problem& p, const CaseInputs& in, bool want_lse) {
  Output o{make_output(p), make_lse(p), p.dropout.enabled() ? make_keep(p) : Tensor{}};
  std::vector<std::byte> workspace(impl.workspace_bytes(p));
  impl.run(RunArgs{p, in, RoleTensors::forward(in, o.out, want_lse ? &o.lse : nullptr, nullptr, p.dropout.enabled() ? &o.keep : nullptr),
                   workspace});
  return o;
}

// A backward problem's pass on fresh poisoned gradients, fed o and lse (null: not given); d_sink
// and d_bias asked for where it declares them and the problem has them.
Gradients run_backward(const Implementation& impl, const Capabilities& caps, const Problem& p, const CaseInputs& in, const Tensor& d_o,
                       const Tensor& o, const Tensor* lse) {
  Gradients g = caps.parameter_gradients ? make_gradients(p, in.mask) : make_gradients(p);
  std::vector<std::byte> workspace(impl.workspace_bytes(p));
  impl.run(RunArgs{p, in, RoleTensors::backward(in, d_o, g, &o, lse), workspace});
  return g;
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
  // A backward pass is fed its own forward's O and LSE (end to end): it needs a forward too.
  if (p.operation == Operation::backward && std::find(caps.operations.begin(), caps.operations.end(), Operation::forward) == caps.operations.end()) {
    Resolution r;
    r.skip_reason = "its backward pass is fed its own forward's O and LSE, and it declares no forward pass";
    return r;
  }
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

// A yardstick of a dropout case: the reference takes the keep mask an implementation reported,
// so there is one per distinct mask (implementations that draw the same stream share one).
struct DropoutYardstick {
  Tensor keep;
  std::optional<CaseInputs> inputs;  // the case's, with that keep mask
  Yardstick yardstick;               // a forward case's
  BackwardYardstick backward;        // a backward case's
};

// A problem ready to run implementations on: its inputs and yardstick live while the case does.
struct Prepared {
  CaseContext* context = nullptr;
  std::optional<CaseInputs> inputs_storage;  // a Mask needs its problem to exist
  std::optional<Tensor> given_out, given_lse, given_keep;  // GivenInputs::out, lse and keep
  Yardstick yardstick;  // without dropout
  BackwardYardstick backward_yardstick;  // a backward case's, without dropout
  std::optional<Tensor> d_o;             // a backward case's upstream gradient
  std::vector<std::unique_ptr<DropoutYardstick>> dropout_yardsticks;
  // The implementations that had a failure on it diagnosed: a replayed case (the same problem
  // again) is diagnosed at its first failure only, as the diagnosis would say the same again.
  std::set<std::string> diagnosed_by;
  const CaseInputs& inputs() const { return *inputs_storage; }
};

// What a case's context says of its reference and yardstick.
void set_reference_facts(CaseContext& ctx, const Yardstick& y) {
  ctx.reference_seconds = y.reference_seconds;
  ctx.rows_checked = std::int64_t(y.reference.rows.size());
  ctx.sampled = y.reference.sampled;
  ctx.reference_self_bound_ulps = y.reference.self_bound_max_ulps;
  ctx.reference_rows_float128 = y.reference.rows_fallback;
  ctx.score_rounding = y.reference.score_rounding;
  ctx.baseline = y.baseline;
  ctx.baseline_bound_ratio = y.baseline_bound_ratio;
  ctx.baseline_problem = y.baseline_problem;
}

void set_reference_facts(CaseContext& ctx, const BackwardYardstick& y) {
  ctx.reference_seconds = y.reference_seconds;
  ctx.rows_checked = ctx.rows_total;  // every gradient element: nothing is sampled
  ctx.gradient_baseline = y.baseline;
  ctx.gradient_term_rounding.clear();
  for (const TensorErrors& e : y.baseline) ctx.gradient_term_rounding.push_back(y.term_rounding(e.role, ctx.problem));
}

// The reference, the yardstick and their facts for one problem (judge/judge.hpp), on the
// generated inputs or the ones the options give.
std::unique_ptr<CaseContext> prepare_case(const Problem& p, std::size_t number, const VerifyOptions& options, Prepared& prepared) {
  auto ctx = std::make_unique<CaseContext>();
  if (options.given_inputs && p.operation == Operation::backward)
    throw InputError(fmt::format("case '{}': given inputs and outputs are judged as a forward pass only (no dO or gradients are read)", p.repro()));
  if (options.given_inputs) {
    GivenInputs given = options.given_inputs(p, number);
    prepared.inputs_storage.emplace(std::move(given.inputs));
    prepared.given_out = std::move(given.out);
    prepared.given_lse = std::move(given.lse);
    prepared.given_keep = std::move(given.keep);
    ctx->inputs_from = std::move(given.from);
  } else {
    prepared.inputs_storage.emplace(generate_inputs(p));
    // A scale that makes these scores overflow the working precision is the case's fault, not the oracle's.
    check_scores_in_range(p, prepared.inputs(), [](const char* role) { return std::string(role); }, fmt::format("case '{}'", p.repro()));
  }
  ctx->index = number;
  ctx->problem = p;
  ctx->rows_total = p.rows();
  ctx->reference_computed = true;
  if (p.operation == Operation::backward) prepared.d_o = generate_d_o(p);
  // Dropout's reference waits for the keep mask of the first implementation run (dropout_yardstick).
  if (p.dropout.enabled()) return ctx;
  if (p.operation == Operation::backward) {
    prepared.backward_yardstick = make_backward_yardstick(p, prepared.inputs(), *prepared.d_o, options.reference.threads);
    set_reference_facts(*ctx, prepared.backward_yardstick);
    return ctx;
  }
  prepared.yardstick = make_yardstick(p, prepared.inputs(), options.reference);
  set_reference_facts(*ctx, prepared.yardstick);
  return ctx;
}

// The yardstick of a dropout case for the keep mask an implementation reported: the one already
// built for the same mask, or a new one. The case's facts are the first one's.
const DropoutYardstick& dropout_yardstick(Prepared& prepared, const Tensor& keep, const VerifyOptions& options) {
  for (const auto& known : prepared.dropout_yardsticks)
    if (known->keep == keep) return *known;
  auto made = std::make_unique<DropoutYardstick>();
  made->keep = keep;
  made->inputs.emplace(with_reported_keep(prepared.inputs(), made->keep));
  const Problem& p = prepared.context->problem;
  if (p.operation == Operation::backward) {
    made->backward = make_backward_yardstick(p, *made->inputs, *prepared.d_o, options.reference.threads);
    if (prepared.dropout_yardsticks.empty()) set_reference_facts(*prepared.context, made->backward);
  } else {
    made->yardstick = make_yardstick(p, *made->inputs, options.reference);
    if (prepared.dropout_yardsticks.empty()) set_reference_facts(*prepared.context, made->yardstick);
  }
  prepared.dropout_yardsticks.push_back(std::move(made));
  return *prepared.dropout_yardsticks.back();
}

// A dropout case's keep mask as an implementation reported it, judged by itself, and the
// yardstick built on it when a reference can be computed with it (null without dropout, or when
// the mask is not one: then the case fails on the mask alone).
struct ReportedKeep {
  std::optional<KeepJudgement> keep;
  const DropoutYardstick* yardstick = nullptr;
  bool unusable() const { return keep && !keep->usable; }
};

ReportedKeep judge_reported_keep(Prepared& prepared, const Tensor& keep, const VerifyOptions& options) {
  ReportedKeep reported;
  const Problem& p = prepared.context->problem;
  if (!p.dropout.enabled()) return reported;
  reported.keep = judge_keep(p, prepared.inputs().mask, keep);
  if (reported.keep->usable) reported.yardstick = &dropout_yardstick(prepared, keep, options);
  return reported;
}

// A run that fails on a GQA or MQA case: the same case with one kv head per query head (MHA, fresh
// inputs), run and judged. When that passes, the failure is in the kernel's head mapping, and the
// record says so with the mapping it was asked for; "" otherwise (or where MHA is not accepted).
std::string gqa_blame(const Implementation& impl, const Capabilities& caps, const Problem& p, const VerifyOptions& options) {
  if (p.h_kv >= p.h_q) return "";
  Problem mha = p;
  mha.h_kv = mha.h_q;
  if (!covers(caps, mha).ok || !impl.supports(mha).ok) return "";
  try {
    const CaseInputs in = generate_inputs(mha);
    const Output o = run_once(impl, mha, in, caps.returns_lse);
    const Judgement judged =
        judge_case(mha, in, o.out, caps.returns_lse ? &o.lse : nullptr, JudgeOptions{options.rule, caps.fully_masked, caps.judged_precision()},
                   ReferenceOptions{}, mha.dropout.enabled() ? &o.keep : nullptr);
    if (!judged.verdict.pass) return "";
  } catch (const std::exception&) {
    return "";  // it fails without GQA too: nothing to say about the head mapping
  }
  return fmt::format("the same case with h_kv = h_q = {} (MHA) runs and passes: the failure is in its GQA head mapping (query head h "
                     "reads kv head h / {}, {} query heads per kv head)",
                     p.h_q, p.h_q / p.h_kv, p.h_q / p.h_kv);
}

// The reference's forward outputs rounded to their dtypes: what a failing backward is rerun on, to
// tell a fault of its forward's O or LSE from one of the backward itself.
Output reference_forward(const Problem& forward, const CaseInputs& in) {
  const ReferenceResult ref = compute_reference(forward, in, ReferenceOptions{});
  Output o{make_output(forward), make_lse(forward), Tensor{}};
  for (std::size_t r = 0; r < ref.rows.size(); ++r) {
    for (std::int64_t c = 0; c < forward.d_v; ++c)
      o.out.set(ref.rows[r] * forward.d_v + c, ref.fully_masked[r] ? 0.0 : ref.out[r * std::size_t(forward.d_v) + std::size_t(c)]);
    o.lse.set(ref.rows[r], ref.lse[r]);
  }
  return o;
}

// A backward case, end to end: the implementation's forward first (its O, its LSE when it returns
// one, its keep mask with dropout), then its backward fed them, judged gradient by gradient.
void run_backward_record(Record& record, const Implementation& impl, const Capabilities& caps, Prepared& prepared, const VerifyOptions& options) {
  const CaseInputs& in = prepared.inputs();
  const Problem& p = prepared.context->problem;
  const Problem forward = p.with_operation(Operation::forward);
  const JudgeOptions judging{options.rule, caps.fully_masked, caps.judged_precision()};
  const auto start = std::chrono::steady_clock::now();
  // A kernel that promises nothing for a row that sees no key (FullyMaskedPolicy::any: the mean of
  // V, say) has a derivative there of its own; that row's output is not judged, so neither is its
  // gradient: its dO is zero, and every consistent backward then gets nothing from it, as the
  // reference does.
  std::optional<Tensor> unjudged_rows_zeroed;
  if (caps.fully_masked == FullyMaskedPolicy::any) {
    unjudged_rows_zeroed.emplace(*prepared.d_o);
    for (std::int64_t row = 0; row < p.rows(); ++row) {
      const std::int64_t i = row % p.n_q, h = (row / p.n_q) % p.h_q, b = row / (p.n_q * p.h_q);
      if (in.mask.row_fully_masked(b, h, i))
        for (std::int64_t c = 0; c < p.d_v; ++c) unjudged_rows_zeroed->set(row * p.d_v + c, 0.0);
    }
  }
  const Tensor& d_o = unjudged_rows_zeroed ? *unjudged_rows_zeroed : *prepared.d_o;
  try {
    const Output fwd = run_once(impl, forward, in, caps.returns_lse);
    const Tensor* lse = caps.returns_lse ? &fwd.lse : nullptr;
    const Gradients g = run_backward(impl, caps, p, in, d_o, fwd.out, lse);
    record.seconds = seconds_since(start);
    const ReportedKeep reported = judge_reported_keep(prepared, fwd.keep, options);
    const std::optional<KeepJudgement>& keep = reported.keep;
    const BackwardYardstick* yardstick = reported.yardstick ? &reported.yardstick->backward : &prepared.backward_yardstick;
    const CaseInputs* judged_in = reported.yardstick ? &*reported.yardstick->inputs : &in;
    if (reported.unusable()) {
      record.verdict.pass = false;
      add_keep_verdict(record.verdict, keep->verdict);
    } else {
      GradientJudgement judged = judge_gradients(p, *yardstick, g, judging);
      record.gradients = std::move(judged.errors);
      record.gradients_not_computed = std::move(judged.not_computed);
      record.verdict = std::move(judged.verdict);
      if (keep) add_keep_verdict(record.verdict, keep->verdict);
    }
    if (std::string late = impl.late_problems(); !late.empty()) {
      record.verdict.pass = false;
      record.verdict.reasons.push_back(std::move(late));
    }
    // A second backward on the same O and LSE: a declared deterministic backward must repeat its
    // bits (dK and dV races and atomically summed dQ are the backward's commonest faults), and a
    // failure's diagnosis needs it in any case. Given outputs were computed once: a second read of
    // them would say nothing of either.
    const bool computes = !impl.outputs_given();
    std::optional<Gradients> second;
    if (computes && (caps.deterministic || (!record.verdict.pass && options.diagnosis.enabled))) {
      second = run_backward(impl, caps, p, in, d_o, fwd.out, lse);
      if (std::string where = first_gradient_difference(p, g, *second); !where.empty() && caps.deterministic) {
        record.verdict.pass = false;
        record.verdict.reasons.push_back("declared deterministic, but two runs of its backward on the same inputs differ at " + where);
      }
    }
    if (!record.verdict.pass && options.diagnosis.enabled && !record.gradients.empty())
      record.diagnosis = diagnose_backward(p, *judged_in, d_o, g, record.verdict, second ? &*second : nullptr);
    // Given outputs are not isolated: their backward ran, fed its own forward, before verify did.
    if (computes && !record.verdict.pass && !record.gradients.empty()) {
      // Isolated: the same backward fed the reference's O and LSE (and the keep mask it drew).
      const Output exact = reference_forward(forward, *judged_in);
      const Gradients again = run_backward(impl, caps, p, in, d_o, exact.out, lse != nullptr ? &exact.lse : nullptr);
      const bool passes = judge_gradients(p, *yardstick, again, judging).verdict.pass;
      record.isolation = passes ? "fed the reference's O and LSE (rounded to their dtypes) instead of its own forward's, its backward passes: "
                                  "the fault is in its forward's O or LSE"
                                : "fed the reference's O and LSE (rounded to their dtypes) instead of its own forward's, its backward still "
                                  "fails: the fault is in the backward pass";
      record.verdict.reasons.push_back(record.isolation);
    }
  } catch (const std::exception& e) {
    record.seconds = seconds_since(start);
    record.verdict.pass = false;
    record.verdict.reasons.push_back(fmt::format("run failed: {}", e.what()));
  }
  record.status = record.verdict.pass ? Status::pass : Status::fail;
}

void run_record(Record& record, const Implementation& impl, const Capabilities& caps, Prepared& prepared, const VerifyOptions& options,
                int& diagnosed) {
  if (prepared.context->problem.operation == Operation::backward) return run_backward_record(record, impl, caps, prepared, options);
  const CaseContext& context = *prepared.context;
  const CaseInputs& in = prepared.inputs();
  const Problem& p = context.problem;
  const auto start = std::chrono::steady_clock::now();
  const int timeouts_before = impl.timed_out_calls();
  try {
    // Given outputs are borrowed where they lie (a 1 GiB capture is not copied or shadowed by a poisoned one).
    const bool given = prepared.given_out.has_value();
    if (given && caps.returns_lse && !prepared.given_lse)
      throw std::logic_error("verify: an LSE is declared for a case whose given outputs have none");
    if (given && p.dropout.enabled() && !prepared.given_keep)
      throw InputError(fmt::format("dropout={:g}: the given outputs come without the keep mask they were drawn with, so they cannot be judged",
                                   p.dropout.p));
    Output o = given ? Output{prepared.given_out->alias(), caps.returns_lse ? prepared.given_lse->alias() : Tensor{},
                              prepared.given_keep ? prepared.given_keep->alias() : Tensor{}}
                     : run_once(impl, p, in, caps.returns_lse);
    record.seconds = seconds_since(start);
    // Dropout: the keep mask first, by itself; the output is judged against a reference given it.
    const ReportedKeep reported = judge_reported_keep(prepared, o.keep, options);
    const std::optional<KeepJudgement>& keep = reported.keep;
    const Yardstick* yardstick = reported.yardstick ? &reported.yardstick->yardstick : &prepared.yardstick;
    const CaseInputs* judged_in = reported.yardstick ? &*reported.yardstick->inputs : &in;
    if (reported.unusable()) {
      record.verdict.pass = false;
      add_keep_verdict(record.verdict, keep->verdict);
    } else {
      Judgement judged = judge_output(p, *judged_in, *yardstick, o.out, caps.returns_lse ? &o.lse : nullptr,
                                      JudgeOptions{options.rule, caps.fully_masked, caps.judged_precision()});
      record.metrics = judged.metrics;
      record.verdict = std::move(judged.verdict);
      if (keep) add_keep_verdict(record.verdict, keep->verdict);
    }
    if (!given)
      if (std::string late = impl.late_problems(); !late.empty()) {
        record.verdict.pass = false;
        record.verdict.reasons.push_back(std::move(late));
      }
    const double scale = precision_scale(working_dtype(p.numerics()), caps.judged_precision());
    const bool diagnosed_before = prepared.diagnosed_by.contains(impl.name());
    const bool diagnose_this = !diagnosed_before && (options.diagnosis.max_cases <= 0 || diagnosed < options.diagnosis.max_cases);
    if (!record.verdict.pass && options.diagnosis.enabled && diagnosed_before)
      record.diagnosis_skipped = "not diagnosed: a run of the same case failed before and was diagnosed";
    else if (!record.verdict.pass && options.diagnosis.enabled && !diagnose_this)
      record.diagnosis_skipped = fmt::format("not diagnosed: {} failures of {} were already; rerunning this case alone diagnoses it",
                                             options.diagnosis.max_cases, impl.name());
    if (reported.unusable()) {
      record.diagnosis_skipped = "not diagnosed: the keep mask is not one a reference can be computed with";
    } else if (!record.verdict.pass && options.diagnosis.enabled && diagnose_this) {
      ++diagnosed;
      prepared.diagnosed_by.insert(impl.name());
      // The LSE agrees when nothing failed it but an unsound yardstick, which fails every role.
      const RoleVerdict* lse = record.verdict.role(Role::lse);
      const bool lse_agrees = caps.returns_lse && lse != nullptr && std::all_of(lse->reasons.begin(), lse->reasons.end(), [&](const std::string& r) {
                                return r == yardstick->baseline_problem;
                              });
      // A second run on the same inputs: if its bits differ, the failure is nondeterminism.
      std::optional<Output> rerun;  // given outputs have no second run
      try {
        if (!given && !impl.outputs_given()) rerun = run_once(impl, p, in, caps.returns_lse);
      } catch (const std::exception&) {  // the first run's failure is what is diagnosed
      }
      // The second run's late writes are this case's too, not the next case's.
      if (std::string late = rerun ? impl.late_problems() : std::string(); !late.empty())
        if (std::find(record.verdict.reasons.begin(), record.verdict.reasons.end(), late) == record.verdict.reasons.end())
          record.verdict.reasons.push_back("in the diagnosis's second run: " + late);
      record.diagnosis = diagnose(p, *judged_in, o.out,
                                  DiagnosisJudging{options.rule, yardstick->baseline, yardstick->reference.score_rounding, scale, caps.fully_masked,
                                                   record.metrics, lse_agrees, rerun ? &rerun->out : nullptr,
                                                   caps.returns_lse ? &o.lse : nullptr, lse ? lse->tolerance : 0.0},
                                  options.diagnosis);
    }
  } catch (const std::exception& e) {
    record.seconds = seconds_since(start);
    record.verdict.pass = false;
    record.verdict.reasons.push_back(fmt::format("run failed: {}", e.what()));
    // A crash or an error, not a hang: another call to a kernel that hangs would cost another timeout.
    if (!prepared.given_out && !impl.outputs_given() && impl.timed_out_calls() == timeouts_before) {
      if (std::string where = gqa_blame(impl, caps, p, options); !where.empty()) record.verdict.reasons.push_back(std::move(where));
    }
    // judge_output gives every verdict this reason; the run (or the diagnosis) may have thrown before or after it.
    auto& reasons = record.verdict.reasons;
    if (!context.baseline_problem.empty() && std::find(reasons.begin(), reasons.end(), context.baseline_problem) == reasons.end())
      reasons.push_back(context.baseline_problem);
  }
  record.status = record.verdict.pass ? Status::pass : Status::fail;
}

}  // namespace

CaseMemory case_memory(const Problem& p, const ReferenceOptions& reference, const std::vector<const Implementation*>& implementations) {
  const double b = double(p.batch), hq = double(p.h_q), hkv = double(p.h_kv), nq = double(p.n_q), nk = double(p.n_k);
  const double dk = double(p.d_k), dv = double(p.d_v);
  auto e = [&](Role role) { return double(bytes_per_element(p.dtype_of(role))); };
  const double q = b * hq * nq * dk, k = b * hkv * nk * dk, v = b * hkv * nk * dv, o = b * hq * nq * dv, rows = b * hq * nq;
  auto mask_elements = [&](Broadcast bc) {
    return (varies_over_batch(bc) ? b : 1.0) * (varies_over_head(bc) ? hq : 1.0) * nq * nk;
  };
  CaseMemory m;
  m.inputs = e(Role::q) * q + e(Role::k) * k + e(Role::v) * v + 8.0 * double(p.padding.valid_len.size());
  if (p.bool_mask.enabled) m.inputs += mask_elements(p.bool_mask.broadcast);
  if (p.bias.enabled) m.inputs += e(Role::bias) * mask_elements(p.bias.broadcast);
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
  const double acc = double(bytes_per_element(working_dtype(p.numerics())));
  m.yardstick = e(Role::o) * o + acc * rows + acc * (nq * nk + nq * dk + nk * (dk + dv) + dv);
  m.outputs = 2.0 * (e(Role::o) * o + acc * rows);
  // Dropout: each run's keep mask (f32), and the one a yardstick keeps (bytes) with its copy.
  if (p.dropout.enabled()) m.outputs += 2.0 * 4.0 * rows * nk, m.yardstick += (4.0 + 1.0) * rows * nk;
  // Backward: dO; the backward reference's widened inputs, its gradients and each task's float128
  // dK and dV blocks; the naive backward's gradients and its materialised P and dP; each run's
  // gradients (a failure reruns the backward) and the reference forward it is then fed. With a
  // bias, dBias in the bias's shape: the reference's float128 sums, its values and term magnitudes,
  // the naive backward's accumulator.
  if (p.operation == Operation::backward) {
    const double bias = p.bias.enabled ? broadcast_elements(p, p.bias.broadcast) : 0.0;
    const double gradients = e(Role::dq) * q + e(Role::dk) * k + e(Role::dv) * v + e(Role::bias) * bias + (p.sinks.enabled ? 4.0 * double(p.h_q) : 0.0);
    m.inputs += e(Role::d_o) * o;
    m.reference += 8.0 * (q + k + v + o) + 8.0 * (q + k + v) + threads * 24.0 * nk * (dk + dv) + (16.0 + 8.0 + 8.0) * bias;
    m.yardstick += gradients + acc * (2.0 * nq * nk + nq * (dk + dv) + 2.0 * nk * (dk + dv) + bias);
    m.outputs += 2.0 * gradients;
  }
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

void check_cases(const std::vector<Problem>& cases, const ReferenceOptions& reference, const std::vector<const Implementation*>& implementations) {
  for (const Problem& p : cases) {
    p.validate();
    check_case_memory(p, reference, implementations);
  }
}

VerifyRun verify(const std::vector<const Implementation*>& implementations, const std::vector<Problem>& cases,
                 const VerifyOptions& options, const std::function<void(const VerifyRun&, const Record&)>& on_record) {
  check_cases(cases, options.reference, implementations);
  return detail::verify_checked(implementations, cases, options, on_record);
}

namespace detail {

VerifyRun verify_checked(const std::vector<const Implementation*>& implementations, const std::vector<Problem>& cases,
                         const VerifyOptions& options, const std::function<void(const VerifyRun&, const Record&)>& on_record) {
  VerifyRun run;
  run.named_cases = cases.size();
  std::vector<Capabilities> caps;
  std::vector<int> diagnosed(implementations.size(), 0);  // failing cases diagnosed, per implementation
  for (const Implementation* impl : implementations) {
    caps.push_back(impl->describe());
    run.declared_features[impl->name()] = declared_features(caps.back());
  }
  // The contexts of the case before: a case repeated under the same number (validate's replay of
  // one case, several times in a row) reuses its inputs and yardstick instead of computing the
  // same reference again.
  std::vector<std::unique_ptr<Prepared>> previous;
  std::size_t previous_number = std::size_t(-1);
  for (std::size_t index = 0; index < cases.size(); ++index) {
    const Problem& p = cases[index];
    p.validate();
    const std::size_t number = options.case_numbers.empty() ? index : options.case_numbers.at(index);
    // What each implementation runs, decided before any input or reference is built: a case no
    // implementation supports costs a few calls to supports().
    std::vector<Resolution> plans;
    // Given inputs are the named problem's: a projection (another problem) would have none.
    const bool project = options.project && !options.given_inputs;
    for (std::size_t n = 0; n < implementations.size(); ++n) plans.push_back(plan_for(*implementations[n], caps[n], p, number, project));
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
        auto same = [&](auto& c) { return c->context->problem == *plan.problem; };
        auto found = std::find_if(prepared.begin(), prepared.end(), same);
        if (found == prepared.end() && number == previous_number) {
          if (auto again = std::find_if(previous.begin(), previous.end(), same); again != previous.end()) {
            prepared.push_back(std::move(*again));
            previous.erase(again);
            found = prepared.end() - 1;
          }
        }
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
    previous = std::move(prepared);
    previous_number = number;
  }
  return run;
}

}  // namespace detail

}  // namespace attn

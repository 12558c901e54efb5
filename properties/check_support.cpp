// What the property checks share: running an implementation, judging against the reference,
// drawing what a check needs from the problem's seed.
#include <exception>
#include <vector>

#include <fmt/format.h>

#include "judge/judge.hpp"
#include "impls/capability_space.hpp"
#include "properties/property_detail.hpp"

namespace attn::property_detail {

// ---------------------------------------------------------------------------------------------
// Running an implementation

Outputs run(const Implementation& impl, const Problem& p, const CaseInputs& in) {
  const Capabilities caps = impl.describe();
  if (Support s = covers(caps, p); !s.ok || !(s = impl.supports(p)).ok)
    throw DerivedProblemRefused(fmt::format("the check runs {}, which {} refuses: {}", p.repro(), impl.name(), s.reason));
  Outputs o{make_output(p), make_lse(p), caps.returns_weights ? make_weights(p) : Tensor{}, p.dropout.enabled() ? make_keep(p) : Tensor{}, {}};
  try {
    std::vector<std::byte> workspace(impl.workspace_bytes(p));
    impl.run(RunArgs{p, in,
                     RoleTensors::forward(in, o.out, caps.returns_lse ? &o.lse : nullptr, caps.returns_weights ? &o.weights : nullptr,
                                          p.dropout.enabled() ? &o.keep : nullptr),
                     workspace});
  } catch (const std::exception& e) {
    o.error = fmt::format("{}{}", run_failed_prefix, e.what());
  }
  return o;
}

BackwardOutputs run_backward(const Implementation& impl, const Problem& p, const CaseInputs& in, const Tensor& d_o) {
  Problem forward = p;
  forward.operation = Operation::forward;
  BackwardOutputs o{run(impl, forward, in), {}, {}};
  if (!o.forward.error.empty()) {
    o.error = o.forward.error;
    return o;
  }
  return rerun_backward(impl, p, in, d_o, o);
}

BackwardOutputs rerun_backward(const Implementation& impl, const Problem& p, const CaseInputs& in, const Tensor& d_o, const BackwardOutputs& first) {
  const Capabilities caps = impl.describe();
  if (Support s = covers(caps, p); !s.ok || !(s = impl.supports(p)).ok)
    throw DerivedProblemRefused(fmt::format("the check runs {}, which {} refuses: {}", p.repro(), impl.name(), s.reason));
  // dσ and dBias too where it declares them (and the problem has sinks or a bias): property 21
  // judges every gradient it gives.
  BackwardOutputs o{Outputs{first.forward.out, first.forward.lse, {}, first.forward.keep, {}},
                    caps.parameter_gradients ? make_gradients(p, in.mask) : make_gradients(p), {}};
  try {
    std::vector<std::byte> workspace(impl.workspace_bytes(p));
    impl.run(RunArgs{p, in, RoleTensors::backward(in, d_o, o.gradients, &o.forward.out, caps.returns_lse ? &o.forward.lse : nullptr), workspace});
  } catch (const std::exception& e) {
    o.error = fmt::format("{}{}", run_failed_prefix, e.what());
  }
  return o;
}

Verdict judge_gradients_against_reference(const Implementation& impl, const Problem& p, const CaseInputs& in, const Tensor& d_o,
                                          const BackwardOutputs& o) {
  const Capabilities caps = impl.describe();
  const JudgeOptions options{PassRule{}, caps.fully_masked, caps.judged_precision()};
  if (!p.dropout.enabled()) return judge_gradients(p, make_backward_yardstick(p, in, d_o), o.gradients, options).verdict;
  KeepJudgement keep = judge_keep(p, in.mask, o.forward.keep);
  Verdict v;
  if (keep.usable) {
    const CaseInputs with_keep = with_reported_keep(in, o.forward.keep);
    v = judge_gradients(p, make_backward_yardstick(p, with_keep, d_o), o.gradients, options).verdict;
  }
  add_keep_verdict(v, std::move(keep.verdict));
  return v;
}

Rng check_rng(const Problem& p, std::uint64_t purpose) { return Rng(p.seed, 0xC4EC0000 + purpose); }

std::int64_t out_index(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t c) {
  return ((b * p.h_q + h) * p.n_q + i) * p.d_v + c;
}

// First element where the rows of two outputs differ in bits, or "".
std::string first_bit_difference(const Problem& p, const Tensor& expected, const Tensor& got, std::int64_t b, std::int64_t h,
                                  std::int64_t i_expected, std::int64_t i_got, const char* what) {
  for (std::int64_t c = 0; c < p.d_v; ++c) {
    const auto e = out_index(p, b, h, i_expected, c), g = out_index(p, b, h, i_got, c);
    if (expected.bits(e) != got.bits(g))
      return fmt::format("{}: output b={} h={} i={} c={} is {} (was {})", what, b, h, i_got, c, got.get(g), expected.get(e));
  }
  return "";
}

// The pass rule's verdict for an output against the exact answer for these inputs, judged as
// verify judges (judge/judge.hpp): the reference and the naive baseline in the same precision.
// Every row (the reference's default): the pass rule compares maxima, and a max over a sample of
// the naive baseline's rows understates its error against an implementation's worst row.
Verdict judge_against_reference(const Implementation& impl, const Problem& p, const CaseInputs& in, const Outputs& o) {
  const Capabilities caps = impl.describe();
  return judge_case(p, in, o.out, caps.returns_lse ? &o.lse : nullptr, JudgeOptions{PassRule{}, caps.fully_masked, caps.judged_precision()},
                    ReferenceOptions{}, p.dropout.enabled() ? &o.keep : nullptr)
      .verdict;
}

std::string verdict_failure(const Verdict& v, const char* what) {
  if (v.pass) return "";
  std::string reasons;
  for (const auto& r : v.reasons) reasons += (reasons.empty() ? "" : "; ") + r;
  return fmt::format("{}: {}", what, reasons);
}

// A copy of the inputs with the data of another seed: what "changing" a slice draws from.
CaseInputs other_data(const Problem& p) {
  Problem q = p;
  q.seed = p.seed + 7777;
  return generate_inputs(q);
}

CaseInputs with_repeated_kv(const Problem& p, const CaseInputs& in) {
  CaseInputs repeated{in.q, Tensor(in.k.dtype(), {p.batch, p.h_q, p.n_k, p.d_k}), Tensor(in.v.dtype(), {p.batch, p.h_q, p.n_k, p.d_v}), in.mask};
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h) {
      for (std::int64_t e = 0; e < p.n_k * p.d_k; ++e)
        repeated.k.set_bits(repeated.k.offset(b, h, 0, 0) + e, in.k.bits(in.k.offset(b, p.kv_head(h), 0, 0) + e));
      for (std::int64_t e = 0; e < p.n_k * p.d_v; ++e)
        repeated.v.set_bits(repeated.v.offset(b, h, 0, 0) + e, in.v.bits(in.v.offset(b, p.kv_head(h), 0, 0) + e));
    }
  return repeated;
}

// Copies element range [from, from + count) of src into dst.
void copy_range(const Tensor& src, Tensor& dst, std::int64_t from, std::int64_t count) {
  for (std::int64_t e = from; e < from + count; ++e) dst.set_bits(e, src.bits(e));
}

// The unit roundoff a property's rounding allowance is measured in: the dtype's accumulation
// precision, coarsened as the pass rule coarsens it for an implementation whose matrix
// products or accumulators are coarser (Capabilities::judged_precision, core/pass_rule.hpp).
double unit_roundoff_for(const Implementation& impl, const Problem& p) {
  const DType working = working_dtype(p.numerics());
  return accumulation_unit_roundoff(working) * precision_scale(working, impl.describe().judged_precision());
}

// A rounding allowance derived from the pass rule: k times the naive algorithm's a-priori
// error `naive_bound` (already in the implementation's unit roundoff) plus the rule's ulp
// floor at `magnitude`, scaled like the pass rule's floor. An output the pass rule accepts
// cannot be rejected by a property that allows this much.
double allowance_from_pass_rule(const Implementation& impl, const Problem& p, DType ulp_dtype, double naive_bound, double magnitude) {
  const PassRule rule;
  return rule.k * naive_bound + rule.floor_ulps * precision_scale(working_dtype(p.numerics()), impl.describe().judged_precision()) * ulp_at(ulp_dtype, magnitude);
}

}  // namespace attn::property_detail

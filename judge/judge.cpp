#include "judge/judge.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <vector>

#include <boost/math/distributions/binomial.hpp>
#include <fmt/format.h>

#include "core/error.hpp"
#include "core/precision.hpp"
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

KeepJudgement judge_keep(const Problem& p, const Mask& mask, const Tensor& keep) {
  KeepJudgement judged;
  RoleVerdict& v = judged.verdict;
  v.role = Role::keep;
  v.reference_max_abs = 1.0 - p.dropout.p;
  const auto& s = keep.shape();
  if (s[0] != p.batch || s[1] != p.h_q || s[2] != p.n_q || s[3] != p.n_k) {
    v.pass = false;
    v.reasons.push_back(fmt::format("the keep mask is [{}, {}, {}, {}], not [b, h_q, n_q, n_k] = [{}, {}, {}, {}]", s[0], s[1], s[2],
                                    s[3], p.batch, p.h_q, p.n_q, p.n_k));
    judged.usable = false;
    return judged;
  }
  std::int64_t visible = 0, kept = 0;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        const auto [lo, hi] = mask.key_range(b, i);
        for (std::int64_t j = lo; j < hi; ++j) {
          if (!mask.visible(b, h, i, j)) continue;
          const double z = keep.get(keep.offset(b, h, i, j));
          if (z != 0.0 && z != 1.0) {
            v.pass = false;
            v.reasons.push_back(fmt::format("{} at (b={}, h={}, i={}, j={}), a visible pair, is neither 0 (dropped) nor 1 (kept)", z, b,
                                            h, i, j));
            judged.usable = false;
            return judged;
          }
          ++visible;
          kept += z == 1.0;
        }
      }
  if (visible == 0) return judged;
  const double keep_probability = 1.0 - p.dropout.p;
  const boost::math::binomial_distribution<double> drawn(double(visible), keep_probability);
  constexpr double level = 1e-6;  // two-sided
  const double below = boost::math::cdf(drawn, double(kept));
  const double above = kept == 0 ? 1.0 : boost::math::cdf(boost::math::complement(drawn, double(kept - 1)));
  const double low = boost::math::quantile(drawn, level / 2), high = boost::math::quantile(boost::math::complement(drawn, level / 2));
  v.max_abs = std::fabs(double(kept) / double(visible) - keep_probability);
  v.tolerance = std::max(keep_probability - low / double(visible), high / double(visible) - keep_probability);
  if (std::min(below, above) < level / 2) {
    v.pass = false;
    v.reasons.push_back(fmt::format("{} of {} visible weights kept ({:.4g}%) where 1 - p = {:g} keeps {:g} to {:g} but for a chance of 1e-6 "
                                    "(binomial, two-sided): the dropout stream's rate is not 1 - p",
                                    kept, visible, 100.0 * double(kept) / double(visible), keep_probability, low, high));
  }
  return judged;
}

void add_keep_verdict(Verdict& verdict, RoleVerdict keep) {
  if (!keep.pass) {
    verdict.pass = false;
    verdict.reasons.insert(verdict.reasons.end(), keep.reasons.begin(), keep.reasons.end());
  }
  verdict.roles.push_back(std::move(keep));
}

CaseInputs with_reported_keep(const CaseInputs& in, const Tensor& keep) {
  return CaseInputs{in.q.alias(), in.k.alias(), in.v.alias(), in.mask.with_keep(keep)};
}

Judgement judge_case(const Problem& p, const CaseInputs& in, const Tensor& out, const Tensor* lse, const JudgeOptions& options,
                     const ReferenceOptions& reference, const Tensor* keep) {
  p.validate();
  if (!p.dropout.enabled()) return judge_output(p, in, make_yardstick(p, in, reference), out, lse, options);
  if (keep == nullptr)
    throw InputError(fmt::format("dropout={:g}: judging its output needs the keep mask its implementation drew ([b, h_q, n_q, n_k], 1 kept, 0 dropped)",
                                 p.dropout.p));
  KeepJudgement keep_judged = judge_keep(p, in.mask, *keep);
  Judgement j;
  if (keep_judged.usable) {
    const CaseInputs with_keep = with_reported_keep(in, *keep);
    j = judge_output(p, with_keep, make_yardstick(p, with_keep, reference), out, lse, options);
  }
  add_keep_verdict(j.verdict, std::move(keep_judged.verdict));
  return j;
}

namespace {
// A per-gradient record's member for `gradient`: the reference's values or its term magnitudes,
// which name their members after the gradients.
template <class PerGradient>
const auto& of_gradient(const PerGradient& record, Role gradient) {
  switch (gradient) {
    case Role::dq: return record.dq;
    case Role::dk: return record.dk;
    case Role::dv: return record.dv;
    case Role::d_sink: return record.d_sink;
    case Role::d_bias: return record.d_bias;
    default: throw std::logic_error(fmt::format("{} is not a gradient", to_string(gradient)));
  }
}
}  // namespace

std::span<const double> BackwardYardstick::expected(Role gradient) const { return of_gradient(reference, gradient); }

double BackwardYardstick::term_rounding(Role gradient, const Problem& p) const {
  // Stored in a dtype: half its spacing relative to the value.
  const auto stored = [](DType dtype) { return std::ldexp(1.0, -significand_bits(dtype)); };
  const double relative = accumulation_unit_roundoff(working_dtype(p.numerics())) + stored(p.dtype_of(Role::lse)) * reference.lse_max_abs +
                          stored(p.dtype_of(Role::o));
  return relative * of_gradient(reference.term_magnitude, gradient);
}

const TensorErrors& BackwardYardstick::baseline_of(Role gradient) const {
  for (const TensorErrors& e : baseline)
    if (e.role == gradient) return e;
  throw std::logic_error(fmt::format("no naive baseline for {}", to_string(gradient)));
}

bool BackwardYardstick::has(Role gradient) const {
  return std::any_of(baseline.begin(), baseline.end(), [&](const TensorErrors& e) { return e.role == gradient; });
}

BackwardYardstick make_backward_yardstick(const Problem& p, const CaseInputs& in, const Tensor& d_o, int threads) {
  if (p.operation != Operation::backward) throw std::logic_error("make_backward_yardstick: a forward problem");
  BackwardYardstick y;
  const auto start = std::chrono::steady_clock::now();
  y.reference = compute_reference_backward(p, in, d_o, threads);
  y.reference_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Gradients naive = make_gradients(p, in.mask);
  std::vector<std::byte> workspace(naive_workspace_bytes(p));
  naive_attention(RunArgs{p, in, RoleTensors::backward(in, d_o, naive), workspace});
  for (Role role : naive.roles()) y.baseline.push_back(measure_tensor(role, naive.of(role).dtype(), naive.of(role), y.expected(role)));
  return y;
}

GradientJudgement judge_gradients(const Problem& p, const BackwardYardstick& y, const Gradients& g, const JudgeOptions& options) {
  GradientJudgement j;
  const DType working = working_dtype(p.numerics());
  const double scale = precision_scale(working, options.matmul_precision);
  double worst_ratio = 0;
  for (Role role : parameter_gradient_roles)
    if (y.has(role) && !g.holds(role)) j.not_computed.push_back(role);
  for (Role role : g.roles()) {
    // The parameters' gradients are in their tensors' dtypes (the sinks' f32, the bias's), which
    // the problem's roles do not name.
    const DType dtype = is_data_role(role) ? p.dtype_of(role) : g.of(role).dtype();
    const TensorErrors& measured = j.errors.emplace_back(measure_tensor(role, dtype, g.of(role), y.expected(role)));
    RoleVerdict v = judge_gradient(options.rule, dtype, measured, y.baseline_of(role), y.term_rounding(role, p), scale);
    const double naive = y.baseline_of(role).max_abs;
    const double ratio = naive > 0 ? measured.max_abs / naive : (measured.max_abs > 0 ? std::numeric_limits<double>::infinity() : 0.0);
    if (!(ratio <= worst_ratio)) worst_ratio = ratio;
    j.verdict.pass = j.verdict.pass && v.pass;
    j.verdict.reasons.insert(j.verdict.reasons.end(), v.reasons.begin(), v.reasons.end());
    j.verdict.roles.push_back(std::move(v));
  }
  j.verdict.ratio = worst_ratio;
  return j;
}

std::string first_gradient_difference(const Problem& p, const Gradients& first, const Gradients& second) {
  for (Role role : first.roles()) {
    const Tensor &a = first.of(role), &b = second.of(role);
    if (a.numel() != b.numel()) return fmt::format("{} given by one run only", to_string(role));
    std::int64_t differing = 0, at = -1;
    for (std::int64_t e = 0; e < a.numel(); ++e)
      if (a.bits(e) != b.bits(e)) differing += 1, at = at < 0 ? e : at;
    if (differing > 0)
      return fmt::format("{} ({:.9g} then {:.9g}), {} elements of {} differ", tensor_coordinates(p, role, at), a.get(at), b.get(at), differing,
                         to_string(role));
  }
  return "";
}


}  // namespace attn

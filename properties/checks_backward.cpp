// The backward pass's properties (21 to 27): the gradients' invariants (reference/README.md, "The
// backward pass"), each on an implementation's own forward and then its backward fed that
// forward's O and LSE, as verify runs a backward case.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/metrics.hpp"
#include "judge/judge.hpp"
#include "properties/property_detail.hpp"

namespace attn::property_detail {
namespace {

// The gradients' verdict's tolerance for one of them (0 when it was not judged).
double tolerance_of(const Verdict& v, Role gradient) {
  const RoleVerdict* role = v.role(gradient);
  return role != nullptr ? role->tolerance : 0.0;
}

}  // namespace

std::string gradients_agree_with_the_reference(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Tensor d_o = generate_d_o(p);
  const BackwardOutputs o = run_backward(impl, p, in, d_o);
  if (!o.error.empty()) return o.error;
  return verdict_failure(judge_gradients_against_reference(impl, p, in, d_o, o), "the gradients against the reference");
}

std::string masked_keys_and_rows_get_zero_gradients(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const BackwardOutputs o = run_backward(impl, p, in, generate_d_o(p));
  if (!o.error.empty()) return o.error;
  const std::int64_t group = p.h_q / p.h_kv;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t g = 0; g < p.h_kv; ++g)
      for (std::int64_t j = 0; j < p.n_k; ++j) {
        bool seen = false;
        for (std::int64_t h = g * group; h < (g + 1) * group && !seen; ++h)
          for (std::int64_t i = 0; i < p.n_q && !seen; ++i) seen = in.mask.visible(b, h, i, j);
        if (seen) continue;
        for (Role role : {Role::dk, Role::dv}) {
          const Tensor& t = o.gradients.of(role);
          const std::int64_t width = role == Role::dk ? p.d_k : p.d_v, first = ((b * p.h_kv + g) * p.n_k + j) * width;
          for (std::int64_t c = 0; c < width; ++c)
            if (t.is_poisoned(first + c) || t.get(first + c) != 0.0)
              return fmt::format("{} is {} where key {} is masked in every row of its group (exactly 0 expected)",
                                 tensor_coordinates(p, role, first + c), t.is_poisoned(first + c) ? "never written" : fmt::format("{:.9g}", t.get(first + c)), j);
        }
      }
  for (std::int64_t row = 0; row < p.rows(); ++row) {
    const std::int64_t i = row % p.n_q, h = (row / p.n_q) % p.h_q, b = row / (p.n_q * p.h_q);
    if (!in.mask.row_fully_masked(b, h, i)) continue;
    for (std::int64_t c = 0; c < p.d_k; ++c) {
      const std::int64_t e = row * p.d_k + c;
      if (o.gradients.dq.is_poisoned(e) || o.gradients.dq.get(e) != 0.0)
        return fmt::format("{} is {} in a fully masked row (exactly 0 expected)", tensor_coordinates(p, Role::dq, e),
                           o.gradients.dq.is_poisoned(e) ? "never written" : fmt::format("{:.9g}", o.gradients.dq.get(e)));
    }
  }
  return "";
}

std::string doubling_d_o_doubles_every_gradient(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Tensor d_o = generate_d_o(p);
  Tensor doubled = d_o;
  for (std::int64_t e = 0; e < d_o.numel(); ++e) doubled.set(e, 2.0 * d_o.get(e));  // exact: the large regime is not drawn
  const BackwardOutputs once = run_backward(impl, p, in, d_o);
  if (!once.error.empty()) return once.error;
  const BackwardOutputs twice = rerun_backward(impl, p, in, doubled, once);
  if (!twice.error.empty()) return twice.error;
  for (Role role : gradient_roles) {
    const Tensor &a = once.gradients.of(role), &b = twice.gradients.of(role);
    // Below twice the smallest normal, rounding 2y and doubling round(y) may differ by a subnormal step.
    const double exempt = 2.0 * min_normal(p.dtype_of(role));
    for (std::int64_t e = 0; e < a.numel(); ++e)
      if (!(b.get(e) == 2.0 * a.get(e)) && !(std::fabs(a.get(e)) < exempt))
        return fmt::format("with dO doubled, {} is {:.9g} where twice the first run's {:.9g} is expected exactly", tensor_coordinates(p, role, e),
                           b.get(e), 2.0 * a.get(e));
  }
  return "";
}

std::string key_gradients_sum_to_zero(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Tensor d_o = generate_d_o(p);
  const BackwardOutputs o = run_backward(impl, p, in, d_o);
  if (!o.error.empty()) return o.error;
  // Each dK_j may be off by the rule's tolerance: their sum by n_k of them.
  const double allowed = double(p.n_k) * tolerance_of(judge_gradients_against_reference(impl, p, in, d_o, o), Role::dk);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t g = 0; g < p.h_kv; ++g)
      for (std::int64_t c = 0; c < p.d_k; ++c) {
        double sum = 0;
        for (std::int64_t j = 0; j < p.n_k; ++j) sum += o.gradients.dk.get(((b * p.h_kv + g) * p.n_k + j) * p.d_k + c);
        if (!(std::fabs(sum) <= allowed))
          return fmt::format("sum over keys of dK at b={} h={} c={} is {:.6g}, beyond the {:.3g} that n_k = {} keys' tolerances allow (each row's "
                             "dS sums to zero, so the keys' gradients do)",
                             b, g, c, sum, allowed, p.n_k);
      }
  return "";
}

std::string shifting_every_value_leaves_dq_and_dk_unchanged(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Tensor d_o = generate_d_o(p);
  // One vector added to every value row of a (batch, kv head): dP_ij and D_i move by <dO_i, c>
  // alike, so dS, dQ and dK do not move (dV does not depend on V).
  CaseInputs shifted{in.q, in.k, in.v, in.mask};
  Rng rng = check_rng(p, 25);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t g = 0; g < p.h_kv; ++g)
      for (std::int64_t c = 0; c < p.d_v; ++c) {
        const double offset = double(std::int64_t(rng.next() % 5) - 2);  // -2 .. 2
        for (std::int64_t j = 0; j < p.n_k; ++j) {
          const std::int64_t e = in.v.offset(b, g, j, c);
          shifted.v.set(e, in.v.get(e) + offset);
        }
      }
  const BackwardOutputs before = run_backward(impl, p, in, d_o);
  if (!before.error.empty()) return before.error;
  const BackwardOutputs after = run_backward(impl, p, shifted, d_o);
  if (!after.error.empty()) return after.error;
  const BackwardYardstick plain = make_backward_yardstick(p, in, d_o), moved = make_backward_yardstick(p, shifted, d_o);
  const JudgeOptions options{PassRule{}, impl.describe().fully_masked, impl.describe().judged_precision()};
  const Verdict judged_before = judge_gradients(p, plain, before.gradients, options).verdict;
  const Verdict judged_after = judge_gradients(p, moved, after.gradients, options).verdict;
  for (Role role : {Role::dq, Role::dk}) {
    // The two runs' gradients agree within both tolerances and what rounding the shifted V to its
    // dtype changed in the exact gradients.
    const std::span<const double> exact_before = plain.expected(role), exact_after = moved.expected(role);
    double moved_exactly = 0;
    for (std::size_t e = 0; e < exact_before.size(); ++e) moved_exactly = std::max(moved_exactly, std::fabs(exact_after[e] - exact_before[e]));
    const double allowed = tolerance_of(judged_before, role) + tolerance_of(judged_after, role) + moved_exactly;
    const Tensor &a = before.gradients.of(role), &b = after.gradients.of(role);
    for (std::int64_t e = 0; e < a.numel(); ++e)
      if (!(std::fabs(b.get(e) - a.get(e)) <= allowed))
        return fmt::format("with one vector added to every value row, {} moved from {:.9g} to {:.9g}, more than the {:.3g} both runs' "
                           "tolerances allow (dQ and dK do not depend on a shift of V)",
                           tensor_coordinates(p, role, e), a.get(e), b.get(e), allowed);
  }
  return "";
}

std::string grouped_head_gradients_equal_summed_repeated_heads(const Implementation& impl, const Problem& p) {
  if (p.h_kv == p.h_q) return "";
  const CaseInputs in = generate_inputs(p);
  const Tensor d_o = generate_d_o(p);
  const BackwardOutputs grouped = run_backward(impl, p, in, d_o);
  if (!grouped.error.empty()) return grouped.error;
  Problem mha = p;
  mha.h_kv = p.h_q;
  const CaseInputs repeated = with_repeated_kv(p, in);
  const BackwardOutputs as_mha = run_backward(impl, mha, repeated, d_o);
  if (!as_mha.error.empty()) return as_mha.error;
  const Verdict v_grouped = judge_gradients_against_reference(impl, p, in, d_o, grouped);
  const Verdict v_mha = judge_gradients_against_reference(impl, mha, repeated, d_o, as_mha);
  const std::int64_t group = p.h_q / p.h_kv;
  for (std::int64_t e = 0; e < grouped.gradients.dq.numel(); ++e)
    if (!(std::fabs(grouped.gradients.dq.get(e) - as_mha.gradients.dq.get(e)) <= tolerance_of(v_grouped, Role::dq) + tolerance_of(v_mha, Role::dq)))
      return fmt::format("{} is {:.9g}, as MHA with K and V repeated {:.9g}", tensor_coordinates(p, Role::dq, e), grouped.gradients.dq.get(e),
                         as_mha.gradients.dq.get(e));
  for (Role role : {Role::dk, Role::dv}) {
    const Tensor &g = grouped.gradients.of(role), &m = as_mha.gradients.of(role);
    const std::int64_t width = role == Role::dk ? p.d_k : p.d_v;
    const double allowed = tolerance_of(v_grouped, role) + double(group) * tolerance_of(v_mha, role);
    for (std::int64_t e = 0; e < g.numel(); ++e) {
      const std::int64_t c = e % width, j = (e / width) % p.n_k, kv = (e / (width * p.n_k)) % p.h_kv, b = e / (width * p.n_k * p.h_kv);
      double summed = 0;
      for (std::int64_t h = kv * group; h < (kv + 1) * group; ++h) summed += m.get(((b * p.h_q + h) * p.n_k + j) * width + c);
      if (!(std::fabs(g.get(e) - summed) <= allowed))
        return fmt::format("{} is {:.9g} where the MHA form's {} summed over the group's {} query heads is {:.9g}", tensor_coordinates(p, role, e),
                           g.get(e), to_string(role), group, summed);
    }
  }
  return "";
}

std::string repeated_backward_runs_are_bitwise_equal(const Implementation& impl, const Problem& p) {
  constexpr int runs = 4;
  const CaseInputs in = generate_inputs(p);
  const Tensor d_o = generate_d_o(p);
  const BackwardOutputs first = run_backward(impl, p, in, d_o);
  if (!first.error.empty()) return first.error;
  for (int k = 2; k <= runs; ++k) {
    const BackwardOutputs again = rerun_backward(impl, p, in, d_o, first);
    if (!again.error.empty()) return again.error;
    if (std::string where = first_gradient_difference(p, first.gradients, again.gradients); !where.empty())
      return fmt::format("backward runs on the same inputs differ: run {} of {} at {}", k, runs, where);
  }
  return "";
}

}  // namespace attn::property_detail

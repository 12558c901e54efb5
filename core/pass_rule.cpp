#include "core/pass_rule.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "core/precision.hpp"

namespace attn {

double precision_scale(DType working, MatmulPrecision matmul) {
  const double own = accumulation_unit_roundoff(working), coarser = unit_roundoff(matmul);
  return coarser > own ? coarser / own : 1.0;
}

namespace {

void fail(RoleVerdict& role, std::string reason) {
  role.pass = false;
  role.reasons.push_back(std::move(reason));
}

// What every judged tensor fails on besides its error: elements left unwritten, NaN and Inf where
// the reference is finite. `elements`: "output elements" for o, "dk elements" for a gradient.
void fail_census(RoleVerdict& role, std::string_view elements, std::int64_t unwritten, std::int64_t nan, std::int64_t inf) {
  if (unwritten > 0) fail(role, fmt::format("{} {} never written", unwritten, elements));
  if (nan > 0) fail(role, fmt::format("{} NaN where the reference is finite", nan));
  if (inf > 0) fail(role, fmt::format("{} Inf where the reference is finite", inf));
}

}  // namespace

RoleVerdict judge_gradient(const PassRule& rule, DType dtype, const TensorErrors& m, const TensorErrors& baseline, double term_rounding,
                           double scale) {
  RoleVerdict v{m.role, true, m.max_abs, m.reference_max_abs, 0, {}};
  const bool by_terms = term_rounding > baseline.max_abs;
  const double floor = scale * rule.floor_ulps * ulp_at(dtype, m.reference_max_abs);
  v.tolerance = rule.k * scale * (by_terms ? term_rounding : baseline.max_abs) + floor;
  const std::string elements = fmt::format("{} elements", to_string(m.role));
  fail_census(v, elements, m.unwritten, m.nan, m.pos_inf + m.neg_inf);
  const std::string scaled = scale != 1.0 ? fmt::format(", all x {:g} for the matmul precision", scale) : "";
  if (!(m.max_abs <= v.tolerance))
    fail(v, by_terms ? fmt::format("{} max abs error {:.3g} > tolerance {:.3g} ({} x term rounding {:.3g} (naive {:.3g}) + {} ulps{})",
                                   to_string(m.role), m.max_abs, v.tolerance, rule.k, term_rounding, baseline.max_abs, rule.floor_ulps, scaled)
                     : fmt::format("{} max abs error {:.3g} > tolerance {:.3g} ({} x naive {:.3g} + {} ulps{})", to_string(m.role), m.max_abs,
                                   v.tolerance, rule.k, baseline.max_abs, rule.floor_ulps, scaled));
  return v;
}

Verdict judge(const PassRule& rule, const ProblemNumerics& numerics, const ErrorMetrics& m, const ErrorMetrics& baseline,
              const ScoreRounding& score_rounding, double scale) {
  Verdict v;
  v.roles.reserve(2);  // o and lse: the references below stay valid
  RoleVerdict& o = v.roles.emplace_back(RoleVerdict{Role::o, true, m.max_abs, m.reference_max_abs, 0, {}});
  const double floor = scale * rule.floor_ulps * ulp_at(numerics.dtype_of(Role::o), m.reference_max_abs);
  const bool by_scores = score_rounding.out > baseline.max_abs;
  const double yardstick = scale * (by_scores ? score_rounding.out : baseline.max_abs);
  // Said after the rule's terms in a failure when the yardsticks are scaled.
  const std::string scaled = scale != 1.0 ? fmt::format(", all x {:g} for the matmul precision", scale) : "";
  o.tolerance = rule.k * yardstick + floor;
  v.ratio = baseline.max_abs > 0 ? m.max_abs / baseline.max_abs
                                 : (m.max_abs > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  // Fully masked rows are judged by the declared policy alone (below), whatever they hold.
  fail_census(o, "output elements", m.unwritten, m.nan_outside_fully_masked(), m.inf_outside_fully_masked());
  if (m.fully_masked_violations > 0) {
    const std::string held = fully_masked_contents(m);
    fail(o, fmt::format("{} of {} fully masked rows break the declared policy ({}){}", m.fully_masked_violations, m.fully_masked_rows,
                        to_string(m.policy), held.empty() ? "" : ": " + held));
  }
  if (!(m.max_abs <= o.tolerance))
    fail(o, by_scores ? fmt::format("max abs error {:.3g} > tolerance {:.3g} ({} x score rounding {:.3g} (naive {:.3g}) + {} ulps{})",
                                    m.max_abs, o.tolerance, rule.k, score_rounding.out, baseline.max_abs, rule.floor_ulps, scaled)
                      : fmt::format("max abs error {:.3g} > tolerance {:.3g} ({} x naive {:.3g} + {} ulps{})", m.max_abs, o.tolerance,
                                    rule.k, baseline.max_abs, rule.floor_ulps, scaled));
  if (m.has_lse) {
    RoleVerdict& lse = v.roles.emplace_back(RoleVerdict{Role::lse, true, m.lse_max_abs, m.lse_reference_max_abs, 0, {}});
    const DType lse_dtype = numerics.dtype_of(Role::lse);
    const double lse_yardstick = scale * std::max(baseline.lse_max_abs, score_rounding.lse);
    const double lse_tolerance = rule.k * lse_yardstick + scale * rule.floor_ulps * ulp_at(lse_dtype, m.lse_reference_max_abs);
    lse.tolerance = lse_tolerance;
    if (m.lse_violations > 0) fail(lse, fmt::format("{} LSE values non-finite or not -inf on fully masked rows", m.lse_violations));
    if (!(m.lse_max_abs <= lse_tolerance))
      fail(lse, fmt::format("LSE max abs error {:.3g} > tolerance {:.3g} ({} x max(naive {:.3g}, score rounding {:.3g}) + {} ulps{})",
                            m.lse_max_abs, lse_tolerance, rule.k, baseline.lse_max_abs, score_rounding.lse, rule.floor_ulps, scaled));
  }
  for (const RoleVerdict& role : v.roles) {
    v.pass = v.pass && role.pass;
    v.reasons.insert(v.reasons.end(), role.reasons.begin(), role.reasons.end());
  }
  return v;
}

}  // namespace attn

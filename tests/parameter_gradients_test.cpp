// The parameters' gradients, dσ (d_sink) and dBias (d_bias), as `verify --backward` judges them
// (judge/judge.hpp, judge_gradients): cpu_naive, which declares them, passes with both judged on
// cases with sinks and with a bias per batch, per head and shared (and ALiBi's, under dropout);
// undeclared (cpu_blocked) they are neither asked for nor judged and the record names them not
// computed; a backward whose dσ has the wrong sign, or whose dBias of a broadcast bias is not
// summed over the broadcast dimension, fails naming that role alone, diagnosed as its mistake;
// the records carry them through their JSON and back.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "impls/registry.hpp"
#include "records/verify_record.hpp"
#include "reports/verify_report.hpp"
#include "tests/mutants/mutants.hpp"
#include "verification/verify.hpp"

namespace attn {
namespace {

std::vector<Problem> cases_of(const std::vector<const char*>& repros) {
  std::vector<Problem> cases;
  for (const char* repro : repros) cases.push_back(parse_problem(repro));
  return cases;
}

const std::vector<const char*> parameter_cases{
    "op=backward b=2 hq=4 hkv=2 nq=12 nk=15 dk=16 dv=16 dtype=f32 causal=bottom_right sink=0.5 regime=diffuse seed=31",
    "op=backward b=2 hq=3 hkv=1 nq=10 nk=10 dk=8 dv=8 dtype=f16 causal=none bias=1@b regime=diffuse seed=32",
    "op=backward b=3 hq=2 hkv=2 nq=9 nk=11 dk=8 dv=8 dtype=f64 causal=top_left bias=0.5@h sinks=0.5,-1 regime=peaked seed=33",
    "op=backward b=2 hq=2 hkv=1 nq=8 nk=8 dk=8 dv=8 dtype=bf16 causal=none bias=1@shared softcap=3 regime=diffuse seed=34",
    "op=backward b=1 hq=4 hkv=4 nq=8 nk=12 dk=8 dv=8 dtype=f32 causal=none bias=alibi dropout=0.2 regime=diffuse seed=35",
};

// The parameter gradients a problem has, in role order.
std::vector<Role> parameters_of(const Problem& p) {
  std::vector<Role> roles;
  if (p.sinks.enabled) roles.push_back(Role::d_sink);
  if (p.bias.enabled) roles.push_back(Role::d_bias);
  return roles;
}

std::vector<Role> judged_roles(const Record& r) {
  std::vector<Role> roles;
  for (const TensorErrors& g : r.gradients) roles.push_back(g.role);
  return roles;
}

TEST(ParameterGradients, CpuNaivePassesWithThemJudgedAndCpuBlockedWithThemNotComputed) {
  Registry registry;
  register_builtin_implementations(registry);
  const Implementation* naive = registry.find("cpu_naive");
  const Implementation* blocked = registry.find("cpu_blocked");
  ASSERT_NE(naive, nullptr);
  ASSERT_NE(blocked, nullptr);
  ASSERT_TRUE(naive->describe().parameter_gradients);
  ASSERT_FALSE(blocked->describe().parameter_gradients);
  const VerifyRun run = verify({naive, blocked}, cases_of(parameter_cases), VerifyOptions{});
  int naive_judged = 0, blocked_not_computed = 0;
  for (const Record& r : run.records) {
    SCOPED_TRACE(r.implementation + " on " + r.context->problem.repro());
    ASSERT_EQ(r.status, Status::pass) << (r.verdict.reasons.empty() ? r.skip_reason : r.verdict.reasons.front());
    const Problem& p = r.context->problem;
    const std::vector<Role> parameters = parameters_of(p);
    // The yardstick has them whoever is judged: the baseline and its term rounding, one per gradient.
    std::vector<Role> baseline;
    for (const TensorErrors& e : r.context->gradient_baseline) baseline.push_back(e.role);
    std::vector<Role> all{Role::dq, Role::dk, Role::dv};
    all.insert(all.end(), parameters.begin(), parameters.end());
    EXPECT_EQ(baseline, all);
    ASSERT_EQ(r.context->gradient_term_rounding.size(), all.size());
    for (std::size_t n = 3; n < all.size(); ++n) EXPECT_GT(r.context->gradient_term_rounding[n], 0.0) << to_string(all[n]);
    const nlohmann::json j = to_json(verify_record(r));
    if (r.implementation == "cpu_naive") {
      EXPECT_EQ(judged_roles(r), all);
      EXPECT_TRUE(r.gradients_not_computed.empty());
      for (Role role : parameters) {
        const RoleVerdict* v = r.verdict.role(role);
        ASSERT_NE(v, nullptr) << to_string(role);
        EXPECT_TRUE(v->pass);
        EXPECT_GT(v->reference_max_abs, 0.0) << to_string(role);
        EXPECT_LE(v->max_abs, v->tolerance) << to_string(role);
        EXPECT_TRUE(j.at("gradients").contains(std::string(to_string(role))));
        EXPECT_TRUE(j.at("roles").contains(std::string(to_string(role))));
      }
      EXPECT_FALSE(j.contains("gradients_not_computed"));
      naive_judged += !parameters.empty();
    } else {
      EXPECT_EQ(judged_roles(r), (std::vector<Role>{Role::dq, Role::dk, Role::dv}));
      EXPECT_EQ(r.gradients_not_computed, parameters);
      for (Role role : parameters) EXPECT_EQ(r.verdict.role(role), nullptr) << to_string(role);
      std::vector<std::string> names;
      for (Role role : parameters) names.emplace_back(to_string(role));
      if (names.empty()) {
        EXPECT_FALSE(j.contains("gradients_not_computed"));
      } else {
        EXPECT_EQ(j.at("gradients_not_computed"), nlohmann::json(names));
        EXPECT_EQ(read_verify_record(j, 0, "test").gradients_not_computed, names);
      }
      blocked_not_computed += !parameters.empty();
    }
    // The record reads back as written, the parameters' gradients and verdicts with the rest.
    EXPECT_EQ(to_json(read_verify_record(j, 0, "test")), j);
  }
  EXPECT_EQ(naive_judged, int(parameter_cases.size()));
  EXPECT_EQ(blocked_not_computed, int(parameter_cases.size()));
}

// A planted mistake in one parameter gradient fails that role alone (dQ, dK and dV right), names it
// in the reasons and the worst element, and the diagnosis names the mistake.
TEST(ParameterGradients, AMistakeInOneFailsNamingItsRole) {
  struct Planted {
    BackwardMistake mistake;
    const char* repro;
    Role role;
    const char* worst_at;  // in the worst element's coordinates: the role, "*" where the bias broadcasts
  };
  const std::vector<Planted> planted{
      {BackwardMistake::d_sink_sign_flipped, parameter_cases[0], Role::d_sink, "d_sink h="},
      {BackwardMistake::d_sink_sign_flipped, parameter_cases[2], Role::d_sink, "d_sink h="},
      // Shared over heads: dBias holds the last head's dS; over batches: the last batch's.
      {BackwardMistake::d_bias_not_summed, parameter_cases[1], Role::d_bias, " h=* i="},
      {BackwardMistake::d_bias_not_summed, parameter_cases[2], Role::d_bias, "d_bias b=* h="},
      {BackwardMistake::d_bias_not_summed, parameter_cases[3], Role::d_bias, "d_bias b=* h=* i="},
  };
  const std::unique_ptr<Implementation> control = mutants::make_backward_mutant(std::nullopt);
  for (const Planted& t : planted) {
    const std::string name(known_backward_mistake(t.mistake).name);
    SCOPED_TRACE(name + " on " + t.repro);
    const std::unique_ptr<Implementation> mutant = mutants::make_backward_mutant(t.mistake);
    VerifyOptions options;
    options.diagnosis.max_cases = 0;
    const VerifyRun run = verify({control.get(), mutant.get()}, cases_of({t.repro}), options);
    ASSERT_EQ(run.records.size(), 2u);
    const bool control_first = run.records[0].implementation == control->name();
    const Record& right = run.records[control_first ? 0 : 1];
    const Record& wrong = run.records[control_first ? 1 : 0];
    EXPECT_EQ(right.status, Status::pass) << (right.verdict.reasons.empty() ? "" : right.verdict.reasons.front());
    ASSERT_EQ(wrong.status, Status::fail);
    for (const RoleVerdict& v : wrong.verdict.roles) EXPECT_EQ(v.pass, v.role != t.role) << to_string(v.role);
    ASSERT_FALSE(wrong.verdict.reasons.empty());
    EXPECT_EQ(wrong.verdict.reasons.front().rfind(std::string(to_string(t.role)) + " max abs error", 0), 0u) << wrong.verdict.reasons.front();
    ASSERT_FALSE(wrong.diagnosis.matches.empty());
    EXPECT_EQ(wrong.diagnosis.matches.front().hypothesis, name);
    const VerifyRecord record = verify_record(wrong);
    ASSERT_TRUE(record.metrics.has_value());
    EXPECT_NE(record.metrics->max_abs_at.find(t.worst_at), std::string::npos) << record.metrics->max_abs_at;
    EXPECT_EQ(record.metrics->max_abs_at.rfind(to_string(t.role), 0), 0u) << record.metrics->max_abs_at;
    ASSERT_NE(record.role(to_string(t.role)), nullptr);
    EXPECT_FALSE(record.role(to_string(t.role))->passed);
  }
}

}  // namespace
}  // namespace attn

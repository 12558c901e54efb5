// The run API (verification/run.hpp, properties/run_properties.hpp): observers see the run in
// order (started, each record, each case finished once all its implementations are recorded,
// finished), the idle implementations are the ones that ran nothing, and a single-case properties
// run replays while it holds and skips a stopped implementation.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "properties/run_properties.hpp"
#include "tests/mutants/mutants.hpp"
#include "verification/run.hpp"
#include "verification/verify.hpp"

namespace attn {
namespace {

Problem small_problem() {
  Problem p;
  p.batch = 1, p.h_q = p.h_kv = 2, p.n_q = 6, p.n_k = 9, p.d_k = p.d_v = 8;
  p.seed = 3;
  p.validate();
  return p;
}

// Refuses every problem: each of its records is a skip.
class RefusesEverything final : public Implementation {
 public:
  std::string name() const override { return "refuses_everything"; }
  Capabilities describe() const override {
    Capabilities c;
    c.dtypes = {DType::f32};
    declare_every_mask_and_shape(c);
    return c;
  }
  Support supports(const Problem&) const override { return Support::no("refuses everything"); }
  std::size_t workspace_bytes(const Problem&) const override { return 0; }
  void run(const RunArgs&) const override { throw std::logic_error("never called"); }
};

struct Log final : VerifyObserver {
  std::vector<std::string> events;
  void started(const VerifyRequest& r) override { events.push_back("started " + std::to_string(r.records())); }
  void record_made(const VerifyRun& so_far, const Record& r) override {
    events.push_back("record " + r.implementation + " " + std::to_string(so_far.records.size()));
  }
  void case_finished(const VerifyRun& so_far) override { events.push_back("case " + std::to_string(so_far.records.size())); }
  void finished(const VerifyRun& run) override { events.push_back("finished " + std::to_string(run.records.size())); }
};

TEST(RunApi, VerifyObserversSeeTheRunInOrderAndIdleImplementationsAreNamed) {
  const auto control = mutants::make_correct_control();
  const RefusesEverything refuses;
  Problem second = small_problem();
  second.seed = 4;
  VerifyRequest request{{control.get(), &refuses}, {small_problem(), second}, {}};
  request.options.project = false;  // the refusal is a skip, not a projection
  Log log;
  const VerifyRun run = run_verify(request, {&log});
  const std::vector<std::string> expected{"started 4",
                                          "record mutant_control 1",
                                          "record refuses_everything 2",
                                          "case 2",
                                          "record mutant_control 3",
                                          "record refuses_everything 4",
                                          "case 4",
                                          "finished 4"};
  EXPECT_EQ(log.events, expected);
  EXPECT_EQ(run.passed(), 2);
  EXPECT_EQ(run.skipped(), 2);
  EXPECT_EQ(idle_implementations(run, request.implementations), std::vector<std::string>{"refuses_everything"});
}

struct Verdicts final : PropertiesObserver {
  std::vector<std::string> events;
  void property_started(const Property& p) override { events.push_back("property " + std::to_string(p.number)); }
  void not_run(const Property& p, const Implementation& impl, const std::string& why) override {
    events.push_back("not run " + std::to_string(p.number) + " " + impl.name() + ": " + why);
  }
  void verdict_made(const PropertyVerdict& v, const Property&, const Implementation& impl) override {
    events.push_back("verdict " + std::to_string(v.property) + " " + impl.name() + " " + (v.kind == PropertyVerdict::Kind::held ? "held" : "other"));
  }
};

// validate's replay: one case several times under one number computes its inputs and reference
// once; the same problem under another number is a case of its own.
TEST(RunApi, AReplayedCaseComputesItsReferenceOnce) {
  const auto control = mutants::make_correct_control();
  const Problem p = parse_problem("b=1 hq=2 hkv=1 nq=9 nk=7 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=5");
  VerifyOptions options;
  options.diagnosis.enabled = false;
  options.case_numbers = {0, 0, 0};
  const VerifyRun replay = verify({control.get()}, {p, p, p}, options);
  ASSERT_EQ(replay.records.size(), 3u);
  EXPECT_EQ(replay.cases.size(), 1u);
  EXPECT_EQ(replay.passed(), 3);
  options.case_numbers = {0, 1, 2};
  EXPECT_EQ(verify({control.get()}, {p, p, p}, options).cases.size(), 3u);

  // A wrong implementation's replay is diagnosed at its first failure; the repeats say so.
  const auto wrong = mutants::make_mutant(MistakeId::scale_one);
  options.diagnosis.enabled = true;
  options.case_numbers = {0, 0, 0};
  const VerifyRun failing = verify({wrong.get()}, {p, p, p}, options);
  ASSERT_EQ(failing.records.size(), 3u);
  EXPECT_EQ(failing.failed(), 3);
  EXPECT_TRUE(failing.records[0].diagnosis.ran);
  EXPECT_TRUE(failing.records[0].diagnosis_skipped.empty());
  for (int k : {1, 2}) {
    EXPECT_FALSE(failing.records[k].diagnosis.ran);
    EXPECT_EQ(failing.records[k].diagnosis_skipped, "not diagnosed: a run of the same case failed before and was diagnosed");
  }
}

TEST(RunApi, PropertiesOnOneCaseReplayAndSkipAStoppedImplementation) {
  const auto control = mutants::make_correct_control();
  const auto swaps = mutants::make_mutant(mutants::Mistake::nondeterministic);
  PropertiesRequest request;
  request.implementations = {control.get(), swaps.get()};
  request.properties = properties_numbered({10, 12}, "--property");
  request.single_case = small_problem();
  // A racy implementation may pass one check by luck of its run number; the later rounds on the same
  // instance are how a replay catches it.
  request.rounds = 8;
  request.stopped = [&](const Implementation& impl) { return impl.name() == "mutant_control" ? std::string("stopped here") : std::string(); };
  Verdicts log;
  const PropertiesOutcome outcome = run_properties(request, {&log});
  const std::vector<std::string> expected{"property 10", "not run 10 mutant_control: stopped here", "verdict 10 mutant_nondeterministic other",
                                          "property 12", "not run 12 mutant_control: stopped here", "verdict 12 mutant_nondeterministic other"};
  EXPECT_EQ(log.events, expected);
  EXPECT_EQ(outcome.failed, 2);
  EXPECT_EQ(outcome.verdicts.size(), 2u);
}

TEST(RunApi, APropertyNumberOutsideTheSuiteIsBadInputNamingTheOption) {
  try {
    properties_numbered({1, 99}, "--properties");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--properties 99: there are properties 1 to"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attn

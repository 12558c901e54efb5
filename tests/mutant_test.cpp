// Deliberately wrong variants, registered privately in this test, must fail verify, and the
// correct cpu_naive must pass the same cases: the oracle distinguishes right from wrong.
//   mutant_scale_1_over_dk      scale 1/d_k instead of 1/sqrt(d_k)       (the acceptance item)
//   mutant_forgets_causal       ignores the causal part of the mask
//   mutant_leaves_one_unwritten never writes the last output element
//   mutant_throws_once          throws on one case, is correct elsewhere
#include <algorithm>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/case_sets.hpp"
#include "core/inputs.hpp"
#include "impls/cpu_naive/cpu_naive.hpp"
#include "impls/registry.hpp"
#include "verification/verify.hpp"

namespace attn {
namespace {

// A variant of the naive algorithm: `body` runs in place of it. Whether it declares that it
// returns the LSE decides whether verify checks the LSE too.
class Variant final : public Implementation {
 public:
  Variant(std::string name, bool returns_lse, std::function<void(const RunArgs&)> body)
      : name_(std::move(name)), returns_lse_(returns_lse), body_(std::move(body)) {}
  std::string name() const override { return name_; }
  Capabilities describe() const override {
    Capabilities c;
    c.summary = "a deliberately wrong variant of cpu_naive (test only)";
    c.dtypes = {DType::f64, DType::f32, DType::f16, DType::bf16};
    declare_every_mask_and_shape(c);
    c.returns_lse = returns_lse_;
    return c;
  }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem& p) const override { return naive_workspace_bytes(p); }
  void run(const RunArgs& args) const override { body_(args); }

 private:
  std::string name_;
  bool returns_lse_;
  std::function<void(const RunArgs&)> body_;
};

const char* const scale_mutant = "mutant_scale_1_over_dk";
const char* const scale_lse_mutant = "mutant_scale_1_over_dk_with_lse";
const char* const causal_mutant = "mutant_forgets_causal";
const char* const unwritten_mutant = "mutant_leaves_one_unwritten";
const char* const throwing_mutant = "mutant_throws_once";

// quick_cases() and a handful of default cases: diffuse and peaked, causal both ways, GQA, MQA,
// a sparse boolean mask with fully masked rows, decode-like padding.
std::vector<Problem> mutant_cases() {
  std::vector<Problem> cases = quick_cases();
  const std::vector<Problem> all = default_cases();
  // default_cases() holds 4 dtypes per scenario: index scenario * 4 + dtype (f64, f32, f16, bf16).
  const std::pair<int, int> picks[] = {{2, 1}, {3, 2}, {7, 0}, {11, 3}, {12, 1}, {20, 2}, {23, 1}};
  for (auto [scenario, dtype] : picks) cases.push_back(all.at(std::size_t(scenario * 4 + dtype)));
  return cases;
}

// The case the throwing mutant refuses.
constexpr std::size_t throwing_case = 5;

struct Shared {
  std::vector<Problem> cases;
  Registry registry;
  VerifyRun run;
  int callbacks = 0;
};

std::unique_ptr<Shared> build() {
  auto owner = std::make_unique<Shared>();
  Shared* s = owner.get();
  {
    s->cases = mutant_cases();
    register_cpu_naive(s->registry);
    auto scale_1_over_dk = [](const RunArgs& a) {
      Problem wrong = a.problem;
      wrong.scale = 1.0 / double(wrong.d_k);
      naive_attention(RunArgs{wrong, a.inputs, a.tensors, a.workspace});
    };
    // Without an LSE only the output can give it away; with one, the LSE shows the scale too.
    s->registry.add(std::make_unique<Variant>(scale_mutant, false, scale_1_over_dk));
    s->registry.add(std::make_unique<Variant>(scale_lse_mutant, true, scale_1_over_dk));
    s->registry.add(std::make_unique<Variant>(causal_mutant, false, [](const RunArgs& a) {
      Problem wrong = a.problem;
      wrong.window = Window::of(Causal::none);
      // The mask is materialised from the problem: rebuild it without causality (the boolean
      // mask and bias come from the same seed, so only causality changes).
      const CaseInputs in{a.inputs.q, a.inputs.k, a.inputs.v, Mask(wrong)};
      const RoleTensors& t = a.tensors;
      naive_attention(RunArgs{wrong, in, RoleTensors::forward(in, t.required_output(Role::o), t.output(Role::lse), t.output(Role::weights)), a.workspace});
    }));
    s->registry.add(std::make_unique<Variant>(unwritten_mutant, true, [](const RunArgs& a) {
      naive_attention(a);
      Tensor& out = a.tensors.required_output(Role::o);
      out.set_bits(out.numel() - 1, poison_bits(out.dtype()));
    }));
    const Problem refused = s->cases.at(throwing_case);
    s->registry.add(std::make_unique<Variant>(throwing_mutant, true, [refused](const RunArgs& a) {
      if (a.problem == refused) throw std::runtime_error("deliberate failure for this case");
      naive_attention(a);
    }));
    VerifyOptions options;
    options.diagnosis.enabled = false;  // verdicts are what this tests; tests/diagnosis_test.cpp tests the diagnosis
    s->run = verify(s->registry.all(), s->cases, options,
                    [s](const VerifyRun&, const Record&) { ++s->callbacks; });
  }
  return owner;
}

// One verify run, shared by every test below (the reference is the expensive part).
Shared& shared() {
  static const std::unique_ptr<Shared> instance = build();
  return *instance;
}

std::vector<const Record*> records_of(const std::string& implementation) {
  std::vector<const Record*> out;
  for (const Record& r : shared().run.records)
    if (r.implementation == implementation) out.push_back(&r);
  return out;
}

bool has_reason(const Record& r, const std::string& needle) {
  return std::any_of(r.verdict.reasons.begin(), r.verdict.reasons.end(),
                     [&](const std::string& reason) { return reason.find(needle) != std::string::npos; });
}

// The output's own failure line (not the LSE's, which also contains "max abs error").
bool output_error_reason(const Record& r) {
  return std::any_of(r.verdict.reasons.begin(), r.verdict.reasons.end(),
                     [](const std::string& reason) { return reason.rfind("max abs error", 0) == 0; });
}

std::string describe(const Record& r) {
  std::string s = std::string(to_string(r.status)) + " " + r.context->problem.repro();
  for (const auto& reason : r.verdict.reasons) s += "\n    " + reason;
  return s;
}

TEST(Mutants, AreRegisteredOnlyInTheTestsOwnRegistry) {
  Registry builtin;
  register_builtin_implementations(builtin);
  for (const char* name : {scale_mutant, scale_lse_mutant, causal_mutant, unwritten_mutant, throwing_mutant}) {
    EXPECT_EQ(builtin.find(name), nullptr) << name;
    EXPECT_NE(shared().registry.find(name), nullptr) << name;
  }
}

TEST(Mutants, VerifyRunsEveryImplementationOnEveryCase) {
  const Shared& s = shared();
  ASSERT_EQ(s.run.cases.size(), s.cases.size());
  EXPECT_EQ(s.run.records.size(), s.cases.size() * s.registry.all().size());
  EXPECT_EQ(s.callbacks, int(s.run.records.size()));
  EXPECT_EQ(s.run.skipped(), 0);
  EXPECT_EQ(s.run.passed() + s.run.failed(), int(s.run.records.size()));
  for (const auto& ctx : s.run.cases) {
    EXPECT_TRUE(ctx->baseline_problem.empty()) << ctx->baseline_problem;
    EXPECT_LE(ctx->baseline_bound_ratio, 1.0);
  }
}

TEST(Mutants, CpuNaivePassesEveryCase) {
  const auto records = records_of("cpu_naive");
  ASSERT_EQ(records.size(), shared().cases.size());
  for (const Record* r : records) EXPECT_EQ(r->status, Status::pass) << describe(*r);
}

TEST(Mutants, ScaleOneOverDkFailsVerify) {
  const auto records = records_of(scale_mutant);
  ASSERT_EQ(records.size(), shared().cases.size());
  EXPECT_GT(shared().run.failed(), 0);
  int failed = 0, sensitive = 0;
  for (const Record* r : records) {
    const Problem& p = r->context->problem;
    ASSERT_NE(p.d_k, 1);
    failed += r->status == Status::fail;
    if (r->status == Status::fail) {
      EXPECT_TRUE(output_error_reason(*r)) << describe(*r);
    }
    // A single visible key makes the output independent of the scale.
    if (p.n_k == 1) {
      EXPECT_EQ(r->status, Status::pass) << describe(*r);
      EXPECT_EQ(r->metrics.max_abs, 0.0) << describe(*r);
      continue;
    }
    // With unit-variance or peaked scores, a 4x to 8x smaller scale moves every softmax weight;
    // so it does with saturated (gap 24 -> 6 or 3), small-integer and uniform scores. Only scores
    // so far apart that either scale gives a one-hot softmax (the large regime) may hide it.
    if (p.regime == Regime::diffuse || p.regime == Regime::peaked) ++sensitive;
    if (p.regime != Regime::large) {
      EXPECT_EQ(r->status, Status::fail) << describe(*r);
    }
  }
  EXPECT_GE(sensitive, 10);
  EXPECT_GE(failed * 3, int(records.size()) * 2) << failed << " of " << records.size();
}

TEST(Mutants, ScaleOneOverDkWithAnLseFailsEveryCase) {
  // Even where the output cannot show the wrong scale (one key), the LSE (the scaled score) does.
  const auto records = records_of(scale_lse_mutant);
  ASSERT_EQ(records.size(), shared().cases.size());
  for (const Record* r : records) {
    EXPECT_EQ(r->status, Status::fail) << describe(*r);
    EXPECT_TRUE(has_reason(*r, "LSE max abs error")) << describe(*r);
    if (r->context->problem.n_k == 1) {
      EXPECT_FALSE(output_error_reason(*r)) << describe(*r);
    }
  }
}

TEST(Mutants, ForgettingTheCausalMaskFailsCausalCasesOnly) {
  const auto records = records_of(causal_mutant);
  ASSERT_EQ(records.size(), shared().cases.size());
  int causal_cases = 0;
  for (const Record* r : records) {
    const Problem& p = r->context->problem;
    if (p.window.is_none()) {
      EXPECT_EQ(r->status, Status::pass) << describe(*r);
    } else if (p.n_q >= 2) {
      ++causal_cases;
      EXPECT_EQ(r->status, Status::fail) << describe(*r);
    }
  }
  EXPECT_GE(causal_cases, 10);
}

TEST(Mutants, AnUnwrittenElementFailsEveryCase) {
  const auto records = records_of(unwritten_mutant);
  ASSERT_EQ(records.size(), shared().cases.size());
  for (const Record* r : records) {
    EXPECT_EQ(r->status, Status::fail) << describe(*r);
    EXPECT_EQ(r->metrics.unwritten, 1) << describe(*r);
    EXPECT_TRUE(has_reason(*r, "1 output elements never written")) << describe(*r);
  }
}

TEST(Mutants, AThrowingRunFailsThatCaseAndTheRunContinues) {
  const auto records = records_of(throwing_mutant);
  ASSERT_EQ(records.size(), shared().cases.size());
  for (const Record* r : records) {
    if (r->context->index == throwing_case) {
      EXPECT_EQ(r->status, Status::fail);
      EXPECT_TRUE(has_reason(*r, "run failed: deliberate failure for this case")) << describe(*r);
    } else {
      EXPECT_EQ(r->status, Status::pass) << describe(*r);
    }
  }
  // The case after the throw was verified for every implementation, cpu_naive included.
  const auto naive = records_of("cpu_naive");
  EXPECT_EQ(naive.at(throwing_case + 1)->status, Status::pass);
}

}  // namespace
}  // namespace attn

// The property suite (properties/property_suite.hpp) against every registered implementation
// and the float128 reference: one test per property, each running it on every implementation
// it applies to. A failure prints the shrunk counterexample's repro string, the command that
// reruns it and the seed. Then the suite against implementations that declare less than the
// built-ins (a narrow third-party kernel, the plainest published one, one that leaks NaN from
// masked rows): every property that can apply runs its full count, the others say what they
// need, and a leak is a finding unless declared impossible.
// Cases per (property, implementation): ATTN_PROPERTY_CASES (default 100, RapidCheck's own default); seed:
// ATTN_PROPERTY_SEED (default fixed; 0: fresh, printed); ATTN_PROPERTY_LARGE=1 for the slow sweep.
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "impls/capability_space.hpp"
#include "impls/cpu_naive/cpu_naive.hpp"
#include "impls/registry.hpp"
#include "properties/property_suite.hpp"
#include "properties/reference_implementation.hpp"

namespace attn {
namespace {

int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  return text && *text ? std::atoi(text) : fallback;
}

class PropertySuite : public ::testing::TestWithParam<int> {};

TEST_P(PropertySuite, HoldsForEveryRegisteredImplementation) {
  Registry registry;
  register_builtin_implementations(registry);
  const Property& property = property_suite().at(std::size_t(GetParam() - 1));
  PropertyOptions options;
  options.cases = env_int("ATTN_PROPERTY_CASES", 100);
  // A fixed seed by default, so that CI is deterministic; ATTN_PROPERTY_SEED=0 draws a fresh one
  // (printed), as `attnbench properties` does.
  options.seed = std::uint64_t(std::strtoull(std::getenv("ATTN_PROPERTY_SEED") ? std::getenv("ATTN_PROPERTY_SEED") : "20261121", nullptr, 10));
  options.large = env_int("ATTN_PROPERTY_LARGE", 0) != 0;
  std::printf("property %d: %s\n", property.number, property.name.c_str());
  // The reference too, on fewer cases (float128 is slow), and not against itself (12).
  const auto reference = make_reference_implementation();
  std::vector<const Implementation*> targets = registry.all();
  if (property.number != 12) targets.push_back(reference.get());
  for (const Implementation* impl : targets) {
    PropertyOptions these = options;
    if (impl == reference.get()) these.cases = std::max(1, options.cases / 10);
    const PropertyVerdict v = check_property(property, *impl, these);
    switch (v.kind) {
      case PropertyVerdict::Kind::held:
        std::printf("  %-16s held on %d cases (seed %llu)\n", impl->name().c_str(), v.cases, (unsigned long long)v.seed);
        break;
      case PropertyVerdict::Kind::not_applicable:
        std::printf("  %-16s n/a: %s\n", impl->name().c_str(), v.message.c_str());
        break;
      case PropertyVerdict::Kind::finding:
        std::printf("  %-16s finding (not a failure): %s\n", impl->name().c_str(), v.message.c_str());
        break;
      case PropertyVerdict::Kind::gave_up:
        // Not a failure of the implementation, but the built-ins declare everything they
        // support: a property that gives up on them draws badly.
        ADD_FAILURE() << impl->name() << ": RapidCheck gave up after " << v.cases << " cases: " << v.message << " (seed " << v.seed << ")";
        break;
      case PropertyVerdict::Kind::failed:
        ADD_FAILURE() << describe_failure(v);
        break;
    }
  }
}

// The generator's reach: every draw is a valid problem within the work budget, and a few
// thousand draws cover every mask kind, regime, dtype, the edge lengths and GQA shapes.
TEST(ProblemGenerator, DrawsValidProblemsThatCoverTheSpace) {
  const ProblemSpace space;
  const auto gen = gen_problem(space);
  std::set<std::string> seen;
  for (int draw = 0; draw < 3000; ++draw) {
    const Problem p = gen(rc::Random(std::uint64_t(draw) + 1), 100).value();
    ASSERT_NO_THROW(p.validate()) << p.repro();
    ASSERT_EQ(parse_problem(p.repro()), p) << p.repro();
    ASSERT_LE(double(p.batch * p.h_q) * double(p.n_q) * double(p.n_k) * double(p.d_k + p.d_v), space.max_work) << p.repro();
    seen.insert(std::string("dtype ") + std::string(to_string(p.dtype)));
    seen.insert(std::string("causal ") + std::string(to_string(p.window)));
    seen.insert(std::string("regime ") + std::string(to_string(p.regime)));
    if (p.padding.kind == KeyPadding::Kind::per_batch) seen.insert("pad");
    if (p.padding.kind == KeyPadding::Kind::per_batch && p.batch > 1) seen.insert("pad b>1");
    if (p.scale && *p.scale != 1.0) seen.insert("custom scale");
    if (p.scale && *p.scale == 1.0) seen.insert("scale 1");
    seen.insert(std::string("layout ") + std::string(to_string(p.layout)));
    if (p.padding.kind == KeyPadding::Kind::per_query) seen.insert("padq");
    if (p.bool_mask.enabled) seen.insert("bool");
    if (p.bias.enabled) seen.insert("bias");
    if (p.bool_mask.enabled && p.bias.enabled && !p.window.is_none()) seen.insert("causal+bool+bias");
    if (p.n_q < p.n_k) seen.insert("nq<nk");
    if (p.n_q > p.n_k) seen.insert("nq>nk");
    if (p.d_k != p.d_v) seen.insert("dk!=dv");
    if (p.h_kv < p.h_q && p.h_kv > 1) seen.insert("gqa");
    if (p.h_kv == 1 && p.h_q > 1) seen.insert("mqa");
    for (std::int64_t n : {p.n_q, p.n_k})
      for (std::int64_t edge : {1, 2, 97, 383, 384, 385, 511, 512, 513, 1013})
        if (n == edge) seen.insert("n=" + std::to_string(edge));
  }
  for (const char* want : {"dtype f64", "dtype f32", "dtype f16", "dtype bf16", "causal none", "causal top_left", "causal bottom_right",
                           "regime diffuse", "regime peaked", "regime saturated", "regime large", "regime sparse_int",
                           "regime uniform01", "pad", "pad b>1", "custom scale", "scale 1", "layout bhsd", "layout bshd", "layout strided", "padq", "bool", "bias", "causal+bool+bias", "nq<nk", "nq>nk", "dk!=dv",
                           "gqa", "mqa", "n=1", "n=2", "n=97", "n=383", "n=384", "n=385", "n=511", "n=512", "n=513", "n=1013"})
    EXPECT_TRUE(seen.count(want)) << "3000 draws never gave " << want;
}

// ---------------------------------------------------------------------------------------------
// Narrow implementations: what real third-party kernels declare. Each wraps cpu_naive (correct)
// and declares less; the suite must draw from what they declare, run every property that can
// apply for its full count, and say which capability each other property needs.

class DeclaredSubset : public Implementation {
 public:
  DeclaredSubset(std::string name, Capabilities caps, std::function<Support(const Problem&)> supports)
      : name_(std::move(name)), caps_(std::move(caps)), supports_(std::move(supports)) {}
  std::string name() const override { return name_; }
  Capabilities describe() const override { return caps_; }
  Support supports(const Problem& p) const override {
    if (const Support s = covers(caps_, p); !s.ok) return s;
    return supports_(p);
  }
  std::size_t workspace_bytes(const Problem& p) const override { return naive_workspace_bytes(p); }
  void run(const RunArgs& args) const override {
    if (!supports(args.problem).ok) throw std::runtime_error("run on a problem it does not support: " + args.problem.repro());
    naive_attention(args);
  }

 private:
  std::string name_;
  Capabilities caps_;
  std::function<Support(const Problem&)> supports_;
};

// f32 only, BHSD, causal both alignments, key padding per batch, GQA, d_k != d_v; no bias, no
// boolean mask, no per-query padding, no LSE, no weights.
std::unique_ptr<Implementation> make_narrow() {
  Capabilities c;
  c.summary = "cpu_naive declaring what a typical narrow third-party kernel does";
  c.dtypes = {DType::f32};
  c.layouts = {Layout::bhsd};
  c.masks = MaskSupport{true, true, true, false, false, false};
  c.gqa = true;
  c.different_dk_dv = true;
  return std::make_unique<DeclaredSubset>("narrow_f32_causal_padded", c, [](const Problem&) { return Support::yes(); });
}

// The plainest real kernel: f32, BHSD, MHA, no mask at all, d_k = d_v <= 256, and its supports()
// refuses n_q != n_k (such problems run as their projection).
std::unique_ptr<Implementation> make_plain() {
  Capabilities c;
  c.summary = "cpu_naive declaring what the plainest published kernel does";
  c.dtypes = {DType::f32};
  c.layouts = {Layout::bhsd};
  c.masks = MaskSupport{false, false, false, false, false, false};
  c.gqa = false;
  c.different_dk_dv = false;
  c.max_head_dim = 256;
  return std::make_unique<DeclaredSubset>("plain_f32_mha", c, [](const Problem& p) {
    return p.n_q == p.n_k ? Support::yes() : Support::no("n_q != n_k");
  });
}

PropertyOptions fixed_options(int cases) {
  PropertyOptions o;
  o.cases = cases;
  o.seed = 20261125;
  return o;
}

TEST(NarrowImplementations, EveryApplicablePropertyRunsItsFullCount) {
  const auto narrow = make_narrow();
  const PropertyOptions options = fixed_options(env_int("ATTN_PROPERTY_CASES", 100));
  int applicable = 0;
  for (const Property& property : property_suite()) {
    const PropertyVerdict v = check_property(property, *narrow, options);
    std::printf("  %2d %-10s %3d cases: %s\n", property.number, std::string(v.kind == PropertyVerdict::Kind::held ? "held" : v.kind == PropertyVerdict::Kind::not_applicable ? "n/a" : "other").c_str(),
                v.cases, v.message.c_str());
    if (v.kind == PropertyVerdict::Kind::not_applicable) {
      EXPECT_NE(v.message.find("needs"), std::string::npos) << property.number << ": n/a must name what is missing: " << v.message;
      continue;
    }
    ++applicable;
    EXPECT_EQ(v.kind, PropertyVerdict::Kind::held) << property.number << ": " << v.message << "\n" << describe_failure(v);
    EXPECT_EQ(v.cases, options.cases) << property.number;
  }
  // Only property 1 (weights), 16 (soft-capping, which it does not list), 17 (windows), 18 (a
  // bias), 19 (sinks), 20 (dropout) and the backward's seven (21 to 27: it has none) need what it
  // lacks; 8 (GQA), 7 (causal), 2, 11, 13 (masks) apply.
  EXPECT_EQ(applicable, int(property_suite().size()) - 13);
}

TEST(NarrowImplementations, ThePlainestKernelHasAtLeastEightProperties) {
  const auto plain = make_plain();
  const PropertyOptions options = fixed_options(env_int("ATTN_PROPERTY_CASES", 100));
  int applicable = 0, projected = 0;
  for (const Property& property : property_suite()) {
    const PropertyVerdict v = check_property(property, *plain, options);
    std::printf("  %2d %s: %d cases (%d projected) %s\n", property.number, property.name.c_str(), v.cases, v.projected, v.message.c_str());
    if (v.kind == PropertyVerdict::Kind::not_applicable) {
      EXPECT_NE(v.message.find("needs"), std::string::npos) << property.number << ": " << v.message;
      continue;
    }
    ++applicable;
    projected += v.projected;
    EXPECT_EQ(v.kind, PropertyVerdict::Kind::held) << property.number << ": " << v.message << "\n" << describe_failure(v);
    EXPECT_EQ(v.cases, options.cases) << property.number;
  }
  EXPECT_GE(applicable, 8);
  EXPECT_GT(projected, 0) << "problems with n_q != n_k should have run as their projection";
  EXPECT_EQ(check_property(property_suite()[1], *plain, options).message, "needs a mask (declares none)");
  EXPECT_EQ(check_property(property_suite()[7], *plain, options).message, "needs GQA (declares MHA only)");
  EXPECT_EQ(check_property(property_suite()[0], *plain, options).message, "needs returns_weights (returns no weights)");
}

// Computes P V over every key, masked ones included with weight 0, as many tiled kernels do:
// correct for finite inputs, but 0 * NaN = NaN carries a masked key's NaN into the output.
class ZeroTimesMaskedValues final : public Implementation {
 public:
  explicit ZeroTimesMaskedValues(bool declares_safe) : declares_safe_(declares_safe) {}
  std::string name() const override { return declares_safe_ ? "zero_times_masked_v_declared_safe" : "zero_times_masked_v"; }
  Capabilities describe() const override {
    Capabilities c;
    c.dtypes = {DType::f32};
    c.masks = MaskSupport{true, true, true, false, false, false};
    c.gqa = true;
    c.different_dk_dv = true;
    c.masked_nonfinite_safe = declares_safe_;
    return c;
  }
  Support supports(const Problem& p) const override { return covers(describe(), p); }
  std::size_t workspace_bytes(const Problem& p) const override { return naive_workspace_bytes(p); }
  void run(const RunArgs& a) const override {
    const Problem& p = a.problem;
    Tensor weights = make_weights(p), out = make_output(p);
    naive_attention(RunArgs{p, a.inputs, RoleTensors::forward(a.inputs, out, nullptr, &weights), a.workspace});
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.h_q; ++h)
        for (std::int64_t i = 0; i < p.n_q; ++i)
          for (std::int64_t c = 0; c < p.d_v; ++c) {
            float o = 0;
            for (std::int64_t j = 0; j < p.n_k; ++j)
              o += float(weights.get(((b * p.h_q + h) * p.n_q + i) * p.n_k + j)) * float(a.inputs.v.get(a.inputs.v.offset(b, p.kv_head(h), j, c)));
            a.tensors.required_output(Role::o).set(((b * p.h_q + h) * p.n_q + i) * p.d_v + c, o);
          }
  }

 private:
  bool declares_safe_;
};

TEST(MaskedNonFiniteValues, ALeakIsAFindingUnlessDeclaredSafe) {
  const Property& finite = property_suite().at(1);
  const Property& nonfinite = property_suite().at(12);
  ASSERT_EQ(nonfinite.number, 13);
  const PropertyOptions options = fixed_options(30);
  const ZeroTimesMaskedValues leaky(false), declared_safe(true);
  // Finite values in masked rows change nothing for it: 0 * finite is 0.
  EXPECT_EQ(check_property(finite, leaky, options).kind, PropertyVerdict::Kind::held);
  const PropertyVerdict finding = check_property(nonfinite, leaky, options);
  EXPECT_EQ(finding.kind, PropertyVerdict::Kind::finding) << finding.message;
  EXPECT_FALSE(is_failure(finding));
  EXPECT_NE(describe_failure(finding).find("finding"), std::string::npos);
  std::printf("%s", describe_failure(finding).c_str());
  const PropertyVerdict failure = check_property(nonfinite, declared_safe, options);
  EXPECT_EQ(failure.kind, PropertyVerdict::Kind::failed) << failure.message;
  EXPECT_TRUE(is_failure(failure));
  // cpu_naive skips masked keys: it keeps them out.
  Registry registry;
  register_builtin_implementations(registry);
  EXPECT_EQ(check_property(nonfinite, *registry.find("cpu_naive"), options).kind, PropertyVerdict::Kind::held);
}

// Dropout whose stream ignores its seed (a fixed Philox key, a seed read from the wrong argument):
// every output agrees with the reference given its keep mask, and the keep rate is right, so only
// property 20's second seed can tell.
class DropoutSeedIgnored final : public Implementation {
 public:
  std::string name() const override { return "dropout_seed_ignored"; }
  Capabilities describe() const override {
    Capabilities c;
    c.dtypes = {DType::f32, DType::f64};
    declare_every_mask_and_shape(c);
    c.score_modifications = {ScoreModification::dropout};
    return c;
  }
  Support supports(const Problem& p) const override { return covers(describe(), p); }
  std::size_t workspace_bytes(const Problem& p) const override { return naive_workspace_bytes(p); }
  void run(const RunArgs& a) const override {
    Problem fixed = a.problem;
    fixed.dropout.seed = 12345;
    naive_attention(RunArgs{fixed, a.inputs, a.tensors, a.workspace});
  }
};

TEST(Dropout, AStreamThatIgnoresItsSeedFailsPropertyTwentyAndTheBuiltinsHoldIt) {
  const Property& dropout = property_suite().at(19);
  ASSERT_EQ(dropout.number, 20);
  const PropertyOptions options = fixed_options(30);
  const DropoutSeedIgnored seedless;
  const PropertyVerdict v = check_property(dropout, seedless, options);
  EXPECT_EQ(v.kind, PropertyVerdict::Kind::failed) << v.message;
  EXPECT_NE(v.message.find("the stream ignores its seed"), std::string::npos) << v.message;
  std::printf("%s", describe_failure(v).c_str());
  Registry registry;
  register_builtin_implementations(registry);
  EXPECT_EQ(check_property(dropout, *registry.find("cpu_naive"), options).kind, PropertyVerdict::Kind::held);
  // What does not list dropout is not asked, and says so.
  const PropertyVerdict unlisted = check_property(dropout, ZeroTimesMaskedValues(false), options);
  EXPECT_EQ(unlisted.kind, PropertyVerdict::Kind::not_applicable);
  EXPECT_NE(unlisted.message.find("needs dropout"), std::string::npos) << unlisted.message;
}

// Gave up is its own outcome: an implementation that accepts too few of the problems drawn (and
// none of their projections) is neither passed nor failed, and the message says why.
TEST(NarrowImplementations, TooFewAcceptedProblemsGiveUpWithAReason) {
  Capabilities c;
  c.dtypes = {DType::f32};
  declare_every_mask_and_shape(c);
  const DeclaredSubset single_key("single_key_only", c, [](const Problem& p) {
    return p.n_k == 1 ? Support::yes() : Support::no("only n_k = 1");
  });
  const PropertyVerdict v = check_property(property_suite().at(4), single_key, fixed_options(40));
  ASSERT_EQ(v.kind, PropertyVerdict::Kind::gave_up) << v.message;
  EXPECT_FALSE(is_failure(v));
  EXPECT_GT(v.cases, 0);
  EXPECT_LT(v.cases, 40);
  EXPECT_NE(v.message.find("only n_k = 1"), std::string::npos) << v.message;
  std::printf("  gave up after %d of 40 cases: %s\n", v.cases, v.message.c_str());
}

// cpu_naive that "times out" (throws, and counts it as a plugin's worker does) on every problem
// with more than 8 keys; calls after the first timeout are counted.
class TimesOutOnLongRows final : public Implementation {
 public:
  explicit TimesOutOnLongRows(bool reports_timeouts) : reports_timeouts_(reports_timeouts) {
    register_cpu_naive(registry_);
    naive_ = registry_.find("cpu_naive");
  }
  std::string name() const override { return "times_out_on_long_rows"; }
  Capabilities describe() const override { return naive_->describe(); }
  Support supports(const Problem& p) const override { return naive_->supports(p); }
  std::size_t workspace_bytes(const Problem& p) const override { return naive_->workspace_bytes(p); }
  void run(const RunArgs& args) const override {
    if (timeouts_ > 0) ++calls_after_timeout_;
    if (args.problem.n_k > 8) {
      ++timeouts_;
      throw std::runtime_error("timed out after 1 s in run()");
    }
    naive_->run(args);
  }
  int timed_out_calls() const override { return reports_timeouts_ ? timeouts_ : 0; }
  int calls_after_timeout() const { return calls_after_timeout_; }

 private:
  Registry registry_;
  const Implementation* naive_ = nullptr;
  bool reports_timeouts_;
  mutable int timeouts_ = 0, calls_after_timeout_ = 0;
};

// A call that timed out is never made again, neither while shrinking nor to confirm the
// counterexample: each would cost a whole timeout. The control (the same failures not reported as
// timeouts) shows that shrinking would otherwise run more problems.
TEST(TimedOutCalls, AreNeverRunAgainWhileShrinking) {
  const Property& property = property_suite().at(11);  // 12: agreement with the reference, applies to anything
  const TimesOutOnLongRows hangs(true), control(false);
  const PropertyVerdict v = check_property(property, hangs, fixed_options(40));
  ASSERT_EQ(v.kind, PropertyVerdict::Kind::failed) << v.message;
  EXPECT_NE(v.message.find("timed out after 1 s"), std::string::npos) << v.message;
  EXPECT_EQ(hangs.timed_out_calls(), 1);
  EXPECT_EQ(hangs.calls_after_timeout(), 0);
  const PropertyVerdict c = check_property(property, control, fixed_options(40));
  ASSERT_EQ(c.kind, PropertyVerdict::Kind::failed) << c.message;
  EXPECT_GT(control.calls_after_timeout(), 0);
  std::printf("  after the first timeout: %d call(s); a failure that is not a timeout: %d (shrinking and confirming)\n",
              hangs.calls_after_timeout(), control.calls_after_timeout());
}

// RapidCheck's size is 0 until a case passes; the generator must not depend on it.
TEST(ProblemGenerator, DrawsDoNotDependOnRapidChecksSize) {
  const auto gen = gen_problem(ProblemSpace{});
  int padded = 0, plain = 0;
  std::set<std::int64_t> lengths;
  for (int draw = 0; draw < 400; ++draw) {
    const Problem p = gen(rc::Random(std::uint64_t(draw) + 1), 0).value();
    padded += p.padding.kind != KeyPadding::Kind::none;
    plain += !p.has_mask();
    lengths.insert(p.n_k);
  }
  EXPECT_GT(padded, 40);
  EXPECT_LT(padded, 300);
  EXPECT_GT(plain, 40);
  EXPECT_GT(lengths.size(), 20u);
}

INSTANTIATE_TEST_SUITE_P(Properties, PropertySuite, ::testing::Range(1, int(property_suite().size()) + 1),
                         [](const ::testing::TestParamInfo<int>& info) { return "property_" + std::to_string(info.param); });

}  // namespace
}  // namespace attn

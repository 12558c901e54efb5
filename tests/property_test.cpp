// The property suite (properties/property_suite.hpp) against every registered implementation
// and the float128 reference: one test per property, each running it on every implementation
// it applies to. A failure
// prints the shrunk counterexample's repro string, the command that reruns it and the seed.
// Cases per (property, implementation): ATTN_PROPERTY_CASES (default 100, RapidCheck's own default); seed:
// ATTN_PROPERTY_SEED (default fixed; 0: fresh, printed); ATTN_PROPERTY_LARGE=1 for the slow sweep.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <set>
#include <vector>
#include <string>

#include <gtest/gtest.h>

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
      case PropertyVerdict::Kind::gave_up:
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
    seen.insert(std::string("causal ") + std::string(to_string(p.causal)));
    seen.insert(std::string("regime ") + std::string(to_string(p.regime)));
    if (p.padding.kind == KeyPadding::Kind::per_batch) seen.insert("pad");
    if (p.padding.kind == KeyPadding::Kind::per_query) seen.insert("padq");
    if (p.bool_mask.enabled) seen.insert("bool");
    if (p.bias.enabled) seen.insert("bias");
    if (p.bool_mask.enabled && p.bias.enabled && p.causal != Causal::none) seen.insert("causal+bool+bias");
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
                           "regime uniform01", "pad", "padq", "bool", "bias", "causal+bool+bias", "nq<nk", "nq>nk", "dk!=dv",
                           "gqa", "mqa", "n=1", "n=2", "n=97", "n=383", "n=384", "n=385", "n=511", "n=512", "n=513", "n=1013"})
    EXPECT_TRUE(seen.count(want)) << "3000 draws never gave " << want;
}

INSTANTIATE_TEST_SUITE_P(Properties, PropertySuite, ::testing::Range(1, 13),
                         [](const ::testing::TestParamInfo<int>& info) { return "property_" + std::to_string(info.param); });

}  // namespace
}  // namespace attn

// The property suite (properties/property_suite.hpp) against every registered implementation
// and the float128 reference: one test per property, each running it on every implementation
// it applies to. A failure
// prints the shrunk counterexample's repro string, the command that reruns it and the seed.
// Cases per (property, implementation): ATTN_PROPERTY_CASES (default 100, RapidCheck's own default); seed:
// ATTN_PROPERTY_SEED (default: fresh, printed); ATTN_PROPERTY_LARGE=1 for the slow sweep.
#include <algorithm>
#include <cstdlib>
#include <memory>
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
  options.seed = std::uint64_t(std::strtoull(std::getenv("ATTN_PROPERTY_SEED") ? std::getenv("ATTN_PROPERTY_SEED") : "0", nullptr, 10));
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
        std::printf("  %-12s held on %d cases (seed %llu)\n", impl->name().c_str(), v.cases, (unsigned long long)v.seed);
        break;
      case PropertyVerdict::Kind::not_applicable:
        std::printf("  %-12s n/a: %s\n", impl->name().c_str(), v.message.c_str());
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

INSTANTIATE_TEST_SUITE_P(Properties, PropertySuite, ::testing::Range(1, 13),
                         [](const ::testing::TestParamInfo<int>& info) { return "property_" + std::to_string(info.param); });

}  // namespace
}  // namespace attn

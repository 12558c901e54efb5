#include "properties/run_properties.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {

std::vector<const Property*> properties_numbered(const std::vector<int>& numbers, const char* option) {
  const auto& suite = property_suite();
  std::vector<const Property*> chosen;
  for (int number : numbers) {
    if (number < 1 || number > int(suite.size()))
      throw InputError(fmt::format("{} {}: there are properties 1 to {}", option, number, suite.size()));
    chosen.push_back(&suite[std::size_t(number - 1)]);
  }
  return chosen;
}

PropertiesOutcome run_properties(const PropertiesRequest& request, const std::vector<PropertiesObserver*>& observers) {
  std::vector<const Property*> properties = request.properties;
  if (properties.empty())
    for (const Property& property : property_suite()) properties.push_back(&property);
  PropertiesOutcome outcome;
  for (const Property* property : properties) {
    for (PropertiesObserver* o : observers) o->property_started(*property);
    for (const Implementation* impl : request.implementations) {
      if (request.stopped) {
        if (const std::string why = request.stopped(*impl); !why.empty()) {
          for (PropertiesObserver* o : observers) o->not_run(*property, *impl, why);
          continue;
        }
      }
      PropertyVerdict v = request.single_case ? check_property_on(*property, *impl, *request.single_case)
                                              : check_property(*property, *impl, request.options);
      for (int round = 1; request.single_case && round < request.rounds && v.kind == PropertyVerdict::Kind::held; ++round)
        v = check_property_on(*property, *impl, *request.single_case);
      using Kind = PropertyVerdict::Kind;
      outcome.cases += v.cases;
      outcome.failed += v.kind == Kind::failed;
      outcome.findings += v.kind == Kind::finding;
      outcome.gave_up += v.kind == Kind::gave_up;
      for (PropertiesObserver* o : observers) o->verdict_made(v, *property, *impl);
      outcome.verdicts.push_back(std::move(v));
    }
  }
  for (PropertiesObserver* o : observers) o->finished(outcome);
  return outcome;
}

}  // namespace attn

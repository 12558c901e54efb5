#include "reports/properties_report.hpp"

#include "reports/results.hpp"

namespace attn {

std::string_view to_string(PropertyVerdict::Kind kind) {
  switch (kind) {
    case PropertyVerdict::Kind::held: return "held";
    case PropertyVerdict::Kind::failed: return "failed";
    case PropertyVerdict::Kind::finding: return "finding";
    case PropertyVerdict::Kind::not_applicable: return "not_applicable";
    case PropertyVerdict::Kind::gave_up: return "gave_up";
  }
  return "unknown";
}

void PropertiesJson::add(const PropertyVerdict& v, const Property& property, const Implementation& implementation) {
  PropertyRecord r{property.number, property.name, std::string(implementation.name()), std::string(to_string(v.kind)), v.cases, v.projected,
                   v.discarded, v.seed, v.message, v.repro, ""};
  if (!v.repro.empty())
    r.rerun = "attnbench properties --impl " + r.implementation + " --property " + std::to_string(property.number) + " --case '" + v.repro + "'";
  records.push_back(std::move(r));
}

nlohmann::json PropertiesJson::to_json() const {
  int held = 0, failed = 0, finding = 0, gave_up = 0, not_applicable = 0;
  nlohmann::json written = nlohmann::json::array();
  for (const auto& r : records) {
    written.push_back(attn::to_json(r));
    const std::string& v = r.verdict;
    held += v == "held", failed += v == "failed", finding += v == "finding", gave_up += v == "gave_up", not_applicable += v == "not_applicable";
  }
  nlohmann::json opts{{"cases", options.cases}, {"seed", options.seed}, {"large", options.large}};
  if (!single_case.empty()) opts["case"] = single_case;
  return {{"schema", schema_properties},
          {"schema_version", result_schema_version},
          {"context", context},
          {"options", opts},
          {"complete", complete},
          {"summary", {{"held", held}, {"failed", failed}, {"finding", finding}, {"gave_up", gave_up}, {"not_applicable", not_applicable}}},
          {"records", std::move(written)}};
}

}  // namespace attn

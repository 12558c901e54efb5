#pragma once
// The property summary as JSON (schema "attnbench.properties", version 1): the context, the
// options (cases, seed, large, or the single --case problem), and one record per (property,
// implementation) with its verdict, written by `attnbench properties --json PATH` after each.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "properties/property_suite.hpp"
#include "records/properties_record.hpp"

namespace attn {

struct PropertiesJson {
  PropertiesJson(const PropertyOptions& options, nlohmann::json context) : options(options), context(std::move(context)) {}
  PropertyOptions options;
  nlohmann::json context;
  std::string single_case;  // --case REPRO, when given
  bool complete = false;    // every chosen (property, implementation) was checked
  std::vector<PropertyRecord> records;

  void add(const PropertyVerdict& verdict, const Property& property, const Implementation& implementation);
  nlohmann::json to_json() const;
};

std::string_view to_string(PropertyVerdict::Kind kind);  // held, failed, finding, not_applicable, gave_up

}  // namespace attn

#include "records/result_schema.hpp"

#include <cmath>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {

std::string recognise_schema(const nlohmann::json& doc, const std::string& source) {
  if (!doc.is_object()) throw InputError(fmt::format("{}: not an attnbench result (the top level is not a JSON object)", source));
  std::string schema;
  if (const auto it = doc.find("schema"); it != doc.end()) {
    if (!it->is_string()) throw InputError(fmt::format("{}: 'schema' is not a string", source));
    schema = it->get<std::string>();
    for (const std::string_view known : {schema_verify, schema_bench, schema_properties, schema_peers, schema_gate_baseline,
                                         schema_gate_config, schema_cases})
      if (schema == known) goto known;
    throw InputError(fmt::format("{}: unknown schema '{}' (attnbench reads {}, {}, {}, {})", source, schema, schema_verify, schema_bench,
                                 schema_properties, schema_peers));
  known:;
  } else if (doc.contains("benchmarks") && (doc.contains("context") || doc.contains("attnbench"))) {
    schema = schema_bench;  // Google Benchmark JSON written before the top-level schema field
  } else if (doc.contains("results") && doc.contains("peers")) {
    schema = schema_peers;  // a peers script's JSON written before the schema field
  } else {
    throw InputError(fmt::format("{}: not an attnbench result (no 'schema' field; expected one of {}, {}, {}, {})", source, schema_verify,
                                 schema_bench, schema_properties, schema_peers));
  }
  if (const auto v = doc.find("schema_version"); v != doc.end()) {
    if (!v->is_number_integer()) throw InputError(fmt::format("{}: 'schema_version' is not an integer", source));
    const auto version = v->get<std::int64_t>();
    if (version > result_schema_version)
      throw InputError(fmt::format("{}: {} schema_version {} is newer than this attnbench reads ({})", source, schema, version, result_schema_version));
    if (version < 1) throw InputError(fmt::format("{}: {} schema_version {} is not a version (1 or more)", source, schema, version));
  }
  return schema;
}

std::string text_or_empty(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string{};
}

nlohmann::json figure_json(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

}  // namespace attn

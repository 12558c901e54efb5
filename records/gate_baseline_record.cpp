#include "records/gate_baseline_record.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"
#include "records/result_schema.hpp"

namespace attn {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& source, const std::string& what) { throw InputError(fmt::format("{}: {}", source, what)); }

const json& member(const json& object, const char* key, const std::string& source, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) bad(source, fmt::format("{}: missing \"{}\"", where, key));
  return *it;
}

std::string string_member(const json& object, const char* key, const std::string& source, const std::string& where) {
  const json& v = member(object, key, source, where);
  if (!v.is_string()) bad(source, fmt::format("{}: \"{}\" is not a string", where, key));
  return v.get<std::string>();
}

// An error written as a number, or as "inf" (also "nan", as verify files spell it): infinitely bad.
double figure(const json& v, const std::string& source, const std::string& where) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (s == "nan" || s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  bad(source, fmt::format("{}: not a number: {}", where, v.dump()));
}

std::size_t source_index(const json& record, std::size_t sources, const std::string& source, const std::string& where) {
  const json& index = member(record, "source", source, where);
  if (!index.is_number_unsigned() || index.get<std::size_t>() >= sources) bad(source, where + ": \"source\" is not an index into \"sources\"");
  return index.get<std::size_t>();
}

const json& array_member(const json& document, const char* key, const std::string& source) {
  const json& v = member(document, key, source, "gate baseline");
  if (!v.is_array()) bad(source, fmt::format("\"{}\" is not an array", key));
  return v;
}

}  // namespace

json to_json(const GateBaseline& baseline) {
  json sources = json::array();
  for (const BaselineSource& s : baseline.sources) {
    json context = json::object();
    for (const auto& [k, v] : s.context) context[k] = v;
    sources.push_back({{"file", s.file}, {"context", context}});
  }
  json accuracy = json::array();
  for (const BaselineAccuracy& c : baseline.accuracy) {
    json r{{"implementation", c.implementation}, {"repro", c.repro}, {"label", c.label}, {"status", c.status}, {"source", c.source}};
    if (c.status == "skip") {
      r["skip_reason"] = c.skip_reason;
    } else {
      r["max_ulps"] = figure_json(c.max_ulps);
      r["max_abs"] = figure_json(c.max_abs);
    }
    accuracy.push_back(std::move(r));
  }
  json speed = json::array();
  for (const BaselineSpeed& c : baseline.speed) {
    json r{{"name", c.name}, {"samples_ms", c.samples_ms}, {"cpu_samples_ms", c.cpu_samples_ms}, {"source", c.source}};
    if (c.error) r["error"] = *c.error;
    speed.push_back(std::move(r));
  }
  return {{"schema", schema_gate_baseline},      {"schema_version", gate_baseline_schema_version},
          {"written_by", "attnbench gate --write-baseline"}, {"sources", sources},
          {"accuracy", accuracy},                 {"speed", speed}};
}

GateBaseline read_gate_baseline(const json& document, const std::string& source) {
  const json& version = member(document, "schema_version", source, "gate baseline");
  if (!version.is_number_integer() || version.get<int>() != gate_baseline_schema_version)
    bad(source, fmt::format("gate baseline schema_version {} is not {}", version.dump(), gate_baseline_schema_version));
  GateBaseline baseline;
  for (const json& origin : array_member(document, "sources", source)) {
    BaselineSource s;
    s.file = origin.is_object() ? origin.value("file", std::string("?")) : std::string("?");
    if (const auto c = origin.find("context"); origin.is_object() && c != origin.end() && c->is_object())
      for (auto it = c->begin(); it != c->end(); ++it) s.context[it.key()] = it->is_string() ? it->get<std::string>() : it->dump();
    baseline.sources.push_back(std::move(s));
  }
  const json& accuracy = array_member(document, "accuracy", source);
  for (std::size_t i = 0; i < accuracy.size(); ++i) {
    const json& r = accuracy[i];
    const std::string where = fmt::format("accuracy[{}]", i);
    BaselineAccuracy c;
    c.implementation = string_member(r, "implementation", source, where);
    c.repro = string_member(r, "repro", source, where);
    c.label = r.value("label", c.repro);
    c.status = string_member(r, "status", source, where);
    if (c.status != "pass" && c.status != "fail" && c.status != "skip")
      bad(source, fmt::format("{}: unknown status '{}' (pass, fail, skip)", where, c.status));
    if (c.status != "skip") {
      c.max_ulps = figure(member(r, "max_ulps", source, where), source, where + ".max_ulps");
      c.max_abs = figure(member(r, "max_abs", source, where), source, where + ".max_abs");
    }
    c.skip_reason = r.value("skip_reason", std::string());
    c.source = source_index(r, baseline.sources.size(), source, where);
    baseline.accuracy.push_back(std::move(c));
  }
  const json& speed = array_member(document, "speed", source);
  for (std::size_t i = 0; i < speed.size(); ++i) {
    const json& r = speed[i];
    const std::string where = fmt::format("speed[{}]", i);
    BaselineSpeed c;
    c.name = string_member(r, "name", source, where);
    for (const auto& [key, samples] : {std::pair{"samples_ms", &c.samples_ms}, std::pair{"cpu_samples_ms", &c.cpu_samples_ms}}) {
      const json& values = member(r, key, source, where);
      if (!values.is_array()) bad(source, fmt::format("{}: \"{}\" is not an array", where, key));
      for (const auto& v : values) {
        if (!v.is_number()) bad(source, fmt::format("{}: \"{}\" holds a non-number", where, key));
        samples->push_back(v.get<double>());
      }
    }
    if (r.contains("error") && r["error"].is_string()) c.error = r["error"].get<std::string>();
    c.source = source_index(r, baseline.sources.size(), source, where);
    baseline.speed.push_back(std::move(c));
  }
  return baseline;
}

}  // namespace attn

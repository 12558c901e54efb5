// Reading results into the gate (gate.hpp): verify files, bench files (records/bench_record.hpp)
// and gate baselines, merged; and writing the baseline.
#include "reports/gate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/error.hpp"
#include "records/bench_record.hpp"
#include "records/result_schema.hpp"
#include "records/verify_record.hpp"

namespace attn::gate {
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

// A figure the verify writer stores as a number or as "nan"/"inf"/"-inf".
double figure(const json& v, const std::string& source, const std::string& where) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (s == "nan" || s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  bad(source, fmt::format("{}: not a number: {}", where, v.dump()));
}

std::map<std::string, std::string> machine_of(const json& document) {
  std::map<std::string, std::string> m;
  const auto it = document.find("context");
  if (it == document.end() || !it->is_object()) return m;
  for (auto c = it->begin(); c != it->end(); ++c) m[c.key()] = c->is_string() ? c->get<std::string>() : c->dump();
  return m;
}

void add_accuracy(Results& results, AccuracyCase c, const std::string& source) {
  const std::string key = c.implementation + " " + c.repro;
  const auto [it, inserted] = results.accuracy.emplace(key, c);
  if (!inserted)
    throw InputError(fmt::format("case '{}' of {} appears twice: in {} and in {}", c.repro, c.implementation, it->second.source, source));
}

void add_verify(Results& results, const json& document, const std::string& source) {
  const json& records = member(document, "records", source, "verify results");
  if (!records.is_array()) bad(source, "\"records\" is not an array");
  for (std::size_t i = 0; i < records.size(); ++i) {
    const VerifyRecord r = read_verify_record(records[i], i, source);
    AccuracyCase c;
    c.implementation = r.implementation;
    c.repro = r.repro;
    c.label = r.label;
    c.status = r.status;
    c.source = source;
    c.skip_reason = r.skip_reason;
    if (r.measured()) {
      // A NaN or infinite error is infinitely bad.
      c.max_ulps = std::isfinite(r.max_ulps()) ? r.max_ulps() : std::numeric_limits<double>::infinity();
      c.max_abs = std::isfinite(r.max_abs()) ? r.max_abs() : std::numeric_limits<double>::infinity();
      c.reasons = r.reasons;
    }
    add_accuracy(results, std::move(c), source);
  }
}

void add_bench(Results& results, const json& document, const std::string& source) {
  const BenchDocument bench = read_bench_document(document, source);
  const auto machine = machine_of(document);
  std::map<std::string, SpeedCase> here;
  for (const BenchRun& run : bench.runs) {
    if (!run.is_iteration()) continue;  // mean, median, BigO, ...
    SpeedCase& c = here[run.case_name()];
    c.name = run.case_name();
    c.source = source;
    c.machine = machine;
    if (run.error) {
      c.error = *run.error;
      continue;
    }
    for (const auto& [key, ms] : {std::pair{"real_time", run.real_time_ms()}, std::pair{"cpu_time", run.cpu_time_ms()}})
      if (!std::isfinite(ms)) bad(source, fmt::format("benchmark '{}': \"{}\" is missing or not a number", run.name, key));
    c.samples_ms.push_back(run.real_time_ms());
    c.cpu_samples_ms.push_back(run.cpu_time_ms());
  }
  for (auto& [name, c] : here) {
    const auto [it, inserted] = results.speed.emplace(name, c);
    if (!inserted) throw InputError(fmt::format("benchmark '{}' appears twice: in {} and in {}", name, it->second.source, source));
  }
}

void add_baseline(Results& results, const json& document, const std::string& source) {
  const json& version = member(document, "schema_version", source, "gate baseline");
  if (!version.is_number_integer() || version.get<int>() != baseline_schema_version)
    bad(source, fmt::format("gate baseline schema_version {} is not {}", version.dump(), baseline_schema_version));
  const json& sources = member(document, "sources", source, "gate baseline");
  if (!sources.is_array()) bad(source, "\"sources\" is not an array");
  auto source_of = [&](const json& record, const std::string& where) {
    const json& index = member(record, "source", source, where);
    if (!index.is_number_unsigned() || index.get<std::size_t>() >= sources.size())
      bad(source, where + ": \"source\" is not an index into \"sources\"");
    const json& origin = sources[index.get<std::size_t>()];
    const std::string name = fmt::format("{} ({})", source, origin.value("file", "?"));
    results.contexts[name] = machine_of(origin);
    return std::pair{name, &origin};
  };
  const json& accuracy = member(document, "accuracy", source, "gate baseline");
  if (!accuracy.is_array()) bad(source, "\"accuracy\" is not an array");
  for (std::size_t i = 0; i < accuracy.size(); ++i) {
    const json& r = accuracy[i];
    const std::string where = fmt::format("accuracy[{}]", i);
    AccuracyCase c;
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
    c.source = source_of(r, where).first;
    add_accuracy(results, std::move(c), source);
  }
  const json& speed = member(document, "speed", source, "gate baseline");
  if (!speed.is_array()) bad(source, "\"speed\" is not an array");
  for (std::size_t i = 0; i < speed.size(); ++i) {
    const json& r = speed[i];
    const std::string where = fmt::format("speed[{}]", i);
    SpeedCase c;
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
    const auto [name, origin] = source_of(r, where);
    c.source = name;
    c.machine = machine_of(*origin);
    const auto [it, inserted] = results.speed.emplace(c.name, c);
    if (!inserted) throw InputError(fmt::format("benchmark '{}' appears twice: in {} and in {}", c.name, it->second.source, source));
  }
}


}  // namespace

std::string document_schema(const json& document, const std::string& source) { return recognise_schema(document, source); }

void add_results(Results& results, const json& document, const std::string& source) {
  try {
    add_results_unguarded(results, document, source);
  } catch (const json::exception& e) {  // a field of an unexpected type
    throw InputError(fmt::format("{}: unexpected content: {}", source, e.what()));
  }
}

void add_results_unguarded(Results& results, const json& document, const std::string& source) {
  const std::string schema = document_schema(document, source);
  if (schema == "attnbench.verify") {
    add_verify(results, document, source);
    results.contexts[source] = machine_of(document);
  } else if (schema == "attnbench.bench") {
    add_bench(results, document, source);
    results.contexts[source] = machine_of(document);
    if (const auto a = document.find("attnbench");
        a != document.end() && a->is_object() && a->contains("complete") && (*a)["complete"].is_boolean() && !(*a)["complete"].get<bool>())
      results.notes.push_back(fmt::format("{}: the bench run did not finish (\"complete\": false); benchmarks it did not reach are missing", source));
  } else if (schema == baseline_schema) {
    add_baseline(results, document, source);
  } else {
    bad(source, fmt::format("schema '{}' has nothing the gate reads (give verify and bench results)", schema));
  }
  results.sources.push_back(source);
}

json baseline_json(const Results& results) {
  json sources = json::array();
  std::map<std::string, std::size_t> index;
  auto source_index = [&](const std::string& file) {
    const auto it = index.find(file);
    if (it != index.end()) return it->second;
    json context = json::object();
    if (const auto c = results.contexts.find(file); c != results.contexts.end())
      for (const auto& [k, v] : c->second) context[k] = v;
    sources.push_back({{"file", file}, {"context", context}});
    return index[file] = sources.size() - 1;
  };
  json accuracy = json::array();
  for (const auto& [key, c] : results.accuracy) {
    json r{{"implementation", c.implementation}, {"repro", c.repro}, {"label", c.label}, {"status", c.status},
           {"source", source_index(c.source)}};
    if (c.status == "skip") {
      r["skip_reason"] = c.skip_reason;
    } else {
      r["max_ulps"] = std::isfinite(c.max_ulps) ? json(c.max_ulps) : json("inf");
      r["max_abs"] = std::isfinite(c.max_abs) ? json(c.max_abs) : json("inf");
    }
    accuracy.push_back(std::move(r));
  }
  json speed = json::array();
  for (const auto& [name, c] : results.speed) {
    json r{{"name", c.name}, {"samples_ms", c.samples_ms}, {"cpu_samples_ms", c.cpu_samples_ms}, {"source", source_index(c.source)}};
    if (c.error) r["error"] = *c.error;
    speed.push_back(std::move(r));
  }
  return {{"schema", baseline_schema}, {"schema_version", baseline_schema_version},
          {"written_by", "attnbench gate --write-baseline"}, {"sources", sources},
          {"accuracy", accuracy}, {"speed", speed}};
}


}  // namespace attn::gate

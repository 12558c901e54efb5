// Reading results into the gate (gate.hpp): verify files, bench files (records/bench_record.hpp)
// and gate baselines (records/gate_baseline_record.hpp), merged; and writing the baseline.
#include "reports/gate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/error.hpp"
#include "records/bench_record.hpp"
#include "records/gate_baseline_record.hpp"
#include "records/result_schema.hpp"
#include "records/verify_record.hpp"

namespace attn::gate {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& source, const std::string& what) { throw InputError(fmt::format("{}: {}", source, what)); }

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
  const auto found = document.find("records");
  if (found == document.end()) bad(source, "verify results: missing \"records\"");
  const json& records = *found;
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
  const GateBaseline baseline = read_gate_baseline(document, source);
  // Each record's source is named after the baseline and the file it came from.
  std::vector<std::string> names;
  for (const BaselineSource& origin : baseline.sources) {
    names.push_back(fmt::format("{} ({})", source, origin.file));
    results.contexts[names.back()] = origin.context;
  }
  for (const BaselineAccuracy& r : baseline.accuracy) {
    AccuracyCase c;
    c.implementation = r.implementation;
    c.repro = r.repro;
    c.label = r.label;
    c.status = r.status;
    c.max_ulps = r.max_ulps;
    c.max_abs = r.max_abs;
    c.skip_reason = r.skip_reason;
    c.source = names[r.source];
    add_accuracy(results, std::move(c), source);
  }
  for (const BaselineSpeed& r : baseline.speed) {
    SpeedCase c;
    c.name = r.name;
    c.samples_ms = r.samples_ms;
    c.cpu_samples_ms = r.cpu_samples_ms;
    c.error = r.error;
    c.source = names[r.source];
    c.machine = baseline.sources[r.source].context;
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
  // "complete": false marks a file saved while its run went on (verify at the top level, bench in its "attnbench" section).
  auto unfinished = [](const json& holder) {
    return holder.is_object() && holder.contains("complete") && holder["complete"].is_boolean() && !holder["complete"].get<bool>();
  };
  if (schema == "attnbench.verify") {
    add_verify(results, document, source);
    results.contexts[source] = machine_of(document);
    if (unfinished(document)) {
      results.incomplete.push_back(source);
      results.notes.push_back(fmt::format("{}: the verify run did not finish (\"complete\": false); cases it did not reach are missing", source));
    }
  } else if (schema == "attnbench.bench") {
    add_bench(results, document, source);
    results.contexts[source] = machine_of(document);
    if (const auto a = document.find("attnbench"); a != document.end() && unfinished(*a)) {
      results.incomplete.push_back(source);
      results.notes.push_back(fmt::format("{}: the bench run did not finish (\"complete\": false); benchmarks it did not reach are missing", source));
    }
  } else if (schema == baseline_schema) {
    add_baseline(results, document, source);
  } else {
    bad(source, fmt::format("schema '{}' has nothing the gate reads (give verify and bench results)", schema));
  }
  results.sources.push_back(source);
}

json baseline_json(const Results& results) {
  GateBaseline baseline;
  std::map<std::string, std::size_t> index;
  auto source_index = [&](const std::string& file) {
    if (const auto it = index.find(file); it != index.end()) return it->second;
    BaselineSource origin{file, {}};
    if (const auto c = results.contexts.find(file); c != results.contexts.end()) origin.context = c->second;
    baseline.sources.push_back(std::move(origin));
    return index[file] = baseline.sources.size() - 1;
  };
  for (const auto& [key, c] : results.accuracy)
    baseline.accuracy.push_back({c.implementation, c.repro, c.label, c.status, c.status == "skip" ? c.skip_reason : std::string(), c.max_ulps,
                                 c.max_abs, source_index(c.source)});
  for (const auto& [name, c] : results.speed) baseline.speed.push_back({c.name, c.samples_ms, c.cpu_samples_ms, c.error, source_index(c.source)});
  return to_json(baseline);
}

}  // namespace attn::gate

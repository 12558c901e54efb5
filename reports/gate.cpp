#include "reports/gate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/error.hpp"
#include "records/bench_record.hpp"
#include "reports/mann_whitney.hpp"

namespace attn::gate {
namespace {

using nlohmann::json;

// Reads one JSON object of the config, refusing keys it was not asked about (a typo must not
// silently disable gating). "comment" is allowed everywhere.
class ObjectReader {
 public:
  ObjectReader(const json& object, std::string path, std::string source) : object_(object), path_(std::move(path)), source_(std::move(source)) {
    if (!object_.is_object()) fail(path_, "must be an object");
  }
  const json* get(const std::string& key) {
    known_.insert(key);
    const auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  bool boolean(const std::string& key, bool fallback) {
    const json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail(at(key), "must be true or false");
    return v->get<bool>();
  }
  double number(const std::string& key, double fallback, double min, double max) {
    const json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) fail(at(key), "must be a number");
    const double x = v->get<double>();
    if (!(x >= min && x <= max)) fail(at(key), fmt::format("{} is out of range [{}, {}]", x, min, max));
    return x;
  }
  std::string string(const std::string& key, const std::string& fallback, const std::vector<std::string>& allowed = {}) {
    const json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) fail(at(key), "must be a string");
    const auto s = v->get<std::string>();
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), s) == allowed.end())
      fail(at(key), fmt::format("'{}' is not one of: {}", s, fmt::join(allowed, ", ")));
    return s;
  }
  std::vector<std::string> strings(const std::string& key, std::vector<std::string> fallback) {
    const json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_array()) fail(at(key), "must be an array of strings");
    std::vector<std::string> out;
    for (const auto& e : *v) {
      if (!e.is_string()) fail(at(key), "must be an array of strings");
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  // Call last: any key not asked about is an error.
  void finish() {
    known_.insert("comment");
    for (auto it = object_.begin(); it != object_.end(); ++it)
      if (!known_.count(it.key())) fail(at(it.key()), "unknown key (a typo would silently change what is gated)");
  }
  std::string at(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw InputError(fmt::format("{}: config key '{}': {}", source_, where, what));
  }

 private:
  const json& object_;
  std::string path_, source_;
  std::set<std::string> known_;
};

Filter make_filter(std::vector<std::string> patterns, const std::string& where, const std::string& source) {
  Filter f;
  f.patterns = std::move(patterns);
  for (const auto& p : f.patterns) {
    try {
      f.compiled.emplace_back(p, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw InputError(fmt::format("{}: config key '{}': bad regular expression '{}': {}", source, where, p, e.what()));
    }
  }
  return f;
}

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
    const json& r = records[i];
    const std::string where = fmt::format("records[{}]", i);
    if (!r.is_object()) bad(source, where + " is not an object");
    AccuracyCase c;
    c.implementation = string_member(r, "implementation", source, where);
    c.repro = string_member(r, "repro", source, where);
    c.label = r.contains("label") && r["label"].is_string() ? r["label"].get<std::string>() : c.repro;
    c.status = string_member(r, "status", source, where);
    if (c.status != "pass" && c.status != "fail" && c.status != "skip")
      bad(source, fmt::format("{}: unknown status '{}' (pass, fail, skip)", where, c.status));
    c.source = source;
    if (c.status == "skip") {
      if (r.contains("skip_reason") && r["skip_reason"].is_string()) c.skip_reason = r["skip_reason"].get<std::string>();
    } else {
      const json& m = member(r, "metrics", source, where);
      c.max_ulps = figure(member(m, "max_ulps", source, where + ".metrics"), source, where + ".metrics.max_ulps");
      // The writer stores an unsigned 64-bit max for NaN ulps.
      if (c.max_ulps >= 1.8e19) c.max_ulps = std::numeric_limits<double>::infinity();
      c.max_abs = figure(member(m, "max_abs", source, where + ".metrics"), source, where + ".metrics.max_abs");
      if (r.contains("reasons") && r["reasons"].is_array())
        for (const auto& reason : r["reasons"])
          if (reason.is_string()) c.reasons.push_back(reason.get<std::string>());
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string format_ms(double ms) { return ms >= 100 ? fmt::format("{:.1f} ms", ms) : ms >= 1 ? fmt::format("{:.3f} ms", ms) : fmt::format("{:.4f} ms", ms); }
std::string format_change(double ratio) { return fmt::format("{:+.0f} %", (ratio - 1) * 100); }
std::string format_p(double p) { return p >= 0.001 ? fmt::format("{:.3f}", p) : fmt::format("{:.1e}", p); }
std::string format_error(double x) { return std::isfinite(x) ? fmt::format("{:.3g}", x) : "inf/nan"; }

bool implementation_gated(const AccuracyConfig& config, const std::string& implementation) {
  return config.implementations.empty() ||
         std::find(config.implementations.begin(), config.implementations.end(), implementation) != config.implementations.end();
}

std::string accuracy_name(const AccuracyCase& c) { return c.implementation + " " + c.label; }

}  // namespace

bool Filter::matches(const std::string& name) const {
  if (compiled.empty()) return true;
  return std::any_of(compiled.begin(), compiled.end(), [&](const std::regex& r) { return std::regex_search(name, r); });
}

Config parse_config(const json& document, const std::string& source) {
  try {
    return parse_config_unguarded(document, source);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: unexpected content: {}", source, e.what()));
  }
}

Config parse_config_unguarded(const json& document, const std::string& source) {
  ObjectReader top(document, "", source);
  const std::string schema = top.string("schema", "");
  if (schema != config_schema) top.fail("schema", fmt::format("must be \"{}\"", config_schema));
  if (top.number("schema_version", 0, 0, 1e9) != config_schema_version)
    top.fail("schema_version", fmt::format("must be {}", config_schema_version));
  Config config;
  if (const json* a = top.get("accuracy")) {
    ObjectReader r(*a, "accuracy", source);
    config.accuracy.enabled = r.boolean("enabled", true);
    config.accuracy.implementations = r.strings("implementations", {});
    config.accuracy.cases = make_filter(r.strings("cases", {}), "accuracy.cases", source);
    if (const json* g = r.get("error_growth"); g != nullptr && !g->is_null()) {
      ObjectReader gr(*g, "accuracy.error_growth", source);
      AccuracyConfig::ErrorGrowth growth;
      growth.metric = gr.string("metric", growth.metric, {"max_ulps", "max_abs"});
      growth.factor = gr.number("factor", growth.factor, 1, 1e12);
      growth.slack = gr.number("slack", growth.slack, 0, 1e30);
      gr.finish();
      config.accuracy.error_growth = growth;
    }
    r.finish();
  }
  if (const json* s = top.get("speed")) {
    ObjectReader r(*s, "speed", source);
    SpeedConfig& c = config.speed;
    c.enabled = r.boolean("enabled", true);
    c.benchmarks = make_filter(r.strings("benchmarks", {}), "speed.benchmarks", source);
    c.time = r.string("time", c.time, {"real_time", "cpu_time"});
    c.method = r.string("method", c.method, {"mann_whitney", "median_ratio"});
    c.alpha = r.number("alpha", c.alpha, 1e-12, 0.5);
    c.min_slowdown = r.number("min_slowdown", c.min_slowdown, 0, 100);
    c.min_repetitions = int(r.number("min_repetitions", c.min_repetitions, 2, 1e6));
    c.max_median_ratio = r.number("max_median_ratio", c.max_median_ratio, 1, 1e6);
    c.machine_keys = r.strings("machine_keys", c.machine_keys);
    c.on_machine_mismatch = r.string("on_machine_mismatch", c.on_machine_mismatch, {"skip", "compare"});
    r.finish();
  }
  top.finish();
  return config;
}

std::string document_schema(const json& document, const std::string& source) {
  if (!document.is_object()) bad(source, "not a JSON object");
  if (const auto it = document.find("schema"); it != document.end()) {
    if (!it->is_string()) bad(source, "\"schema\" is not a string");
    const auto schema = it->get<std::string>();
    static const std::set<std::string> known{"attnbench.verify", "attnbench.bench", "attnbench.properties", "attnbench.peers", baseline_schema};
    if (!known.count(schema)) bad(source, fmt::format("unknown schema '{}'", schema));
    const auto version = document.find("schema_version");
    const int readable = schema == baseline_schema ? baseline_schema_version : 1;
    if (version != document.end() && (!version->is_number_integer() || version->get<int>() > readable))
      bad(source, fmt::format("{} schema_version {} is newer than this attnbench reads ({})", schema, version->dump(), readable));
    return schema;
  }
  if (document.contains("benchmarks") && document.contains("attnbench")) return "attnbench.bench";
  bad(source, "no \"schema\" and not a bench result (\"benchmarks\" and \"attnbench\"): not an attnbench result file");
}

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

const char* to_string(Kind kind) {
  switch (kind) {
    case Kind::accuracy: return "accuracy";
    case Kind::presence: return "presence";
    case Kind::speed: return "speed";
  }
  return "?";
}

const char* to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::pass: return "PASS";
    case Verdict::fail: return "FAIL";
    case Verdict::skipped: return "SKIP";
  }
  return "?";
}

int Report::count(Kind kind, Verdict verdict) const {
  return int(std::count_if(outcomes.begin(), outcomes.end(), [&](const Outcome& o) { return o.kind == kind && o.verdict == verdict; }));
}

int Report::failures() const {
  return int(std::count_if(outcomes.begin(), outcomes.end(), [](const Outcome& o) { return o.verdict == Verdict::fail; }));
}

namespace {

void evaluate_accuracy(const AccuracyConfig& config, const Results& baseline, const Results& current, Report& report) {
  auto gated = [&](const AccuracyCase& c) { return implementation_gated(config, c.implementation) && config.cases.matches(c.repro); };
  for (const auto& [key, c] : current.accuracy) {
    if (!gated(c)) continue;
    Outcome o{Kind::accuracy, accuracy_name(c), Verdict::pass, "", c.repro};
    const auto base = baseline.accuracy.find(key);
    const AccuracyCase* b = base == baseline.accuracy.end() ? nullptr : &base->second;
    if (c.status == "skip") {
      o.verdict = Verdict::skipped;
      o.message = "unsupported: " + c.skip_reason;
    } else if (c.status == "fail") {
      o.verdict = Verdict::fail;
      o.message = fmt::format("verdict fail: {} (max abs {}, {} ulps)", c.reasons.empty() ? "no reason given" : fmt::format("{}", fmt::join(c.reasons, "; ")),
                              format_error(c.max_abs), format_error(c.max_ulps));
    } else {
      o.message = fmt::format("pass, {} ulps", format_error(c.max_ulps));
      if (config.error_growth && b != nullptr && b->status == "pass") {
        const auto& g = *config.error_growth;
        const bool ulps = g.metric == "max_ulps";
        const double now = ulps ? c.max_ulps : c.max_abs, then = ulps ? b->max_ulps : b->max_abs;
        const double limit = g.factor * then + g.slack;
        if (now > limit) {
          o.verdict = Verdict::fail;
          o.message = fmt::format("{} grew: {} vs baseline {} (limit {} x baseline + {} = {})", g.metric, format_error(now), format_error(then), g.factor,
                                  g.slack, format_error(limit));
        } else {
          o.message = fmt::format("pass, {} {} vs baseline {}", g.metric, format_error(now), format_error(then));
        }
      } else if (b == nullptr) {
        o.message += " (no baseline)";
      }
    }
    report.outcomes.push_back(std::move(o));
  }
  for (const auto& [key, b] : baseline.accuracy) {
    if (!gated(b) || b.status != "pass") continue;
    Outcome o{Kind::presence, accuracy_name(b), Verdict::pass, "present", b.repro};
    const auto it = current.accuracy.find(key);
    if (it == current.accuracy.end()) {
      o.verdict = Verdict::fail;
      o.message = "passed in the baseline, missing from the results";
    } else if (it->second.status == "skip") {
      o.verdict = Verdict::fail;
      o.message = "passed in the baseline, now unsupported: " + it->second.skip_reason;
    }
    report.outcomes.push_back(std::move(o));
  }
}

void evaluate_speed(const SpeedConfig& config, const Results& baseline, const Results& current, Report& report) {
  bool fell_back = false;
  std::set<std::string> mismatches;
  auto samples_of = [&](const SpeedCase& c) -> const std::vector<double>& { return config.time == "cpu_time" ? c.cpu_samples_ms : c.samples_ms; };
  for (const auto& [name, c] : current.speed) {
    if (!config.benchmarks.matches(name)) continue;
    Outcome o{Kind::speed, name, Verdict::pass, "", ""};
    const auto base = baseline.speed.find(name);
    if (c.error) {
      o.verdict = Verdict::fail;
      o.message = "benchmark error: " + *c.error;
    } else if (base == baseline.speed.end() || base->second.error || samples_of(base->second).empty()) {
      o.verdict = Verdict::skipped;
      o.message = "no baseline to compare with";
    } else if (samples_of(c).empty()) {
      o.verdict = Verdict::fail;
      o.message = "no timing in the results";
    } else {
      const SpeedCase& b = base->second;
      std::vector<std::string> differ;
      for (const auto& key : config.machine_keys) {
        const auto x = c.machine.find(key), y = b.machine.find(key);
        const std::string now = x == c.machine.end() ? "(absent)" : x->second, then = y == b.machine.end() ? "(absent)" : y->second;
        if (now != then) differ.push_back(fmt::format("{} '{}' vs baseline '{}'", key, now, then));
      }
      const std::vector<double>& now = samples_of(c);
      const std::vector<double>& then = samples_of(b);
      const double m_now = median(now), m_then = median(then), ratio = m_now / m_then;
      const std::string medians = fmt::format("{}median {} vs baseline {} ({})", config.time == "cpu_time" ? "CPU time " : "", format_ms(m_now),
                                              format_ms(m_then), format_change(ratio));
      if (!differ.empty()) mismatches.insert(fmt::format("{}", fmt::join(differ, ", ")));
      if (!differ.empty() && config.on_machine_mismatch == "skip") {
        o.verdict = Verdict::skipped;
        o.message = medians + "; not gated: another machine";
      } else {
        const bool enough = int(now.size()) >= config.min_repetitions && int(then.size()) >= config.min_repetitions;
        if (config.method == "mann_whitney" && enough) {
          const MannWhitney mw = mann_whitney_greater(now, then);
          const bool slower = mw.p_value < config.alpha && ratio - 1 >= config.min_slowdown;
          o.verdict = slower ? Verdict::fail : Verdict::pass;
          o.message = fmt::format("{}, Mann-Whitney p = {} ({} vs {} repetitions; fails when p < {} and the median is >= {:.0f} % slower)", medians,
                                  format_p(mw.p_value), now.size(), then.size(), config.alpha, config.min_slowdown * 100);
        } else {
          if (config.method == "mann_whitney") fell_back = true;
          o.verdict = ratio > config.max_median_ratio ? Verdict::fail : Verdict::pass;
          o.message = fmt::format("{}, median ratio {:.2f} (fails above {:.2f}{})", medians, ratio, config.max_median_ratio,
                                  config.method == "mann_whitney" ? fmt::format("; {} vs {} repetitions, fewer than {} for Mann-Whitney",
                                                                                now.size(), then.size(), config.min_repetitions)
                                                                  : "");
        }
        if (!differ.empty()) o.message += "; measured on another machine";
      }
    }
    report.outcomes.push_back(std::move(o));
  }
  for (const auto& [name, b] : baseline.speed) {
    if (!config.benchmarks.matches(name) || b.error) continue;
    Outcome o{Kind::presence, name, Verdict::pass, "present", ""};
    if (!current.speed.count(name)) {
      o.verdict = Verdict::fail;
      o.message = "ran in the baseline, missing from the results";
    }
    report.outcomes.push_back(std::move(o));
  }
  for (const auto& m : mismatches)
    report.notes.push_back(config.on_machine_mismatch == "skip"
                               ? fmt::format("speed not gated where the machine differs from the baseline's ({}): speed baselines are machine-specific", m)
                               : fmt::format("speed compared although the machine differs from the baseline's ({})", m));
  if (fell_back)
    report.notes.push_back(fmt::format("fewer than {} repetitions on one side: those cases use the median ratio threshold {:.2f} instead of Mann-Whitney",
                                       config.min_repetitions, config.max_median_ratio));
}

}  // namespace

Report evaluate(const Config& config, const Results& baseline, const Results& current) {
  Report report;
  report.notes = current.notes;
  if (config.accuracy.enabled) evaluate_accuracy(config.accuracy, baseline, current, report);
  if (config.speed.enabled) evaluate_speed(config.speed, baseline, current, report);
  std::stable_sort(report.outcomes.begin(), report.outcomes.end(), [](const Outcome& a, const Outcome& b) {
    return std::tie(a.kind, a.name) < std::tie(b.kind, b.name);
  });
  if (report.outcomes.empty()) report.notes.push_back("nothing was gated: no result matches the config's accuracy or speed selection");
  if (config.accuracy.enabled && report.count(Kind::accuracy, Verdict::pass) + report.count(Kind::accuracy, Verdict::fail) == 0)
    report.notes.push_back("no verify result was gated");
  if (config.speed.enabled && report.count(Kind::speed, Verdict::pass) + report.count(Kind::speed, Verdict::fail) == 0)
    report.notes.push_back("no benchmark was compared for speed");
  return report;
}

std::string format_outcome(const Outcome& o) {
  std::string line = fmt::format("{} {} {}: {}", to_string(o.verdict), to_string(o.kind), o.name, o.message);
  if (o.verdict == Verdict::fail && !o.repro.empty()) line += fmt::format(" [repro: {}]", o.repro);
  return line;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const unsigned char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\n': out += "&#10;"; break;
      case '\t': out += "&#9;"; break;
      case '\r': out += "&#13;"; break;
      default:
        if (ch < 0x20) out += fmt::format("&#x{:X};", 0xFFFD);  // XML 1.0 forbids other control characters
        else out += char(ch);
    }
  }
  return out;
}

std::string junit_xml(const Report& report) {
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  xml += fmt::format("<testsuites name=\"attnbench gate\" tests=\"{}\" failures=\"{}\" errors=\"0\">\n", report.outcomes.size(), report.failures());
  for (const Kind kind : {Kind::accuracy, Kind::presence, Kind::speed}) {
    int tests = 0;
    for (const auto& o : report.outcomes) tests += o.kind == kind;
    xml += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\">\n", to_string(kind), tests,
                       report.count(kind, Verdict::fail), report.count(kind, Verdict::skipped));
    for (const auto& o : report.outcomes) {
      if (o.kind != kind) continue;
      xml += fmt::format("    <testcase classname=\"attnbench.gate.{}\" name=\"{}\"", to_string(kind), xml_escape(o.name));
      switch (o.verdict) {
        case Verdict::pass:
          xml += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n", xml_escape(format_outcome(o)));
          break;
        case Verdict::fail:
          xml += fmt::format(">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>\n", xml_escape(o.message), to_string(kind),
                             xml_escape(format_outcome(o)));
          break;
        case Verdict::skipped:
          xml += fmt::format(">\n      <skipped message=\"{}\"/>\n    </testcase>\n", xml_escape(o.message));
          break;
      }
    }
    if (!report.notes.empty()) xml += fmt::format("    <system-out>{}</system-out>\n", xml_escape(fmt::format("{}", fmt::join(report.notes, "\n"))));
    xml += "  </testsuite>\n";
  }
  xml += "</testsuites>\n";
  return xml;
}

}  // namespace attn::gate

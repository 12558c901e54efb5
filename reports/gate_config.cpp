// The gate's configuration (gate.hpp): parse_config refuses unknown keys at every level.
#include "reports/gate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn::gate {

struct CompiledPatterns {
  std::vector<std::regex> expressions;
};

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

Filter make_filter(const std::vector<std::string>& patterns, const std::string& where, const std::string& source) {
  Filter f;
  if (patterns.empty()) return f;
  auto compiled = std::make_shared<CompiledPatterns>();
  for (const auto& p : patterns) {
    try {
      compiled->expressions.emplace_back(p, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw InputError(fmt::format("{}: config key '{}': bad regular expression '{}': {}", source, where, p, e.what()));
    }
  }
  f.compiled = std::move(compiled);
  return f;
}

}  // namespace

bool Filter::matches(const std::string& name) const {
  if (!compiled) return true;
  const auto& expressions = compiled->expressions;
  return std::any_of(expressions.begin(), expressions.end(), [&](const std::regex& r) { return std::regex_search(name, r); });
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


}  // namespace attn::gate

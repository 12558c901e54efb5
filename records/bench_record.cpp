#include "records/bench_record.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// Non-finite figures are written as null (strict JSON has no NaN or Infinity).
ordered_json figure(double x) { return std::isfinite(x) ? ordered_json(x) : ordered_json(nullptr); }

double to_ms(double t, const std::string& unit) {
  if (unit == "ns") return t / 1e6;
  if (unit == "us") return t / 1e3;
  if (unit == "s") return t * 1e3;
  return t;  // ms
}

// Reads fields of one JSON object, naming the source and the object in every complaint.
class Fields {
 public:
  Fields(const json& object, std::string where, const std::string& source) : object_(object), where_(std::move(where)), source_(source) {
    if (!object_.is_object()) fail("is not an object");
  }
  bool has(const char* key) const { return object_.contains(key) && !object_[key].is_null(); }
  std::string text(const char* key, std::string fallback = {}) const {
    if (!has(key)) return fallback;
    if (!object_[key].is_string()) fail(fmt::format("\"{}\" is not a string", key));
    return object_[key].get<std::string>();
  }
  // A number; null (a non-finite figure) reads as NaN; "nan"/"inf" strings too.
  double number(const char* key, double fallback = nan) const {
    if (!object_.contains(key)) return fallback;
    const json& v = object_[key];
    if (v.is_null()) return nan;
    if (v.is_number()) return v.get<double>();
    if (v.is_string() && (v == "nan" || v == "NaN")) return nan;
    if (v.is_string() && (v == "inf" || v == "Infinity")) return std::numeric_limits<double>::infinity();
    if (v.is_string() && (v == "-inf" || v == "-Infinity")) return -std::numeric_limits<double>::infinity();
    fail(fmt::format("\"{}\" is not a number", key));
  }
  std::int64_t integer(const char* key, std::int64_t fallback = 0) const {
    if (!has(key)) return fallback;
    if (!object_[key].is_number_integer()) fail(fmt::format("\"{}\" is not an integer", key));
    return object_[key].get<std::int64_t>();
  }
  bool boolean(const char* key, bool fallback = false) const {
    if (!has(key)) return fallback;
    if (!object_[key].is_boolean()) fail(fmt::format("\"{}\" is not true or false", key));
    return object_[key].get<bool>();
  }
  std::vector<std::string> texts(const char* key) const {
    std::vector<std::string> out;
    if (!has(key)) return out;
    if (!object_[key].is_array()) fail(fmt::format("\"{}\" is not an array", key));
    for (const auto& e : object_[key]) out.push_back(e.is_string() ? e.get<std::string>() : e.dump());
    return out;
  }
  const json& at(const char* key) const { return object_[key]; }
  [[noreturn]] void fail(const std::string& what) const { throw InputError(fmt::format("{}: {}: {}", source_, where_, what)); }

 private:
  const json& object_;
  std::string where_;
  const std::string& source_;
};

// Google Benchmark's own keys of a run; every other key is a counter.
bool is_run_key(const std::string& key) {
  static const std::vector<std::string> keys{
      "name",          "family",    "n",         "family_index", "per_family_instance_index", "run_name",      "run_type",
      "repetitions",   "repetition_index",       "threads",      "aggregate_name",            "aggregate_unit", "error_occurred",
      "error_message", "iterations", "real_time", "cpu_time",     "time_unit",                 "cpu_coefficient", "real_coefficient",
      "big_o",         "rms",       "label",     "allocs_per_iter", "max_bytes_used"};
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

BenchRun read_run(const json& j, std::size_t index, const std::string& source) {
  const Fields f(j, fmt::format("benchmarks[{}]", index), source);
  BenchRun r;
  r.name = f.text("name");
  r.run_name = f.has("run_name") ? f.text("run_name") : r.name;
  if (r.run_name.empty()) f.fail("no \"name\" or \"run_name\"");
  r.aggregate = f.text("run_type", "iteration") == "aggregate";
  r.aggregate_name = f.text("aggregate_name");
  r.aggregate_unit = f.text("aggregate_unit");
  r.family_index = f.integer("family_index");
  r.per_family_instance_index = f.integer("per_family_instance_index");
  r.repetitions = f.integer("repetitions", 1);
  r.repetition_index = f.integer("repetition_index", 0);
  r.threads = f.integer("threads", 1);
  r.iterations = f.integer("iterations", 0);
  r.time_unit = f.text("time_unit", "ns");
  if (r.time_unit != "ns" && r.time_unit != "us" && r.time_unit != "ms" && r.time_unit != "s") f.fail(fmt::format("unknown time_unit '{}'", r.time_unit));
  if (f.boolean("error_occurred")) r.error = f.text("error_message", "error");
  r.big_o = f.text("big_o");
  if (!r.big_o.empty()) {
    r.real_time = f.number("real_coefficient");
    r.cpu_time = f.number("cpu_coefficient");
  } else if (j.contains("rms")) {
    r.rms = f.number("rms");
  } else {
    r.real_time = f.number("real_time");  // NaN when absent: the gate refuses a timed run without its time
    r.cpu_time = f.number("cpu_time");
  }
  r.label = f.text("label");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!is_run_key(it.key()) && (it->is_number() || it->is_null())) r.counters[it.key()] = it->is_null() ? nan : it->get<double>();
  if (f.has("family") && f.has("n")) {
    r.family = f.text("family");
    r.n = f.integer("n");
  } else {
    // Written before runs carried "family" and "n": FAMILY/n:N/... in the run name. Complexity
    // rows have no n.
    const auto at = r.run_name.find("/n:");
    if (at == std::string::npos) {
      r.family = r.run_name;
    } else {
      r.family = r.run_name.substr(0, at);
      try {
        r.n = std::stoll(r.run_name.substr(at + 3));
      } catch (const std::exception&) {
        f.fail(fmt::format("no size in the run name '{}'", r.run_name));
      }
    }
  }
  return r;
}

BenchFit read_fit(const json& j, std::size_t index, const std::string& source) {
  const Fields f(j, fmt::format("attnbench.fits[{}]", index), source);
  BenchFit fit;
  fit.family = f.text("family");
  fit.implementation = f.text("implementation");
  fit.dtype = f.text("dtype");
  fit.mask = f.text("mask");
  if (f.has("pass")) fit.pass = f.text("pass");  // written since the backward's families: forward before
  fit.device = f.text("device");
  fit.head_dim = f.integer("head_dim");
  fit.fit_min_n = f.integer("fit_min_n");
  if (f.has("sizes_measured")) {
    if (!f.at("sizes_measured").is_array()) f.fail("\"sizes_measured\" is not an array");
    for (const auto& n : f.at("sizes_measured"))
      if (n.is_number_integer()) fit.sizes_measured.push_back(n.get<std::int64_t>());
  }
  fit.workspace_bytes_at_16384 = f.integer("workspace_bytes_at_16384");
  if (f.has("roofline_precision")) fit.roofline_precision = f.text("roofline_precision");
  auto optional = [&](const char* key) { return f.has(key) ? std::optional<double>(f.number(key)) : std::nullopt; };
  fit.exponent = optional("exponent");
  fit.r_squared = optional("r_squared");
  fit.coefficient_ms = optional("coefficient_ms");
  if (f.has("points")) fit.points = f.integer("points");
  fit.bigo_n_squared_coefficient_ms = optional("bigo_n_squared_coefficient_ms");
  fit.bigo_rms = optional("bigo_rms");
  return fit;
}

BenchSection read_section(const json& j, const std::string& source) {
  const Fields f(j, "attnbench", source);
  BenchSection s;
  if (f.has("context") && f.at("context").is_object()) s.context = f.at("context");
  s.complete = f.boolean("complete", true);
  if (f.has("peaks")) {
    const Fields p(f.at("peaks"), "attnbench.peaks", source);
    s.peaks = {p.number("fma_gflops"), p.number("sgemm_gflops"), p.number("roofline_gflops"),
               p.text("fma_method"),   p.text("sgemm_method"),   p.text("roofline_is")};
  }
  s.rss_growth_method = f.text("rss_growth_method");
  if (f.has("fits")) {
    if (!f.at("fits").is_array()) f.fail("\"fits\" is not an array");
    for (std::size_t i = 0; i < f.at("fits").size(); ++i) s.fits.push_back(read_fit(f.at("fits")[i], i, source));
  }
  s.notes = f.texts("notes");
  s.errors = f.texts("errors");
  if (f.has("gpu")) s.gpu = f.at("gpu");
  if (f.has("machine_load")) s.machine_load = f.at("machine_load");
  if (f.has("peers")) s.peers = f.at("peers");
  return s;
}

}  // namespace

double BenchRun::real_time_ms() const { return to_ms(real_time, time_unit); }
double BenchRun::cpu_time_ms() const { return to_ms(cpu_time, time_unit); }

std::string BenchRun::case_name() const {
  for (const std::string_view suffix : {"/real_time", "/manual_time"})
    if (run_name.size() > suffix.size() && run_name.ends_with(suffix)) return run_name.substr(0, run_name.size() - suffix.size());
  return run_name;
}

double BenchRun::counter(const std::string& key) const {
  const auto it = counters.find(key);
  return it == counters.end() ? nan : it->second;
}

std::vector<std::int64_t> BenchFit::sizes_used() const {
  std::vector<std::int64_t> used;
  if (!exponent) return used;
  for (const std::int64_t n : sizes_measured)
    if (n >= fit_min_n) used.push_back(n);
  return used;
}

std::vector<BenchPoint> median_points(const std::vector<BenchRun>& runs) {
  std::vector<std::string> order;
  std::map<std::string, std::map<std::int64_t, std::vector<const BenchRun*>>> iterations, medians;
  for (const BenchRun& r : runs) {
    if (r.error || r.is_complexity() || r.n == 0) continue;
    if (std::find(order.begin(), order.end(), r.family) == order.end()) order.push_back(r.family);
    if (r.is_iteration())
      iterations[r.family][r.n].push_back(&r);
    else if (r.aggregate_name == "median")
      medians[r.family][r.n].push_back(&r);
  }
  std::vector<BenchPoint> points;
  for (const std::string& family : order) {
    std::map<std::int64_t, std::vector<const BenchRun*>> sizes = iterations[family];
    for (const auto& [n, group] : medians[family])
      if (!sizes.count(n)) sizes[n] = group;  // only aggregates were reported for this n
    for (auto& [n, group] : sizes) {
      std::sort(group.begin(), group.end(), [](const BenchRun* a, const BenchRun* b) { return a->real_time_ms() < b->real_time_ms(); });
      points.push_back({family, n, group[group.size() / 2]});
    }
  }
  return points;
}

ordered_json to_json(const BenchRun& r) {
  // Google Benchmark's keys in its own order (its JSONReporter), then ours.
  ordered_json j{{"name", r.name},
                 {"family_index", r.family_index},
                 {"per_family_instance_index", r.per_family_instance_index},
                 {"run_name", r.run_name},
                 {"run_type", r.aggregate ? "aggregate" : "iteration"},
                 {"repetitions", r.repetitions}};
  if (!r.aggregate) j["repetition_index"] = r.repetition_index;
  j["threads"] = r.threads;
  if (r.aggregate) {
    j["aggregate_name"] = r.aggregate_name;
    j["aggregate_unit"] = r.aggregate_unit.empty() ? "time" : r.aggregate_unit;
  }
  if (r.error) {
    j["error_occurred"] = true;
    j["error_message"] = *r.error;
  }
  if (!r.big_o.empty()) {
    j["cpu_coefficient"] = figure(r.cpu_time);
    j["real_coefficient"] = figure(r.real_time);
    j["big_o"] = r.big_o;
    j["time_unit"] = r.time_unit;
  } else if (r.rms) {
    j["rms"] = figure(*r.rms);
  } else {
    j["iterations"] = r.iterations;
    j["real_time"] = figure(r.real_time);
    j["cpu_time"] = figure(r.cpu_time);
    j["time_unit"] = r.time_unit;
  }
  for (const auto& [key, value] : r.counters) j[key] = figure(value);
  if (!r.label.empty()) j["label"] = r.label;
  j["family"] = r.family;
  if (r.n > 0) j["n"] = r.n;
  return j;
}

namespace {

ordered_json to_json(const BenchFit& f) {
  ordered_json j{{"family", f.family},       {"implementation", f.implementation}, {"dtype", f.dtype},
                 {"head_dim", f.head_dim},   {"mask", f.mask},                     {"pass", f.pass},
                 {"device", f.device},
                 {"fit_min_n", f.fit_min_n}, {"sizes_measured", f.sizes_measured}, {"workspace_bytes_at_16384", f.workspace_bytes_at_16384}};
  if (f.roofline_precision) j["roofline_precision"] = *f.roofline_precision;
  if (f.exponent) {
    j["exponent"] = figure(*f.exponent);
    if (f.r_squared) j["r_squared"] = figure(*f.r_squared);
    if (f.coefficient_ms) j["coefficient_ms"] = figure(*f.coefficient_ms);
    if (f.points) j["points"] = *f.points;
  } else {
    j["exponent"] = nullptr;
  }
  if (f.bigo_n_squared_coefficient_ms) j["bigo_n_squared_coefficient_ms"] = figure(*f.bigo_n_squared_coefficient_ms);
  if (f.bigo_rms) j["bigo_rms"] = figure(*f.bigo_rms);
  return j;
}

ordered_json to_json(const BenchSection& s) {
  ordered_json fits = ordered_json::array();
  for (const auto& f : s.fits) fits.push_back(to_json(f));
  ordered_json j{{"schema", schema_bench},
                 {"version", result_schema_version},
                 {"context", ordered_json::parse(s.context.dump())},
                 {"complete", s.complete},
                 {"peaks",
                  {{"fma_gflops", figure(s.peaks.fma_gflops)},
                   {"fma_method", s.peaks.fma_method},
                   {"sgemm_gflops", figure(s.peaks.sgemm_gflops)},
                   {"sgemm_method", s.peaks.sgemm_method},
                   {"roofline_gflops", figure(s.peaks.roofline_gflops)},
                   {"roofline_is", s.peaks.roofline_is}}},
                 {"rss_growth_method", s.rss_growth_method},
                 {"fits", std::move(fits)},
                 {"notes", s.notes},
                 {"errors", s.errors}};
  for (const auto& [key, part] : {std::pair{"gpu", &s.gpu}, std::pair{"machine_load", &s.machine_load}, std::pair{"peers", &s.peers}})
    if (!part->is_null()) j[key] = ordered_json::parse(part->dump());
  return j;
}

}  // namespace

ordered_json to_json(const BenchDocument& d) {
  ordered_json runs = ordered_json::array();
  for (const auto& r : d.runs) runs.push_back(to_json(r));
  ordered_json j{{"context", d.benchmark_context}, {"benchmarks", std::move(runs)}, {"schema", schema_bench}, {"schema_version", result_schema_version}};
  if (d.shard) j["shard"] = {{"index", d.shard->index}, {"count", d.shard->count}};
  j["attnbench"] = to_json(d.attnbench);
  return j;
}

BenchDocument read_bench_document(const json& document, const std::string& source) {
  const Fields f(document, "the document", source);
  BenchDocument d;
  if (f.has("context") && f.at("context").is_object()) d.benchmark_context = ordered_json::parse(f.at("context").dump());
  if (!f.has("benchmarks") || !f.at("benchmarks").is_array()) throw InputError(fmt::format("{}: a bench result needs an array 'benchmarks'", source));
  const json& runs = f.at("benchmarks");
  for (std::size_t i = 0; i < runs.size(); ++i) d.runs.push_back(read_run(runs[i], i, source));
  if (f.has("attnbench") && f.at("attnbench").is_object()) d.attnbench = read_section(f.at("attnbench"), source);
  return d;
}

}  // namespace attn

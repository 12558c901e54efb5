#pragma once
// The CI gate (`attnbench gate`): compares result files (verify and bench JSON, possibly several
// shards) with a baseline under a configuration, and says per gated case whether it passes.
// Three kinds of check, each one JUnit test suite:
//   accuracy  every gated verify record: a failing verdict fails; optionally an error that grew
//             beyond factor x baseline + slack fails;
//   presence  every gated case that passed in the baseline (verify) or ran without error (bench)
//             must be in the results, and a verify case must not now be unsupported (skip);
//   speed     every gated benchmark with a baseline: a one-sided Mann-Whitney U test over the
//             repetitions (slower than the baseline at level alpha, and the median slower by at
//             least min_slowdown), or a threshold on the ratio of medians.
// Everything here works on parsed JSON, so it is unit-testable without files; the command
// (cli/gate_command.cpp) reads the files and prints. Bad input throws attn::InputError naming
// the source and the fault.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "records/result_schema.hpp"

namespace attn::gate {

inline constexpr const char* config_schema = schema_gate_config.data();
inline constexpr const char* baseline_schema = schema_gate_baseline.data();
inline constexpr int config_schema_version = 1;

// A list of ECMAScript regular expressions searched in a name; empty matches everything.
// The compiled expressions live in gate_config.cpp: <regex> in this header cost every file that
// includes it several seconds of compile time.
struct CompiledPatterns;
struct Filter {
  std::shared_ptr<const CompiledPatterns> compiled;  // null: no patterns
  bool matches(const std::string& name) const;
};

struct AccuracyConfig {
  bool enabled = true;
  std::vector<std::string> implementations;  // empty: every implementation
  Filter cases;                              // searched in the case's repro string
  struct ErrorGrowth {
    std::string metric = "max_ulps";  // max_ulps or max_abs
    double factor = 4;
    double slack = 0;
  };
  std::optional<ErrorGrowth> error_growth;  // absent or null: only the verdict gates
};

struct SpeedConfig {
  bool enabled = true;
  Filter benchmarks;                  // searched in the case name, e.g. cpu_blocked/f32/d64/causal/n:256
  std::string time = "real_time";     // real_time (wall clock; GPU: event time) or cpu_time (process CPU time)
  std::string method = "mann_whitney";  // mann_whitney or median_ratio
  double alpha = 0.01;                // Mann-Whitney: significance level of "slower"
  double min_slowdown = 0.05;         // Mann-Whitney: median slower by at least this fraction to fail
  int min_repetitions = 5;            // fewer in either sample: the median rule, with a note
  double max_median_ratio = 1.25;     // median_ratio (and the fallback): fail when new / baseline exceeds this
  std::vector<std::string> machine_keys{"cpu_model", "num_cpus", "threads"};  // context keys that must match
  std::string on_machine_mismatch = "skip";  // skip (a note; speed not gated) or compare (gate anyway, with a note)
};

struct Config {
  AccuracyConfig accuracy;
  SpeedConfig speed;
};

// Throws InputError naming `source` and the fault: an unknown key (at any level; "comment" is
// allowed everywhere), a wrong type, a bad value or regular expression, a wrong schema.
Config parse_config(const nlohmann::json& document, const std::string& source);
Config parse_config_unguarded(const nlohmann::json& document, const std::string& source);  // nlohmann's exceptions pass through

// One verify record, distilled.
struct AccuracyCase {
  std::string implementation, repro, label, status;  // status: pass, fail, skip
  std::vector<std::string> reasons;
  std::string skip_reason;
  double max_ulps = 0, max_abs = 0;  // "nan"/"inf" in the file: infinity
  std::string source;                // the file it came from
};

// One benchmark (all repetitions of one run name), distilled.
struct SpeedCase {
  std::string name;                 // run name without /real_time or /manual_time
  std::vector<double> samples_ms;   // one real (or manual) time per repetition
  std::vector<double> cpu_samples_ms;  // the same repetitions' CPU time
  std::optional<std::string> error; // error_message of a failed run
  std::string source;
  std::map<std::string, std::string> machine;  // the file's context, as strings
};

struct Results {
  std::map<std::string, AccuracyCase> accuracy;  // key: implementation + ' ' + repro
  std::map<std::string, SpeedCase> speed;        // key: name
  std::vector<std::string> sources;
  std::map<std::string, std::map<std::string, std::string>> contexts;  // per source: its context, as strings
  std::vector<std::string> notes;  // e.g. a bench file whose run did not finish ("complete": false)
  std::vector<std::string> incomplete;  // sources whose run did not finish: never a baseline
};

// The schema of a document (records/result_schema.hpp's recognise_schema, the one recogniser the
// report uses too); add_results decides what it can use. Throws InputError naming `source`.
std::string document_schema(const nlohmann::json& document, const std::string& source);

// Adds a verify, bench or gate-baseline document's cases (merging shards). A case already
// present from another file is an error naming both files. Other schemas: InputError. A bench
// file whose run did not finish (attnbench.complete false) is read, with a note.
void add_results(Results& results, const nlohmann::json& document, const std::string& source);
void add_results_unguarded(Results& results, const nlohmann::json& document, const std::string& source);  // nlohmann's exceptions pass through

// The distilled baseline of `results`: schema attnbench.gate-baseline, readable by add_results.
nlohmann::json baseline_json(const Results& results);

enum class Kind { accuracy, presence, speed };
enum class Verdict { pass, fail, skipped };
const char* to_string(Kind kind);
const char* to_string(Verdict verdict);

struct Outcome {
  Kind kind;
  std::string name;     // the case: "cpu_blocked f32 b1 h2 n17 d16 nomask diffuse" or a benchmark name
  Verdict verdict;
  std::string message;  // the reason, one line
  std::string repro;    // accuracy and presence of verify cases: the repro string
};

struct Report {
  std::vector<Outcome> outcomes;  // accuracy, then presence, then speed; each sorted by name
  std::vector<std::string> notes; // machine mismatches, fallbacks, nothing gated
  int count(Kind kind, Verdict verdict) const;
  int failures() const;
  bool failed() const { return failures() > 0; }
};

Report evaluate(const Config& config, const Results& baseline, const Results& current);

// "FAIL speed cpu_blocked/f32/d64/causal/n:256: median ...": one line, no newline.
std::string format_outcome(const Outcome& outcome);
// JUnit XML: <testsuites> with one <testsuite> per kind, one <testcase> per outcome.
std::string junit_xml(const Report& report);
std::string xml_escape(const std::string& text);

}  // namespace attn::gate

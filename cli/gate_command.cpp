#include "cli/gate_command.hpp"

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/result_file.hpp"
#include "reports/gate.hpp"
#include "reports/verify_report.hpp"

namespace attn::cli {
namespace {

void write_text(const std::string& path, const std::string& text) { write_result_file(path, text); }

}  // namespace

GateCommand::GateCommand(CLI::App& app) {
  command_ = app.add_subcommand("gate",
                                "CI gate: compare verify and bench results (several files: shards) with a baseline; exit 1 on a failing "
                                "verdict, a baseline case missing or now unsupported, or a slowdown beyond the noise");
  command_->add_option("--config", config_path_, "Gate configuration (e.g. ci/gate.json; see ci/README.md)");
  command_->add_option("--baseline", baseline_paths_,
                       "Baseline: a file written by --write-baseline, or verify/bench result files (repeatable)")
      ->allow_extra_args(false);
  command_->add_option("--junit", junit_path_, "Where to write the JUnit XML ('' to skip)")->capture_default_str();
  command_->add_option("--write-baseline", write_baseline_path_,
                       "Instead of gating, distil RESULTS into a baseline file at this path (what --baseline reads)");
  command_->add_flag("--allow-empty", allow_empty_,
                     "Pass when nothing was gated (default: a gate that gated nothing, or names an implementation no result has, fails)");
  command_->add_option("results", result_paths_, "Result files: verify JSON, bench JSON (shards are merged)")->required();
}

int GateCommand::run() const {
  gate::Results current;
  for (const auto& path : result_paths_) gate::add_results(current, read_json_file(path), path);

  if (!write_baseline_path_.empty()) {
    if (!config_path_.empty() || !baseline_paths_.empty()) throw InputError("--write-baseline takes RESULTS only (no --config, no --baseline)");
    if (!current.incomplete.empty())
      throw InputError(fmt::format("--write-baseline: {} {} of a run that did not finish (\"complete\": false): a baseline is taken from whole "
                                   "runs only (what a killed run never reached would pass as absent)",
                                   fmt::join(current.incomplete, ", "), current.incomplete.size() > 1 ? "are" : "is"));
    write_json_file(write_baseline_path_, gate::baseline_json(current));
    fmt::print("attnbench gate: wrote the baseline {}: {} verify record(s), {} benchmark(s) from {} file(s)\n", write_baseline_path_,
               current.accuracy.size(), current.speed.size(), result_paths_.size());
    return 0;
  }
  if (config_path_.empty()) throw InputError("gate: --config is required (or --write-baseline)");
  if (baseline_paths_.empty()) throw InputError("gate: --baseline is required (or --write-baseline)");
  const gate::Config config = gate::parse_config(read_json_file(config_path_), config_path_);
  gate::Results baseline;
  for (const auto& path : baseline_paths_) gate::add_results(baseline, read_json_file(path), path);

  const gate::Report report = gate::evaluate(config, baseline, current);
  for (const auto& o : report.outcomes) fmt::print("{}\n", gate::format_outcome(o));
  for (const auto& note : report.notes) fmt::print("note: {}\n", note);
  using gate::Kind;
  using gate::Verdict;
  // A gate that checked nothing is not a pass: a misspelt implementation name, or a selection that
  // matches no result, would otherwise wave every change through.
  std::vector<std::string> empty;
  for (const std::string& name : config.accuracy.implementations)
    if (std::none_of(current.accuracy.begin(), current.accuracy.end(), [&](const auto& entry) { return entry.second.implementation == name; }))
      empty.push_back(fmt::format("the config names implementation '{}', which no result holds", name));
  if (report.count(Kind::accuracy, Verdict::pass) + report.count(Kind::accuracy, Verdict::fail) + report.count(Kind::speed, Verdict::pass) +
          report.count(Kind::speed, Verdict::fail) ==
      0)
    empty.push_back("nothing was gated");
  const bool empty_fails = !empty.empty() && !allow_empty_;
  for (const auto& e : empty) fmt::print("{}: {}\n", allow_empty_ ? "note" : "FAIL", e);
  const bool failed = report.failed() || empty_fails;
  fmt::print("\nattnbench gate: {}{}\n", failed ? "FAILED" : "passed", empty_fails ? " (--allow-empty accepts a gate that gated nothing)" : "");
  for (const Kind kind : {Kind::accuracy, Kind::presence, Kind::speed})
    fmt::print("  {:<9} {} passed, {} failed, {} skipped\n", gate::to_string(kind), report.count(kind, Verdict::pass),
               report.count(kind, Verdict::fail), report.count(kind, Verdict::skipped));
  if (!junit_path_.empty()) {
    write_text(junit_path_, gate::junit_xml(report));
    fmt::print("JUnit XML: {}\n", junit_path_);
  }
  std::fflush(stdout);
  return failed ? 1 : 0;
}

}  // namespace attn::cli

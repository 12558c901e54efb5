#pragma once
// What the commands that run verify or the property suite (verify, check, validate, properties)
// print and save while a run goes on: observers of the run API (verification/run.hpp,
// properties/run_properties.hpp), one each for the console table and the results file, so the
// commands share them instead of each repeating the loop.
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "properties/run_properties.hpp"
#include "records/progress.hpp"
#include "reports/properties_report.hpp"
#include "reports/verify_report.hpp"
#include "verification/run.hpp"

namespace attn::cli {

// verify's table: the header, a row per record (with any extra lines `extra` gives), and, when
// `progress_label` is set, the progress bar (clearing it around each row).
class VerifyConsole final : public VerifyObserver {
 public:
  struct Options {
    std::optional<std::string> progress_label;  // "verify", "check"; unset: no progress shown
    bool name_implementation = true;            // the progress names the implementation beside the case
    std::function<std::string(const Record&)> extra = {};  // more lines under a row, or ""
  };
  explicit VerifyConsole(Options options) : options_(std::move(options)) {}
  void started(const VerifyRequest& request) override;
  void record_made(const VerifyRun& so_far, const Record& record) override;
  void finished(const VerifyRun& run) override;

 private:
  Options options_;
  std::optional<Progress> progress_;
};

// A verify run's results file, saved after every case and at the end, so a run that dies keeps
// what it measured. An empty path writes nothing.
class VerifyResultsFile final : public VerifyObserver {
 public:
  VerifyResultsFile(std::string path, std::function<nlohmann::json(const VerifyRun&)> to_json)
      : file_(std::move(path)), to_json_(std::move(to_json)) {}
  void case_finished(const VerifyRun& so_far) override;
  void finished(const VerifyRun& run) override;

 private:
  ResultsFile file_;
  std::function<nlohmann::json(const VerifyRun&)> to_json_;
};

// The property summary (schema attnbench.properties), saved after every verdict and, complete, at
// the end. An empty path writes nothing.
class PropertiesResultsFile final : public PropertiesObserver {
 public:
  PropertiesResultsFile(std::string path, PropertiesJson results) : file_(std::move(path)), results_(std::move(results)) {}
  void verdict_made(const PropertyVerdict& verdict, const Property& property, const Implementation& impl) override;
  void finished(const PropertiesOutcome& outcome) override;

 private:
  ResultsFile file_;
  PropertiesJson results_;
};

}  // namespace attn::cli

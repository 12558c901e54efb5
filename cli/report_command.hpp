#pragma once
// `attnbench report RESULTS... [--out DIR]`: merges result files of any kind (verify, bench,
// properties, peers; shards included) and writes DIR/report.md and DIR/report.html
// (reports/report.hpp). Registered by main.cpp.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace attn::cli {

class ReportCommand {
 public:
  explicit ReportCommand(CLI::App& app);
  bool parsed() const { return command_->parsed(); }
  // 0 when both files were written (whatever the verdicts: `attnbench gate` judges), 1 when a file
  // is of a run that did not finish ("complete": false; both are still written) unless
  // --allow-incomplete; throws
  // attn::InputError (exit 2) naming the file on a missing, malformed or foreign input, or on
  // results of different git revisions without --allow-mixed-revisions.
  int run() const;

 private:
  CLI::App* command_;
  std::vector<std::string> result_paths_;
  std::string out_dir_ = "results/report";
  bool allow_mixed_revisions_ = false;
  bool allow_incomplete_ = false;
};

}  // namespace attn::cli

#pragma once
// `attnbench gate`: the CI gate (reports/gate.hpp). Registered by main.cpp.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace attn::cli {

class GateCommand {
 public:
  explicit GateCommand(CLI::App& app);
  bool parsed() const { return command_->parsed(); }
  // 0 every gated case passed (or --write-baseline wrote the file), 1 the gate failed; throws
  // attn::InputError (exit 2) on a missing or malformed file, an unknown schema or a bad config.
  int run() const;

 private:
  CLI::App* command_;
  std::string config_path_;
  std::vector<std::string> baseline_paths_;
  std::string junit_path_ = "results/gate.junit.xml";
  std::string write_baseline_path_;
  bool allow_empty_ = false;
  std::vector<std::string> result_paths_;
};

}  // namespace attn::cli

#pragma once
// `attnbench check --cases DIR --outputs DIR2`: verifies the outputs another program wrote for a
// cases directory (`attnbench cases`) against the reference, through attn::verify, so the table,
// the JSON (--json, default results/check.json) and the exit codes are verify's. A missing or
// malformed output file fails its case and the run goes on; a missing or malformed manifest, or
// input files that are not what the repro strings generate, are bad input. A declaration
// (--declare, or the manifest's) skips what the kernel does not support instead of failing it
// (impls/file_outputs/file_outputs.hpp). Registered by main.cpp.
#include <string>

#include <CLI/CLI.hpp>

namespace attn::cli {

class CheckCommand {
 public:
  explicit CheckCommand(CLI::App& app);
  bool parsed() const { return command_->parsed(); }
  // 0 every case passed, 1 a case failed; throws attn::InputError (exit 2) on bad input.
  int run() const;

 private:
  CLI::App* command_;
  std::string cases_dir_;
  std::string outputs_dir_;
  std::string json_path_ = "results/check.json";
  double k_;
  double floor_ulps_;
  int threads_ = 0;
  bool allow_empty_ = false;
  std::string declaration_;
};

}  // namespace attn::cli

#pragma once
// `attnbench check --cases DIR --outputs DIR2`: verifies the outputs another program wrote for a
// cases directory (`attnbench cases`) against the reference, through run_verify (verification/run.hpp), so the table,
// the JSON (--json, default results/check.json) and the exit codes are verify's. A missing or
// malformed output file fails its case and the run goes on; a missing or malformed manifest, or
// input files that are not what the repro strings generate, are bad input. A declaration
// (--declare, or the manifest's) skips what the kernel does not support instead of failing it
// (impls/file_outputs/file_outputs.hpp). A backward case (`cases --backward`) is judged as verify
// --backward judges a kernel's: its dq, dk and dv files (and d_sink, d_bias where written), each
// gradient against the reference's.
// Registered by main.cpp.
//
// `attnbench check --inputs DIR [--inputs DIR2 ...] [--outputs OUT ...]`: the user's own tensors
// (core/given_case.hpp) instead of a cases directory; the reference is computed from exactly those
// tensors and the outputs are judged the same way. Any unreadable, mis-shaped or inconsistent file,
// the outputs included, is bad input (exit 2): there is no case set to go on with.
#include <string>
#include <vector>

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
  int run_given() const;

  std::string cases_dir_;
  std::vector<std::string> inputs_dirs_;
  std::vector<std::string> outputs_dirs_;
  std::string json_path_ = "results/check.json";
  double k_;
  double floor_ulps_;
  int threads_ = 0;
  bool allow_empty_ = false;
  std::string declaration_;
};

}  // namespace attn::cli

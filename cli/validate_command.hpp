#pragma once
// `attnbench validate --plugin PATH.so`: a third-party kernel behind the C ABI
// (impls/plugin/attnbench_plugin.h), loaded and called in an isolated worker process, through
// the verify cases, the property suite and optionally the benchmarks; writes DIR/verify.json,
// DIR/properties.json, DIR/bench.json (the usual schemas) and DIR/report.{md,html}.
// Registered by main.cpp.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace attn::cli {

class ValidateCommand {
 public:
  explicit ValidateCommand(CLI::App& app);
  bool parsed() const { return command_->parsed(); }
  // 0 when every supported case passed, every property held and (--bench) every benchmark ran;
  // 1 when one did not (a crash, a hang, an out-of-bounds write included); throws
  // attn::InputError (exit 2) when the plugin cannot be loaded at all or an option is bad.
  int run() const;

 private:
  CLI::App* command_;
  std::string plugin_path_;
  std::string cases_ = "default";
  std::optional<std::string> single_case_;  // given, even empty: exactly that case
  std::vector<int> properties_;
  int property_cases_ = 100;
  std::uint64_t seed_ = 0;
  bool no_shrink_ = false;
  bool bench_ = false;
  bool backward_ = false;  // verify's cases as backward passes (op=backward)
  bool masked_nonfinite_safe_ = false;
  std::vector<std::string> bench_dtypes_;
  std::int64_t bench_max_n_ = 512;
  double timeout_seconds_ = 60;
  std::string out_dir_ = "results/validate";
  bool allow_empty_ = false;
  double matmul_unit_roundoff_ = 0;
  double accumulation_unit_roundoff_ = 0;
  std::string memory_limit_;  // --plugin-memory-limit as given; empty: the default
  std::string sandbox_ = "on";  // --sandbox on|off
  // `attnbench validate --plugin P` with every option that changes a verdict: the printed rerun
  // commands start with it.
  std::string rerun_prefix() const;
};

}  // namespace attn::cli

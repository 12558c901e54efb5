#pragma once
// `attnbench verify`: the built-in implementations on a case set against the high-precision
// reference (verification/run.hpp), the table on the console and the JSON results
// (results/verify.json). Registered by main.cpp.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/pass_rule.hpp"
#include "impls/registry.hpp"

namespace attn::cli {

class VerifyCommand {
 public:
  explicit VerifyCommand(CLI::App& app);
  bool parsed() const { return command_->parsed(); }
  // 0 every supported case passed, 1 a case failed or an implementation ran no case (unless
  // --allow-empty); throws attn::InputError (exit 2) on bad input.
  int run(const Registry& registry) const;

 private:
  CLI::App* command_;
  std::vector<std::string> implementations_;
  std::string cases_ = "default";
  std::optional<std::string> single_case_;  // given, even empty: exactly that case (an empty one is refused)
  std::optional<std::uint64_t> seed_;
  std::string json_path_ = "results/verify.json";
  double k_ = PassRule{}.k;
  double floor_ulps_ = PassRule{}.floor_ulps;
  int threads_ = 0;
  std::string shard_;  // --shard I/N
  bool backward_ = false;
  bool no_diagnosis_ = false;
  bool no_projection_ = false;
  bool allow_empty_ = false;
  std::optional<double> sample_rows_above_;  // multiply-adds; unset: every row of every case
};

}  // namespace attn::cli

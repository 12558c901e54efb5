#pragma once
// `attnbench properties`: the RapidCheck property suite (properties/run_properties.hpp) on the
// built-in implementations, or every chosen property on one problem (--case, how a printed
// failure reruns); --json writes the verdicts (schema attnbench.properties). Registered by main.cpp.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "impls/registry.hpp"

namespace attn::cli {

class PropertiesCommand {
 public:
  explicit PropertiesCommand(CLI::App& app);
  bool parsed() const { return command_->parsed(); }
  // 0 every property held, or was a finding, n/a or gave up; 1 one failed; throws
  // attn::InputError (exit 2) on bad input.
  int run(const Registry& registry) const;

 private:
  CLI::App* command_;
  std::vector<std::string> implementations_;
  std::vector<int> properties_;
  int cases_ = 40;                                   // --property-cases
  std::optional<std::string> cases_given_as_count_;  // --cases, refused (it is a case set elsewhere)
  std::uint64_t seed_ = 0;
  std::optional<std::string> single_case_;
  bool large_ = false;
  std::string json_path_;  // --json: the property summary (schema attnbench.properties)
};

}  // namespace attn::cli

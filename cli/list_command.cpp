#include "cli/list_command.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace attn::cli {

ListCommand::ListCommand(CLI::App& app) { command_ = app.add_subcommand("list", "List the implementations and what each supports"); }

int ListCommand::run(const Registry& registry) const {
  for (const auto* impl : registry.all()) {
    const auto caps = impl->describe();
    std::vector<std::string> dtypes;
    for (auto d : caps.dtypes) dtypes.emplace_back(to_string(d));
    fmt::print("{}\n  {}\n  device: {}; dtypes: {}; returns LSE: {}; returns weights: {}; deterministic: {}; fully masked rows: {}\n",
               impl->name(), caps.summary, caps.device, fmt::join(dtypes, ", "), caps.returns_lse ? "yes" : "no",
               caps.returns_weights ? "yes" : "no", caps.deterministic ? "yes" : "no", to_string(caps.fully_masked));
    // Every modification there is, "no" for those it does not list: not listed is not supported.
    std::vector<std::string> modifications;
    for (ScoreModification m : all_score_modifications) {
      const bool listed = std::find(caps.score_modifications.begin(), caps.score_modifications.end(), m) != caps.score_modifications.end();
      modifications.push_back(fmt::format("{} {}", describe(m), listed ? "yes" : "no"));
    }
    fmt::print("  score modifications: {}\n", fmt::join(modifications, "; "));
  }
  return 0;
}

}  // namespace attn::cli

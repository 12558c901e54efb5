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
      modifications.push_back(fmt::format("{} {}", describe(m), lists(caps, m) ? "yes" : "no"));
    }
    fmt::print("  score modifications: {}\n", fmt::join(modifications, "; "));
    // The masks and shapes, each with yes or no: a kind it does not declare it does not support.
    const MaskSupport& m = caps.masks;
    auto yes = [](bool b) { return b ? "yes" : "no"; };
    std::vector<std::string> layouts;
    for (Layout l : caps.layouts) layouts.emplace_back(to_string(l));
    fmt::print("  masks: no mask {}; causal top-left {}; causal bottom-right {}; windows beyond causal (sliding, local) {}; key padding "
               "per batch {}; per query {}; boolean mask {}; additive bias (ALiBi included) {}\n",
               yes(m.non_causal), yes(m.causal_top_left), yes(m.causal_bottom_right), yes(m.windows), yes(m.padding_per_batch),
               yes(m.padding_per_query), yes(m.bool_mask), yes(m.bias));
    fmt::print("  shapes: GQA/MQA {}; d_k != d_v {}; head dims {}; any scale {}; layouts {}\n", yes(caps.gqa), yes(caps.different_dk_dv),
               caps.head_dims.empty() ? fmt::format("{}..{}", caps.min_head_dim, caps.max_head_dim) : fmt::format("{}", fmt::join(caps.head_dims, ", ")),
               yes(caps.custom_scale), fmt::join(layouts, ", "));
  }
  return 0;
}

}  // namespace attn::cli

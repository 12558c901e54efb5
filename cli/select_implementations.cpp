#include "cli/select_implementations.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn::cli {

std::vector<const Implementation*> select_implementations(const Registry& registry, const std::vector<std::string>& names) {
  if (names.empty()) return registry.all();
  std::vector<const Implementation*> chosen;
  for (const auto& name : names) {
    const auto* impl = registry.find(name);
    if (impl == nullptr) throw InputError(fmt::format("unknown implementation '{}' (known: {})", name, fmt::join(registry.names(), ", ")));
    chosen.push_back(impl);
  }
  return chosen;
}

}  // namespace attn::cli

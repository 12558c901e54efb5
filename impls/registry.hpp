#pragma once
// The registry of implementations, filled by explicit registration calls (not static
// initialisers, which a linker may drop). Tests build their own registry and may add private
// implementations, such as deliberately wrong mutants.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "impls/implementation.hpp"

namespace attn {

class Registry {
 public:
  // Throws std::invalid_argument when the name is taken.
  void add(std::unique_ptr<Implementation> implementation);
  const Implementation* find(std::string_view name) const;  // null when absent
  std::vector<const Implementation*> all() const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<Implementation>> implementations_;
};

// Adds every implementation built into this binary (cpu_naive, and more as they land).
void register_builtin_implementations(Registry& registry);

// The name of every built-in implementation, whether or not this binary has it (results from a
// CUDA build and a CPU-only one meet in one report): reserved, so that a plugin cannot take one
// and have its results merged with the built-in's wherever results are keyed by name.
const std::vector<std::string>& builtin_implementation_names();

}  // namespace attn

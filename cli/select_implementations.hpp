#pragma once
// --impl NAME... against the registry: the commands that run built-in implementations (verify,
// properties, bench) choose them the same way.
#include <string>
#include <vector>

#include "impls/registry.hpp"

namespace attn::cli {

// Every registered implementation when `names` is empty; else those, in that order. InputError
// naming the known ones for an unknown name.
std::vector<const Implementation*> select_implementations(const Registry& registry, const std::vector<std::string>& names);

}  // namespace attn::cli

#pragma once
// The float128 reference (reference/) behind the Implementation interface, every row computed,
// so that the property suite can hold the oracle itself to the invariants it checks others by.
// Test-time only: it is far too slow to benchmark and is not in the registry.
#include <memory>

#include "impls/implementation.hpp"

namespace attn {

std::unique_ptr<Implementation> make_reference_implementation();

}  // namespace attn

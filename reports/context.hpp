#pragma once
// Where and how a result was measured: git revision, compiler and flags, build type, CPU model
// and cores, date. Every result file carries it.
#include <nlohmann/json.hpp>

namespace attn {

nlohmann::json run_context(int threads);

}  // namespace attn

#pragma once
// Where and how a result was measured: git revision, compiler and flags, build type, CPU model,
// cores and clock, the GPU (model, clocks, NVIDIA driver, CUDA driver and runtime versions, or
// why there is none), date. Every result file carries it (reports/README.md lists the fields).
#include <nlohmann/json.hpp>

namespace attn {

nlohmann::json run_context(int threads);

}  // namespace attn

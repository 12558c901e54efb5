#pragma once
// Where and how a result was measured: git revision, compiler and flags, build type, CPU model,
// cores and clock, the GPU (model, clocks, NVIDIA driver, CUDA driver and runtime versions, or
// why there is none), date. Every result file carries it (reports/README.md lists the fields).
#include <string>

#include <nlohmann/json.hpp>

namespace attn {

nlohmann::json run_context(int threads);

// The git revision this build was made from (`git describe --always --dirty`; "unknown" outside a
// checkout): what `attnbench --version` prints and every context block records.
std::string build_revision();

}  // namespace attn

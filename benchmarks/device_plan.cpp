#include "benchmarks/device_plan.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn::bench {

L2Mode parse_l2_mode(const std::string& text) {
  if (text == "cold") return L2Mode::cold;
  if (text == "hot") return L2Mode::hot;
  throw InputError(fmt::format("--l2 '{}': expected cold (flush L2 before every timed iteration) or hot", text));
}

std::string to_string(L2Mode mode) { return mode == L2Mode::cold ? "cold" : "hot"; }

std::string GemmPrecision::name() const { return tf32 ? "tf32" : std::string(to_string(dtype)); }

GemmPrecision roofline_precision(const Implementation& implementation, DType dtype) {
  if (dtype != DType::f32) return {dtype, false};  // half-precision products are the dtype's own
  switch (implementation.describe().matmul_precision) {
    case MatmulPrecision::working: break;
    case MatmulPrecision::tf32: return {dtype, true};
    case MatmulPrecision::bf16: return {DType::bf16, false};  // f32 inputs multiplied as bf16 run at bf16's rate
  }
  return {dtype, false};
}

// An implementation that times itself (a CUDA plugin: events inside its worker) is not one of the
// harness's GPU families, whatever its device.
bool runs_on_gpu(const Implementation& implementation) { return implementation.describe().device == "cuda" && !implementation.times_itself(); }

DevicePlan plan_devices(std::span<const Implementation* const> implementations, const DeviceStatus& device) {
  DevicePlan plan;
  for (const Implementation* impl : implementations) {
    if (!runs_on_gpu(*impl)) {
      plan.runnable.push_back(impl);
    } else if (device.available) {
      plan.runnable.push_back(impl);
      plan.gpu = true;
    } else {
      plan.skipped.push_back(fmt::format("{}: skipped: {}", impl->name(), device.reason.empty() ? "no CUDA device" : device.reason));
    }
  }
  return plan;
}

}  // namespace attn::bench

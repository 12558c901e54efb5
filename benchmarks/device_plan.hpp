#pragma once
// Which implementations `attnbench bench` can run on this machine, and how GPU families are
// timed: the device they would run on (or why there is none), the L2 mode (--l2 cold|hot), and
// the split of the implementations into runnable and skipped (the device itself:
// records/device_info.hpp). Plain C++: the same in builds with
// and without CUDA (without it, the device is "unavailable: built without CUDA").
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "impls/implementation.hpp"
#include "records/device_info.hpp"

namespace attn::bench {

// cold: L2 is flushed (a device buffer of at least twice its size is written) before every
// timed iteration, outside the events; hot: nothing between iterations.
enum class L2Mode { cold, hot };
// "cold" or "hot"; throws InputError naming anything else.
L2Mode parse_l2_mode(const std::string& text);
std::string to_string(L2Mode mode);

// An implementation whose describe().device is "cuda": timed with CUDA events around
// DeviceRun::enqueue (gpu_timing.hpp), never through run(). Not one that times itself (a CUDA
// plugin, timed inside its worker: Implementation::times_itself).
bool runs_on_gpu(const Implementation& implementation);

struct DevicePlan {
  std::vector<const Implementation*> runnable;  // in the order asked for
  std::vector<std::string> skipped;             // "cuda_cublas: skipped: no CUDA device: ..."
  bool gpu = false;                             // some runnable implementation runs on the GPU
};

// The precision of the GEMM whose cuBLAS rate is a GPU family's roofline: the family's dtype,
// or, for f32 families of an implementation whose matrix products are coarser
// (Capabilities::matmul_precision), TF32's or bf16's.
struct GemmPrecision {
  DType dtype = DType::f32;
  bool tf32 = false;
  std::string name() const;  // "f16", "bf16", "f32", "tf32", "f64"
  bool operator==(const GemmPrecision&) const = default;
};
GemmPrecision roofline_precision(const Implementation& implementation, DType dtype);

// Keeps the CPU implementations and, when the device is available, the GPU ones; a GPU
// implementation without a device is skipped with the device's reason. Pure: the caller queries
// the device (only when a GPU implementation was asked for).
DevicePlan plan_devices(std::span<const Implementation* const> implementations, const DeviceStatus& device);

}  // namespace attn::bench

#pragma once
// The GPU a run would use, as every result file records it (context.hpp) and as the bench's GPU
// families are planned and timed (benchmarks/device_plan.hpp): model, compute capability,
// clocks, memory, L2 size, CUDA driver and runtime versions, or why there is no device. Plain
// C++: the same in builds with and without CUDA.
#include <nlohmann/json.hpp>

#include "core/device_status.hpp"

namespace attn {

nlohmann::json to_json(const DeviceStatus& device);

// The device (queried once per process; never throws). Defined in device_info_cuda.cpp where
// CUDA is built, else in device_info_none.cpp.
DeviceStatus gpu_device_info();

}  // namespace attn

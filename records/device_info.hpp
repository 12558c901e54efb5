#pragma once
// The GPU a run would use, as every result file records it (context.hpp) and as the bench's GPU
// families are planned and timed (benchmarks/device_plan.hpp): model, compute capability,
// clocks, memory, L2 size, CUDA driver and runtime versions, or why there is no device. Plain
// C++: the same in builds with and without CUDA.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace attn {

struct GpuDeviceInfo {
  bool available = false;
  std::string reason;  // why not, when !available: "no CUDA device: ..." or "built without CUDA"
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  double sm_clock_mhz = 0;      // the maximum SM clock the driver reports
  double memory_clock_mhz = 0;
  double memory_gib = 0;
  std::int64_t l2_bytes = 0;
  int driver_version = 0, runtime_version = 0;  // e.g. 13000
};
nlohmann::json to_json(const GpuDeviceInfo& device);

// The device (queried once per process; never throws). Defined in device_info_cuda.cpp where
// CUDA is built, else in device_info_none.cpp.
GpuDeviceInfo gpu_device_info();

}  // namespace attn

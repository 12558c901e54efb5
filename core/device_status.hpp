#pragma once
// The GPU a run uses, or why there is none: the one description of a device, which
// impls/cuda_support fills (queried once per process), the CUDA implementations check, the bench
// plans its GPU families with and every result file records (records/device_info.hpp). Plain C++:
// the same in builds with and without CUDA.
#include <cstdint>
#include <string>

namespace attn {

struct DeviceStatus {
  bool available = false;
  std::string reason;        // why not, when !available: "no CUDA device: ..." or "built without CUDA"
  int device = 0;            // the device used: CUDA_VISIBLE_DEVICES picks which
  std::string name;          // e.g. "NVIDIA H100 80GB HBM3"
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  double sm_clock_mhz = 0;   // the maximum SM clock the driver reports
  double memory_clock_mhz = 0;
  double memory_gib = 0;
  std::int64_t l2_bytes = 0;
  int driver_version = 0, runtime_version = 0;  // e.g. 13000
};

}  // namespace attn

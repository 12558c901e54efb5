// CUDA builds: the device impls/cuda_support found, and its L2 size.
#include <cuda_runtime_api.h>

#include "impls/cuda_support/cuda_support.hpp"
#include "records/device_info.hpp"

namespace attn {

GpuDeviceInfo gpu_device_info() {
  static const GpuDeviceInfo info = [] {
    const cuda::DeviceStatus& s = cuda::device_status();
    GpuDeviceInfo d;
    d.available = s.available;
    d.reason = s.reason;
    if (!s.available) return d;
    d.name = s.name;
    d.sm_major = s.sm_major;
    d.sm_minor = s.sm_minor;
    d.multiprocessors = s.multiprocessors;
    d.sm_clock_mhz = s.sm_clock_mhz;
    d.memory_clock_mhz = s.memory_clock_mhz;
    d.memory_gib = s.memory_gib;
    d.driver_version = s.driver_version;
    d.runtime_version = s.runtime_version;
    int l2 = 0;
    if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, s.device) == cudaSuccess)
      d.l2_bytes = l2;
    else
      cudaGetLastError();
    return d;
  }();
  return info;
}

}  // namespace attn

// Builds without CUDA (ATTN_HAVE_CUDA off): there is no device.
#include "records/device_info.hpp"

namespace attn {

GpuDeviceInfo gpu_device_info() {
  GpuDeviceInfo d;
  d.reason = "attnbench was built without CUDA (ATTN_HAVE_CUDA is off)";
  return d;
}

}  // namespace attn

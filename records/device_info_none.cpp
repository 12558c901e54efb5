// Builds without CUDA (ATTN_HAVE_CUDA off): there is no device.
#include "records/device_info.hpp"

namespace attn {

DeviceStatus gpu_device_info() {
  DeviceStatus d;
  d.reason = "attnbench was built without CUDA (ATTN_HAVE_CUDA is off)";
  return d;
}

}  // namespace attn

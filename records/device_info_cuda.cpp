// CUDA builds: the device impls/cuda_support found.
#include "impls/cuda_support/cuda_support.hpp"
#include "records/device_info.hpp"

namespace attn {

DeviceStatus gpu_device_info() { return cuda::device_status(); }

}  // namespace attn

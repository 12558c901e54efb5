#pragma once
// A case's mask on the device, the one upload both CUDA implementations use: the end of each
// query row's key range (causality and padding, as Mask::key_range gives it), the boolean flags
// and the additive bias as Mask stores them ([1|b, 1|h_q, n_q, n_k]; core's broadcast_strides
// say which extents are 1). The kernels take a row's key range as [0, limit): both plans refuse
// windows with a lower bound, and the upload checks that none slipped through.
#include <cstddef>
#include <cstdint>

#include "core/mask.hpp"
#include "core/problem.hpp"
#include "impls/cuda_support/device_resources.hpp"

namespace attn::cuda {

struct DeviceMask {
  DeviceBuffer key_limit;  // int64 [b, n_q]; empty unless asked for
  DeviceBuffer flags;      // uint8, Mask::bool_flags; empty without a boolean mask
  DeviceBuffer bias;       // f32 (or f64), Mask::bias_tensor; empty without a bias
  BroadcastStrides flags_strides, bias_strides;  // in elements, 0 where broadcast

  std::size_t bytes() const { return key_limit.bytes() + flags.bytes() + bias.bytes(); }
};

// who names the implementation in the std::logic_error thrown when the mask does not have the
// extents its problem implies. bias_bytes: 4 (the bias as f32) or 8 (as f64); the bias is f32,
// f16 or bf16 (or f64), so either conversion is exact where the kernel's score type is wide enough.
DeviceMask upload_mask(const Problem& p, const Mask& mask, bool with_key_limit, int bias_bytes, const char* who);

}  // namespace attn::cuda

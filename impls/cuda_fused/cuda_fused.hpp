#pragma once
// cuda_fused: flash-style fused attention on the GPU (one kernel per forward pass, online
// softmax, no n_q x n_k buffer): f16/bf16 on tensor cores (mma.sync m16n8k16, f32
// accumulation), f32 on FMA units. Registered only in builds with CUDA; skips every problem with
// the reason where no device is. See README.md.
#include "impls/registry.hpp"

namespace attn {

void register_cuda_fused(Registry& registry);

}  // namespace attn

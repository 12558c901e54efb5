#pragma once
// cuda_fused's kernel parameters: one plain struct that the host API (fused_plan.hpp) fills and
// every kernel reads. Device pointers, 64-bit sizes and strides in elements, the mask as Mask
// materialises it, the scale, and the launch. No CUDA headers: the unit tests build it on the CPU.
#include <cstdint>

#include "core/dtype.hpp"
#include "impls/cuda_fused/tile_logic.hpp"

namespace attn::cuda_fused {

struct FusedParams {
  // Tensors (device). Q, K, V, O in the dtype; the LSE in f32, dense [b, h_q, n_q] (natural log).
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;

  // Shapes: Q[b, h_q, n_q, d], K and V [b, h_kv, n_k, d], O[b, h_q, n_q, d]; d = head_dim, an
  // instantiated one (the run pads problems whose d_k or d_v is smaller: FusedPlan::pad_q_k).
  std::int64_t batch = 0, h_q = 0, h_kv = 0, n_q = 0, n_k = 0, head_dim = 0;
  std::int64_t group = 1;  // h_q / h_kv: query head h reads kv head h / group
  // Strides in elements (the last dimension is contiguous).
  std::int64_t q_batch_stride = 0, q_head_stride = 0, q_row_stride = 0;
  std::int64_t k_batch_stride = 0, k_head_stride = 0, k_row_stride = 0;
  std::int64_t v_batch_stride = 0, v_head_stride = 0, v_row_stride = 0;
  std::int64_t o_batch_stride = 0, o_head_stride = 0, o_row_stride = 0;

  float scale = 1.0f;       // scores are scale * q.k (+ bias)
  float scale_log2 = 1.0f;  // scale * log2(e): the softmax runs in base 2

  // The mask. Causality alone is computed in the kernel (causal_key_limit, the same rule as
  // the end of Mask::key_range for a causal window); with key padding, key_limit holds the end of
  // Mask::key_range(b, i) for every (b, i), causality included (the plan refuses windows with a
  // lower bound, so every range starts at key 0). Keys j >= the limit are excluded exactly.
  CausalMode causal = CausalMode::none;
  const std::int64_t* key_limit = nullptr;  // [b, n_q], or null
  const std::uint8_t* bool_flags = nullptr; // [bb, hh, n_q, n_k] as Mask stores it; 0 = masked
  std::int64_t flags_batch_stride = 0, flags_head_stride = 0;  // 0 where broadcast
  const float* bias = nullptr;              // [bb, hh, n_q, n_k], additive, in f32
  std::int64_t bias_batch_stride = 0, bias_head_stride = 0;

  // Which kernel (the template parameters launch_forward picks) and its launch.
  DType dtype = DType::f32;
  bool key_limits = false;    // causal or padding: per-row key limits
  bool element_mask = false;  // a boolean mask or a bias: per-element work on visited tiles
  bool wgmma = false;         // the Hopper kernel (forward_wgmma_kernel.cuh) instead of mma.sync
  TileShape tile;
  std::int64_t num_m_blocks = 0;  // ceil(n_q / tile.block_m)
  std::int64_t total_blocks = 0;  // batch * h_q * num_m_blocks
  GridShape grid;
  int smem_bytes = 0;             // dynamic shared memory per block
};

}  // namespace attn::cuda_fused

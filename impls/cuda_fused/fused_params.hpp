#pragma once
// cuda_fused's kernel parameters: plain structs that the host API (fused_plan.hpp) fills and the
// kernels read, one for the forward pass and one for the backward. Device pointers, 64-bit sizes
// and strides in elements, the mask as Mask materialises it, the scale, and the launch. No CUDA
// headers: the unit tests build it on the CPU.
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

// The backward pass's parameters (backward_kernel.cuh), as flash-attention's Flash_bwd_params
// beside its forward's. Dense BHSD at the kernel's head dimension (head_dim columns per row):
// Q, dO and dQ are [b, h_q, n_q, d] (q_* strides), K, V, dK and dV [b, h_kv, n_k, d] (k_*
// strides); the run pads problems whose d_k or d_v is smaller (FusedBackwardPlan).
struct BackwardParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* d_o = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  // For the preprocessing: O as the forward wrote it and dO as given, o_width (= d_v) columns per
  // row, dense [b, h_q, n_q, d_v]; the LSE [b, h_q, n_q] (natural log, -inf for a row that sees
  // no key). It writes the run's workspace: D_i = <dO_i, O_i> and the LSE in base 2, +inf where
  // it is -inf (every weight of such a row is then exactly 0).
  const void* o = nullptr;
  const void* d_o_unpadded = nullptr;
  std::int64_t o_width = 0;
  const float* lse = nullptr;
  float* delta = nullptr;
  float* lse_log2 = nullptr;

  std::int64_t batch = 0, h_q = 0, h_kv = 0, n_q = 0, n_k = 0, head_dim = 0;
  std::int64_t group = 1;  // h_q / h_kv
  std::int64_t q_batch_stride = 0, q_head_stride = 0, k_batch_stride = 0, k_head_stride = 0;  // rows: head_dim apart

  float scale = 1.0f;       // dQ and dK carry it; P = exp2(s * scale_log2 - LSE * log2(e))
  float scale_log2 = 1.0f;

  // The mask, as FusedParams has it: causality computed, or the end of Mask::key_range per (b, i).
  CausalMode causal = CausalMode::none;
  const std::int64_t* key_limit = nullptr;

  DType dtype = DType::f16;
  TileShape dk_dv_tile, dq_tile;
  std::int64_t num_n_blocks = 0;   // key tiles per kv head: ceil(n_k / dk_dv_tile.block_n)
  std::int64_t dk_dv_blocks = 0;   // batch * h_kv * num_n_blocks
  std::int64_t num_m_blocks = 0;   // query tiles per query head: ceil(n_q / dq_tile.block_m)
  std::int64_t dq_blocks = 0;      // batch * h_q * num_m_blocks
  GridShape dk_dv_grid, dq_grid;
  int dk_dv_smem_bytes = 0, dq_smem_bytes = 0;
};

}  // namespace attn::cuda_fused

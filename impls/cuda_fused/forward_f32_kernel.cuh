#pragma once
// cuda_fused's f32 forward kernel: the same online softmax on FMA units (no TF32). A block owns
// 16 query rows of one (batch, head), 4 per warp; K and V stream through shared memory in
// 32-key tiles. Scores: lane j computes q . k_j for its warp's 4 rows; the row max and sum are
// warp reductions; O: lane c accumulates columns c, c + 32, ... over the tile's visible keys,
// each weight broadcast by a shuffle. A masked key is skipped outright (never multiplied), so
// its K and V cannot reach any output bit; key tiles past every row's limit are never loaded.
#include "impls/cuda_fused/kernel_traits.cuh"

namespace attn::cuda_fused {

template <int HeadDim, bool KeyLimits, bool ElementMask>
__global__ void __launch_bounds__(SimtTraits<HeadDim>::kThreads) fused_forward_f32_kernel(const FusedParams p) {
  using Traits = SimtTraits<HeadDim>;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kRows = Traits::kRowsPerWarp, kCols = Traits::kCols;
  constexpr float kLn2 = 0.693147180559945309417232121458176568f;
  constexpr float kLog2e = 1.44269504088896340735992468100189214f;

  const std::int64_t linear = linear_block_index();
  if (linear >= p.total_blocks) return;
  const BlockCoord bc = block_coord(linear, p.num_m_blocks, p.h_q);
  const std::int64_t b = bc.batch, h = bc.head;
  const std::int64_t row0 = bc.m_block * kBlockM;

  extern __shared__ __align__(16) unsigned char smem[];
  float* sQ = reinterpret_cast<float*>(smem);
  float* sK = sQ + kBlockM * HeadDim;
  float* sV = sK + kBlockN * Traits::kKStride;

  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const auto [q, k, v, o, lse] = block_tensors<float>(p, b, h);

  // Key limits: every thread computes the block's (16 rows) and its warp's rows'.
  std::int64_t lo = p.n_k, hi = 0;
  for (int r = 0; r < kBlockM && row0 + r < p.n_q; ++r) {
    const std::int64_t limit = row_key_limit<KeyLimits>(p, b, row0 + r);
    lo = limit < lo ? limit : lo;
    hi = limit > hi ? limit : hi;
  }
  const KeyTileRange tiles = key_tile_range(lo, hi, kBlockN);
  const std::int64_t key_end = hi;
  std::int64_t row_limit[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const std::int64_t row = row0 + warp * kRows + r;
    row_limit[r] = row < p.n_q ? row_key_limit<KeyLimits>(p, b, row) : 0;
  }

  for (int e = tid; e < kBlockM * HeadDim; e += Traits::kThreads) {
    const int r = e / HeadDim, c = e % HeadDim;
    sQ[e] = row0 + r < p.n_q ? q[(row0 + r) * p.q_row_stride + c] : 0.f;
  }

  float acc[kRows][kCols], row_max[kRows], row_sum[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    row_max[r] = -INFINITY, row_sum[r] = 0.f;
#pragma unroll
    for (int u = 0; u < kCols; ++u) acc[r][u] = 0.f;
  }

  for (std::int64_t t = 0; t < tiles.end; ++t) {
    const std::int64_t key0 = t * kBlockN;
    __syncthreads();  // every warp is done with the previous tile (and sQ is written)
    for (int e = tid; e < kBlockN * HeadDim; e += Traits::kThreads) {
      const int j = e / HeadDim, c = e % HeadDim;
      const bool valid = key0 + j < key_end;
      sK[j * Traits::kKStride + c] = valid ? k[(key0 + j) * p.k_row_stride + c] : 0.f;
      sV[j * HeadDim + c] = valid ? v[(key0 + j) * p.v_row_stride + c] : 0.f;
    }
    __syncthreads();

    const std::int64_t key = key0 + lane;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int rb = warp * kRows + r;
      const std::int64_t row = row0 + rb;
      float dot = 0.f;
#pragma unroll 8
      for (int c = 0; c < HeadDim; ++c) dot = fmaf(sQ[rb * HeadDim + c], sK[lane * Traits::kKStride + c], dot);
      bool visible = key < row_limit[r];
      if constexpr (ElementMask) {
        if (visible && p.bool_flags != nullptr)
          visible = p.bool_flags[b * p.flags_batch_stride + h * p.flags_head_stride + row * p.n_k + key] != 0;
      }
      float x = -INFINITY;
      if (visible) {
        x = dot * p.scale_log2;
        if constexpr (ElementMask) {
          if (p.bias != nullptr) x = fmaf(dot, p.scale, p.bias[b * p.bias_batch_stride + h * p.bias_head_stride + row * p.n_k + key]) * kLog2e;
        }
      }
      float m = x;
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
      m = fmaxf(m, row_max[r]);
      const float m_use = m == -INFINITY ? 0.f : m;
      const float alpha = exp2f(row_max[r] - m_use);
      row_max[r] = m;
      const float pj = visible ? exp2f(x - m_use) : 0.f;
      float sum = pj;
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      row_sum[r] = row_sum[r] * alpha + sum;
#pragma unroll
      for (int u = 0; u < kCols; ++u) acc[r][u] *= alpha;
      const unsigned visible_lanes = __ballot_sync(0xffffffffu, visible);
#pragma unroll 4
      for (int j = 0; j < kBlockN; ++j) {
        const float w = __shfl_sync(0xffffffffu, pj, j);
        if ((visible_lanes >> j) & 1u) {
#pragma unroll
          for (int u = 0; u < kCols; ++u) acc[r][u] = fmaf(w, sV[j * HeadDim + lane + 32 * u], acc[r][u]);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const std::int64_t row = row0 + warp * kRows + r;
    if (row >= p.n_q) continue;
    const float l = row_sum[r];
    const bool empty = l == 0.f;  // NaN (a visible NaN score) is not empty: it reaches O
    const float inv = empty ? 0.f : 1.f / l;
#pragma unroll
    for (int u = 0; u < kCols; ++u) o[row * p.o_row_stride + lane + 32 * u] = empty ? 0.f : acc[r][u] * inv;
    if (lane == 0) lse[row] = empty ? -INFINITY : (row_max[r] + log2f(l)) * kLn2;
  }
}

}  // namespace attn::cuda_fused

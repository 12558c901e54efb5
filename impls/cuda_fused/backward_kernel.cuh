#pragma once
// cuda_fused's backward pass (f16/bf16), FlashAttention-2's algorithm with dQ in a pass of its own:
//   1. fused_backward_preprocess_kernel: D_i = <dO_i, O_i> in f32 (a warp per row), and the LSE in
//      base 2, +inf where it is -inf (a row that sees no key: each of its weights is then 0).
//   2. fused_backward_dk_dv_kernel: a block per (key tile, batch, kv head) keeps dK and dV of its
//      64 keys in registers and streams the query tiles of every query head of the group past
//      them: S^T = K Q^T, P^T = exp2(S^T scale log2(e) - LSE_2) on visible pairs (0 elsewhere,
//      selected, not multiplied), dP^T = V dO^T, dS^T = P^T (dP^T - D) (0 where P^T is),
//      dV += P^T dO, dK += dS^T Q; writes dK (times the scale) and dV once.
//   3. fused_backward_dq_kernel: a block per (query tile, batch, query head) keeps dQ in registers
//      and streams the key tiles its rows see: S = Q K^T, P, dP = dO V^T, dS, dQ += dS K; writes
//      dQ (times the scale) once.
// Keys in the A role of (2) leave P^T and dS^T in accumulators whose layout is the A fragment of
// the products that follow, as P in the forward: no shared-memory round trip. P and dS are
// rounded to the dtype for those products (tensor-core operands), as FlashAttention-2 rounds them.
// Each output element has one writer and every sum one order, so the pass is deterministic:
// FlashAttention-2 adds dQ atomically from the dK/dV blocks; the dQ pass recomputes S and dP per
// tile pair instead (7 products per tile pair instead of 5).
// Fragment layouts and the ldmatrix patterns: kernel_traits.cuh.
#include "impls/cuda_fused/kernel_traits.cuh"

namespace attn::cuda_fused {

template <class Elem>
__global__ void __launch_bounds__(256) fused_backward_preprocess_kernel(const BackwardParams p) {
  using E = typename Elem::type;
  constexpr float kLog2e = 1.44269504088896340735992468100189214f;
  constexpr int kWarpsPerBlock = 256 / 32;
  const int lane = int(threadIdx.x) % 32;
  const std::int64_t rows = p.batch * p.h_q * p.n_q;
  const std::int64_t stride = std::int64_t(gridDim.x) * kWarpsPerBlock;
  for (std::int64_t row = std::int64_t(blockIdx.x) * kWarpsPerBlock + int(threadIdx.x) / 32; row < rows; row += stride) {
    const E* o = static_cast<const E*>(p.o) + row * p.o_width;
    const E* d_o = static_cast<const E*>(p.d_o_unpadded) + row * p.o_width;
    float sum = 0.f;
    for (std::int64_t c = lane; c < p.o_width; c += 32) sum = fmaf(Elem::to_float(d_o[c]), Elem::to_float(o[c]), sum);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) {
      p.delta[row] = sum;
      const float lse = p.lse[row];
      p.lse_log2[row] = lse == -INFINITY ? INFINITY : lse * kLog2e;
    }
  }
}

// A pair's weight exp2(s scale log2(e) - LSE_2) where the key is visible, exactly 0 where not;
// and dS = P (dP - D), exactly 0 wherever P is (a masked key's dP may be NaN). The exponent is at
// most 0 in exact arithmetic (LSE >= every score of its row); rounding can push it above, by up
// to |LSE| u, which for bf16's large scores (|LSE| ~ 1e36) would make the weight Inf: it is
// clamped to 0 (a NaN exponent stays NaN).
__device__ __forceinline__ void weight_and_score_gradient(float& s, float& dp, bool visible, float scale_log2, float lse2, float delta) {
  const float exponent = fmaf(s, scale_log2, -lse2);
  const float weight = visible ? exp2f(exponent > 0.f ? 0.f : exponent) : 0.f;
  dp = weight != 0.f ? weight * (dp - delta) : 0.f;
  s = weight;
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads) fused_backward_dk_dv_kernel(const BackwardParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // cp.async, ldmatrix and bf16 mma need sm_80; supports() refuses older devices
#else
  using E = typename Traits::E;
  using Elem = typename Traits::Elem;
  constexpr int kBlockM = Traits::kDkDvBlockM, kBlockN = Traits::kDkDvBlockN, kRowStride = Traits::kRowStride;
  constexpr int kSTiles = kBlockM / 8;   // n8 tiles of S^T and dP^T: the step's queries
  constexpr int kPSteps = kBlockM / 16;  // k16 steps of dV += P^T dO and dK += dS^T Q
  constexpr std::int64_t d = Traits::kHeadDim;

  const std::int64_t linear = linear_block_index();
  if (linear >= p.dk_dv_blocks) return;  // 2-D grids round up
  // Key tiles in order, the first first: under causality it is the one most query rows see.
  const BlockCoord bc = block_coord(linear, p.num_n_blocks, p.h_kv);
  const std::int64_t b = bc.batch, kv = bc.head, key0 = (p.num_n_blocks - 1 - bc.m_block) * kBlockN;

  extern __shared__ __align__(16) unsigned char smem[];
  E* sK = reinterpret_cast<E*>(smem + Traits::kDkDvKOffset);
  E* sV = reinterpret_cast<E*>(smem + Traits::kDkDvVOffset);
  E* sQ_stages = reinterpret_cast<E*>(smem + Traits::kDkDvQOffset);
  E* sDo_stages = reinterpret_cast<E*>(smem + Traits::kDkDvDoOffset);
  // Per stage and query of the step: the row's LSE (base 2), D, and key limit within the tile.
  float* sLse2 = reinterpret_cast<float*>(smem + Traits::kDkDvRowsOffset);
  float* sDelta = sLse2 + 2 * kBlockM;
  int* sLimit = reinterpret_cast<int*>(sDelta + 2 * kBlockM);

  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, tq = lane % 4;  // mma fragment row group and column pair

  const E* k = static_cast<const E*>(p.k) + b * p.k_batch_stride + kv * p.k_head_stride;
  const E* v = static_cast<const E*>(p.v) + b * p.k_batch_stride + kv * p.k_head_stride;

  // The steps: the query tiles from the first one that can see key0 (earlier rows see none of
  // the block's keys under causality; padding only hides more), in each query head of the group.
  const std::int64_t first_m = first_query_seeing(p.causal, key0, p.n_q, p.n_k) / kBlockM;
  const std::int64_t m_tiles = (p.n_q + kBlockM - 1) / kBlockM - first_m;
  const std::int64_t steps = p.group * m_tiles;

  // Step s: query tile first_m + s % m_tiles of query head kv * group + s / m_tiles, into `stage`.
  auto issue_step = [&](std::int64_t s, int stage) {
    const std::int64_t h = kv * p.group + s / m_tiles, row0 = (first_m + s % m_tiles) * kBlockM;
    const std::int64_t head_offset = b * p.q_batch_stride + h * p.q_head_stride;
    load_tile_async<Traits, kBlockM>(sQ_stages + stage * kBlockM * kRowStride, static_cast<const E*>(p.q) + head_offset, d, row0, p.n_q);
    load_tile_async<Traits, kBlockM>(sDo_stages + stage * kBlockM * kRowStride, static_cast<const E*>(p.d_o) + head_offset, d, row0, p.n_q);
    if (tid < kBlockM) {
      const std::int64_t row = row0 + tid;
      float lse2 = INFINITY, delta = 0.f;
      int limit = 0;  // rows past n_q see no key
      if (row < p.n_q) {
        const std::int64_t r = (b * p.h_q + h) * p.n_q + row;
        lse2 = p.lse_log2[r];
        delta = p.delta[r];
        const std::int64_t rel = row_key_limit<true>(p, b, row) - key0;
        limit = rel < 0 ? 0 : (rel > kBlockN ? kBlockN : int(rel));
      }
      sLse2[stage * kBlockM + tid] = lse2;
      sDelta[stage * kBlockM + tid] = delta;
      sLimit[stage * kBlockM + tid] = limit;
    }
  };

  float dk_acc[Traits::kDTiles][4], dv_acc[Traits::kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < Traits::kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[dt][e] = dv_acc[dt][e] = 0.f;

  if (steps > 0) {
    load_tile_async<Traits, kBlockN>(sK, k, d, key0, p.n_k);
    load_tile_async<Traits, kBlockN>(sV, v, d, key0, p.n_k);
    issue_step(0, 0);
    cp_async_commit();
  }

  for (std::int64_t s = 0; s < steps; ++s) {
    const int stage = int(s & 1);
    cp_async_wait_all();
    // This stage's Q and dO (and K, V) landed and its rows' values are visible to all; every warp
    // is done with the other stage. A step whose rows see none of the block's keys is skipped.
    const bool seen = __syncthreads_or(tid < kBlockM && sLimit[stage * kBlockM + tid] > 0) != 0;
    if (s + 1 < steps) {
      issue_step(s + 1, stage ^ 1);
      cp_async_commit();
    }
    if (!seen) continue;
    const E* sQ = sQ_stages + stage * kBlockM * kRowStride;
    const E* sDo = sDo_stages + stage * kBlockM * kRowStride;
    const float* lse2 = sLse2 + stage * kBlockM;
    const float* delta = sDelta + stage * kBlockM;
    const int* limit = sLimit + stage * kBlockM;

    // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys.
    float st[kSTiles][4], dpt[kSTiles][4];
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[nt][e] = dpt[nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < Traits::kKSteps; ++ks) {
      std::uint32_t ka[4], va[4];
      const int a_offset = (warp * 16 + lane % 16) * kRowStride + ks * 16 + (lane / 16) * 8;
      ldmatrix_x4(ka, sK + a_offset);
      ldmatrix_x4(va, sV + a_offset);
#pragma unroll
      for (int np = 0; np < kSTiles / 2; ++np) {
        std::uint32_t qb[4], ob[4];
        const int b_offset = (np * 16 + lane % 8 + (lane / 16) * 8) * kRowStride + ks * 16 + ((lane / 8) % 2) * 8;
        ldmatrix_x4(qb, sQ + b_offset);
        ldmatrix_x4(ob, sDo + b_offset);
        mma_16816<Traits::kDType>(st[2 * np], ka, qb[0], qb[1]);
        mma_16816<Traits::kDType>(st[2 * np + 1], ka, qb[2], qb[3]);
        mma_16816<Traits::kDType>(dpt[2 * np], va, ob[0], ob[1]);
        mma_16816<Traits::kDType>(dpt[2 * np + 1], va, ob[2], ob[3]);
      }
    }

    // P^T and dS^T: element (key g + 8 hh, query nt * 8 + 2 tq + e) is st[nt][2 hh + e].
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int query = nt * 8 + 2 * tq + e;
        const float row_lse2 = lse2[query], row_delta = delta[query];
        const int row_limit = limit[query];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
          weight_and_score_gradient(st[nt][2 * hh + e], dpt[nt][2 * hh + e], warp * 16 + g + 8 * hh < row_limit, p.scale_log2, row_lse2,
                                    row_delta);
      }
    // To A fragments in the dtype: queries 16 kk.. are S^T tiles 2 kk and 2 kk + 1.
    std::uint32_t pa[kPSteps][4], dsa[kPSteps][4];
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      pa[kk][0] = Elem::pack(st[2 * kk][0], st[2 * kk][1]);
      pa[kk][1] = Elem::pack(st[2 * kk][2], st[2 * kk][3]);
      pa[kk][2] = Elem::pack(st[2 * kk + 1][0], st[2 * kk + 1][1]);
      pa[kk][3] = Elem::pack(st[2 * kk + 1][2], st[2 * kk + 1][3]);
      dsa[kk][0] = Elem::pack(dpt[2 * kk][0], dpt[2 * kk][1]);
      dsa[kk][1] = Elem::pack(dpt[2 * kk][2], dpt[2 * kk][3]);
      dsa[kk][2] = Elem::pack(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]);
      dsa[kk][3] = Elem::pack(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3]);
    }

    // dV += P^T dO, dK += dS^T Q: dO and Q are B operands with k = query, n = d (rows of d
    // contiguous elements: ldmatrix .trans, as V in the forward).
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk)
#pragma unroll
      for (int dp = 0; dp < Traits::kDTiles / 2; ++dp) {
        const int b_offset = (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kRowStride + dp * 16 + (lane / 16) * 8;
        std::uint32_t ob[4], qb[4];
        ldmatrix_x4_trans(ob, sDo + b_offset);
        mma_16816<Traits::kDType>(dv_acc[2 * dp], pa[kk], ob[0], ob[1]);
        mma_16816<Traits::kDType>(dv_acc[2 * dp + 1], pa[kk], ob[2], ob[3]);
        ldmatrix_x4_trans(qb, sQ + b_offset);
        mma_16816<Traits::kDType>(dk_acc[2 * dp], dsa[kk], qb[0], qb[1]);
        mma_16816<Traits::kDType>(dk_acc[2 * dp + 1], dsa[kk], qb[2], qb[3]);
      }
  }

  // dK = scale dS^T Q and dV, every key of the tile below n_k; zeros where no row saw the key.
  E* dk = static_cast<E*>(p.dk) + b * p.k_batch_stride + kv * p.k_head_stride;
  E* dv = static_cast<E*>(p.dv) + b * p.k_batch_stride + kv * p.k_head_stride;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const std::int64_t key = key0 + warp * 16 + g + 8 * hh;
    if (key >= p.n_k) continue;
#pragma unroll
    for (int dt = 0; dt < Traits::kDTiles; ++dt) {
      const std::int64_t column = dt * 8 + 2 * tq;
      *reinterpret_cast<std::uint32_t*>(dk + key * d + column) = Elem::pack(dk_acc[dt][2 * hh] * p.scale, dk_acc[dt][2 * hh + 1] * p.scale);
      *reinterpret_cast<std::uint32_t*>(dv + key * d + column) = Elem::pack(dv_acc[dt][2 * hh], dv_acc[dt][2 * hh + 1]);
    }
  }
#endif
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads) fused_backward_dq_kernel(const BackwardParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  using E = typename Traits::E;
  using Elem = typename Traits::Elem;
  constexpr int kBlockM = Traits::kDqBlockM, kBlockN = Traits::kDqBlockN, kRowStride = Traits::kRowStride;
  constexpr int kSTiles = kBlockN / 8;   // n8 tiles of S and dP: the tile's keys
  constexpr int kPSteps = kBlockN / 16;  // k16 steps of dQ += dS K
  constexpr std::int64_t d = Traits::kHeadDim;

  const std::int64_t linear = linear_block_index();
  if (linear >= p.dq_blocks) return;  // 2-D grids round up
  const BlockCoord bc = block_coord(linear, p.num_m_blocks, p.h_q);  // under causality the longest rows first
  const std::int64_t b = bc.batch, h = bc.head, row0 = bc.m_block * kBlockM, kv = h / p.group;

  extern __shared__ __align__(16) unsigned char smem[];
  E* sQ = reinterpret_cast<E*>(smem + Traits::kDqQOffset);
  E* sDo = reinterpret_cast<E*>(smem + Traits::kDqDoOffset);
  E* sK_stages = reinterpret_cast<E*>(smem + Traits::kDqKOffset);
  E* sV_stages = reinterpret_cast<E*>(smem + Traits::kDqVOffset);
  std::int64_t* sReduce = reinterpret_cast<std::int64_t*>(smem + Traits::kDqReduceOffset);

  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, tq = lane % 4;

  const std::int64_t head_offset = b * p.q_batch_stride + h * p.q_head_stride;
  const E* q = static_cast<const E*>(p.q) + head_offset;
  const E* d_o = static_cast<const E*>(p.d_o) + head_offset;
  const E* k = static_cast<const E*>(p.k) + b * p.k_batch_stride + kv * p.k_head_stride;
  const E* v = static_cast<const E*>(p.v) + b * p.k_batch_stride + kv * p.k_head_stride;
  // Key tiles past every row's limit are never loaded (nor keys past the largest limit).
  const auto [tiles, key_end] = block_keys<true, Traits::kWarps, kBlockM, kBlockN>(p, b, row0, sReduce);

  // This thread's rows g and g + 8 of the warp's 16: key limit, LSE (base 2), D.
  std::int64_t row_limit[2];
  float row_lse2[2], row_delta[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const std::int64_t row = row0 + warp * 16 + g + 8 * hh;
    row_limit[hh] = 0, row_lse2[hh] = INFINITY, row_delta[hh] = 0.f;
    if (row < p.n_q) {
      const std::int64_t r = (b * p.h_q + h) * p.n_q + row;
      row_limit[hh] = row_key_limit<true>(p, b, row);
      row_lse2[hh] = p.lse_log2[r];
      row_delta[hh] = p.delta[r];
    }
  }

  float dq_acc[Traits::kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < Traits::kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq_acc[dt][e] = 0.f;

  if (tiles.end > 0) {
    load_tile_async<Traits, kBlockM>(sQ, q, d, row0, p.n_q);
    load_tile_async<Traits, kBlockM>(sDo, d_o, d, row0, p.n_q);
    load_tile_async<Traits, kBlockN>(sK_stages, k, d, 0, key_end);
    load_tile_async<Traits, kBlockN>(sV_stages, v, d, 0, key_end);
    cp_async_commit();
  }

  for (std::int64_t t = 0; t < tiles.end; ++t) {
    const int stage = int(t & 1);
    const std::int64_t key0 = t * kBlockN;
    cp_async_wait_all();
    __syncthreads();  // K_t and V_t (and Q, dO) visible to all; every warp is done with the other stage
    if (t + 1 < tiles.end) {
      load_tile_async<Traits, kBlockN>(sK_stages + (stage ^ 1) * kBlockN * kRowStride, k, d, key0 + kBlockN, key_end);
      load_tile_async<Traits, kBlockN>(sV_stages + (stage ^ 1) * kBlockN * kRowStride, v, d, key0 + kBlockN, key_end);
      cp_async_commit();
    }
    const E* sK = sK_stages + stage * kBlockN * kRowStride;
    const E* sV = sV_stages + stage * kBlockN * kRowStride;

    // S = Q K_t^T and dP = dO V_t^T for the warp's 16 rows.
    float s[kSTiles][4], dp[kSTiles][4];
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = dp[nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < Traits::kKSteps; ++ks) {
      std::uint32_t qa[4], oa[4];
      const int a_offset = (warp * 16 + lane % 16) * kRowStride + ks * 16 + (lane / 16) * 8;
      ldmatrix_x4(qa, sQ + a_offset);
      ldmatrix_x4(oa, sDo + a_offset);
#pragma unroll
      for (int np = 0; np < kSTiles / 2; ++np) {
        std::uint32_t kb[4], vb[4];
        const int b_offset = (np * 16 + lane % 8 + (lane / 16) * 8) * kRowStride + ks * 16 + ((lane / 8) % 2) * 8;
        ldmatrix_x4(kb, sK + b_offset);
        ldmatrix_x4(vb, sV + b_offset);
        mma_16816<Traits::kDType>(s[2 * np], qa, kb[0], kb[1]);
        mma_16816<Traits::kDType>(s[2 * np + 1], qa, kb[2], kb[3]);
        mma_16816<Traits::kDType>(dp[2 * np], oa, vb[0], vb[1]);
        mma_16816<Traits::kDType>(dp[2 * np + 1], oa, vb[2], vb[3]);
      }
    }

    // dS: element (row g + 8 hh, key nt * 8 + 2 tq + e) is dp[nt][2 hh + e].
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const std::int64_t rel = row_limit[hh] - key0;  // the row's key limit within this tile
      const int tile_limit = rel < 0 ? 0 : (rel > kBlockN ? kBlockN : int(rel));
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          weight_and_score_gradient(s[nt][2 * hh + e], dp[nt][2 * hh + e], nt * 8 + 2 * tq + e < tile_limit, p.scale_log2, row_lse2[hh],
                                    row_delta[hh]);
    }
    std::uint32_t dsa[kPSteps][4];
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      dsa[kk][0] = Elem::pack(dp[2 * kk][0], dp[2 * kk][1]);
      dsa[kk][1] = Elem::pack(dp[2 * kk][2], dp[2 * kk][3]);
      dsa[kk][2] = Elem::pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
      dsa[kk][3] = Elem::pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
    }

    // dQ += dS K_t: K is the B operand with k = key, n = d (ldmatrix .trans, as V in the forward).
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk)
#pragma unroll
      for (int dt = 0; dt < Traits::kDTiles / 2; ++dt) {
        std::uint32_t kb[4];
        ldmatrix_x4_trans(kb, sK + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kRowStride + dt * 16 + (lane / 16) * 8);
        mma_16816<Traits::kDType>(dq_acc[2 * dt], dsa[kk], kb[0], kb[1]);
        mma_16816<Traits::kDType>(dq_acc[2 * dt + 1], dsa[kk], kb[2], kb[3]);
      }
  }

  // dQ = scale dS K for the block's rows below n_q; zeros for a row that sees no key.
  E* dq = static_cast<E*>(p.dq) + head_offset;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const std::int64_t row = row0 + warp * 16 + g + 8 * hh;
    if (row >= p.n_q) continue;
#pragma unroll
    for (int dt = 0; dt < Traits::kDTiles; ++dt)
      *reinterpret_cast<std::uint32_t*>(dq + row * d + dt * 8 + 2 * tq) = Elem::pack(dq_acc[dt][2 * hh] * p.scale, dq_acc[dt][2 * hh + 1] * p.scale);
  }
#endif
}

}  // namespace attn::cuda_fused

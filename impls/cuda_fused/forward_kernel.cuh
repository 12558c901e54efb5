#pragma once
// cuda_fused's tensor-core forward kernel (f16/bf16), flash-attention-2 style. One block owns
// kBlockM query rows of one (batch, head); it streams tiles of kBlockN keys of K and V through shared
// memory (cp.async, one buffer each: V of tile t loads while S = Q K_t^T is computed, K of tile
// t + 1 while the softmax and O += P V_t run), keeps the running row max, sum and the O
// accumulator in registers (online softmax, base 2 with scale * log2(e) folded) and writes O and
// the LSE once. Key tiles past every row's key limit are never loaded; tiles below every row's
// limit skip the per-element mask. Fragment layouts: kernel_traits.cuh.
//
// Masked keys are excluded exactly: their scores become -inf before the row max, so their weight
// is exactly 0. A tensor-core product still multiplies every V row by its weight, and 0 * NaN is
// NaN, so in tiles with masked keys non-finite V elements are replaced by 0 in shared memory
// before O += P V, and (only when a tile had one) each thread adds p * V back for its output
// elements from keys of non-zero weight, reading V from global memory: a masked key's V changes
// no output bit, a visible key's NaN or Inf still reaches its rows.
#include "impls/cuda_fused/kernel_traits.cuh"

namespace attn::cuda_fused {

template <class Traits, bool KeyLimits, bool ElementMask>
__global__ void __launch_bounds__(Traits::kThreads) fused_forward_mma_kernel(const FusedParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // cp.async, ldmatrix and bf16 mma need sm_80; supports() refuses older devices
#else
  using E = typename Traits::E;
  using Elem = typename Traits::Elem;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kRowStride = Traits::kRowStride;
  constexpr int kMTiles = Traits::kMTiles;
  constexpr float kLn2 = 0.693147180559945309417232121458176568f;
  constexpr float kLog2e = 1.44269504088896340735992468100189214f;

  const std::int64_t linear = linear_block_index();
  if (linear >= p.total_blocks) return;  // 2-D grids round up
  const BlockCoord bc = block_coord(linear, p.num_m_blocks, p.h_q);
  const std::int64_t b = bc.batch, h = bc.head;
  const std::int64_t row0 = bc.m_block * kBlockM;  // first query row of the block

  extern __shared__ __align__(16) unsigned char smem[];
  E* sQ = reinterpret_cast<E*>(smem + Traits::kQOffset);
  E* sK = reinterpret_cast<E*>(smem + Traits::kKOffset);
  E* sV = reinterpret_cast<E*>(smem + Traits::kVOffset);
  E* sP = reinterpret_cast<E*>(smem + Traits::kPOffset);
  unsigned char* sBad = smem + Traits::kBadOffset;
  std::int64_t* sReduce = reinterpret_cast<std::int64_t*>(smem + Traits::kReduceOffset);

  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, tq = lane % 4;  // mma fragment row group and column pair

  const auto [q, k, v, o, lse] = block_tensors<E>(p, b, h);
  const auto [tiles, key_end] = block_keys<KeyLimits, Traits::kWarps, kBlockM, kBlockN>(p, b, row0, sReduce);

  // This thread's rows: m-tile mt, half hh (fragment rows g and g + 8).
  std::int64_t row_limit[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const std::int64_t row = row0 + warp * Traits::kWarpRows + mt * 16 + g + 8 * hh;
      row_limit[mt][hh] = row < p.n_q ? row_key_limit<KeyLimits>(p, b, row) : 0;
    }

  float acc[kMTiles][Traits::kOTiles][4];
  float row_max[kMTiles][2], row_sum[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int ot = 0; ot < Traits::kOTiles; ++ot)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][ot][e] = 0.f;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) row_max[mt][hh] = -INFINITY, row_sum[mt][hh] = 0.f;
  }

  if (tiles.end > 0) {
    load_tile_async<Traits, kBlockM>(sQ, q, p.q_row_stride, row0, p.n_q);
    load_tile_async<Traits, kBlockN>(sK, k, p.k_row_stride, 0, key_end);
    cp_async_commit();
  }

  for (std::int64_t t = 0; t < tiles.end; ++t) {
    const std::int64_t key0 = t * kBlockN;
    cp_async_wait_all();
    __syncthreads();  // K_t (and Q) visible to all; every warp is done with sV of tile t - 1
    load_tile_async<Traits, kBlockN>(sV, v, p.v_row_stride, key0, key_end);
    cp_async_commit();

    // S = Q K_t^T
    float s[kMTiles][Traits::kSTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < Traits::kSTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < Traits::kKSteps; ++ks) {
      std::uint32_t qa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
        ldmatrix_x4(qa[mt], sQ + (warp * Traits::kWarpRows + mt * 16 + lane % 16) * kRowStride + ks * 16 + (lane / 16) * 8);
#pragma unroll
      for (int np = 0; np < Traits::kSTiles / 2; ++np) {
        std::uint32_t kb[4];
        ldmatrix_x4(kb, sK + (np * 16 + lane % 8 + (lane / 16) * 8) * kRowStride + ks * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_16816<Traits::kDType>(s[mt][2 * np], qa[mt], kb[0], kb[1]);
          mma_16816<Traits::kDType>(s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
        }
      }
    }

    cp_async_wait_all();
    __syncthreads();  // V_t visible to all; every warp is done with sK
    if (t + 1 < tiles.end) {
      load_tile_async<Traits, kBlockN>(sK, k, p.k_row_stride, key0 + kBlockN, key_end);
      cp_async_commit();
    }

    // Scores to the base-2 domain; masked keys to -inf.
    const bool masked_tile = t >= tiles.first_masked || (ElementMask && p.bool_flags != nullptr);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const std::int64_t row = row0 + warp * Traits::kWarpRows + mt * 16 + g + 8 * hh;
        const bool row_valid = row < p.n_q;
        // The row's key limit within this tile, in [0, kBlockN]: 32-bit compares below.
        const std::int64_t rel = row_limit[mt][hh] - key0;
        const int tile_limit = rel < 0 ? 0 : (rel > kBlockN ? kBlockN : int(rel));
#pragma unroll
        for (int nt = 0; nt < Traits::kSTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const std::int64_t key = key0 + nt * 8 + 2 * tq + e;
            float x = s[mt][nt][2 * hh + e] * p.scale_log2;
            if constexpr (ElementMask) {
              if (p.bias != nullptr && row_valid && key < p.n_k)
                x = fmaf(s[mt][nt][2 * hh + e], p.scale, p.bias[b * p.bias_batch_stride + h * p.bias_head_stride + row * p.n_k + key]) *
                    kLog2e;
            }
            if (masked_tile) {
              bool visible = nt * 8 + 2 * tq + e < tile_limit;
              if constexpr (ElementMask) {
                if (visible && p.bool_flags != nullptr)
                  visible = p.bool_flags[b * p.flags_batch_stride + h * p.flags_head_stride + row * p.n_k + key] != 0;
              }
              if (!visible) x = -INFINITY;
            }
            s[mt][nt][2 * hh + e] = x;
          }
      }

    // Online softmax: new row max (over the quad that shares a row), rescale, exponentiate.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float m = row_max[mt][hh];
#pragma unroll
        for (int nt = 0; nt < Traits::kSTiles; ++nt) m = fmaxf(m, fmaxf(s[mt][nt][2 * hh], s[mt][nt][2 * hh + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        // No visible key yet: exponents relative to 0, so exp2(-inf - 0) = 0 and never NaN.
        const float m_use = m == -INFINITY ? 0.f : m;
        const float alpha = exp2f(row_max[mt][hh] - m_use);  // 0 when the old max was -inf
        row_max[mt][hh] = m;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < Traits::kSTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pe = exp2f(s[mt][nt][2 * hh + e] - m_use);
            s[mt][nt][2 * hh + e] = pe;
            sum += pe;
          }
        row_sum[mt][hh] = row_sum[mt][hh] * alpha + sum;  // this thread's columns; quad-summed at the end
#pragma unroll
        for (int ot = 0; ot < Traits::kOTiles; ++ot) {
          acc[mt][ot][2 * hh] *= alpha;
          acc[mt][ot][2 * hh + 1] *= alpha;
        }
      }
    // P to A fragments in the dtype (the scores' registers are free from here on).
    std::uint32_t pa[kMTiles][Traits::kPSteps][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int kk = 0; kk < Traits::kPSteps; ++kk) {
        pa[mt][kk][0] = Elem::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][kk][1] = Elem::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][kk][2] = Elem::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][kk][3] = Elem::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }

    // In tiles with masked keys: non-finite V elements to 0 (kScanThreads threads per key row), and
    // whether any was found.
    bool nonfinite_v = false;
    if (masked_tile) {
      bool bad = false;
      constexpr int kScan = Traits::kScanThreads;
      E* vrow = sV + (tid / kScan) * kRowStride + (tid % kScan) * (Traits::kHeadDim / kScan);
#pragma unroll
      for (int c = 0; c < Traits::kChunks / kScan; ++c) {
        uint4 chunk = *reinterpret_cast<uint4*>(vrow + c * 8);
        unsigned short* halves = reinterpret_cast<unsigned short*>(&chunk);
        bool changed = false;
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (!Elem::finite_bits(halves[e])) halves[e] = 0, changed = true;
        if (changed) *reinterpret_cast<uint4*>(vrow + c * 8) = chunk, bad = true;
      }
      sBad[tid] = bad ? 1 : 0;
      nonfinite_v = __syncthreads_or(bad) != 0;  // also orders the rewrites before every ldmatrix of sV
    }

    // P (as A fragments, in the dtype's rounding) to sP as well when V had non-finite values.
    if (nonfinite_v) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int kk = 0; kk < Traits::kPSteps; ++kk)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            // a0: (g, 2tq), a1: (g + 8, 2tq), a2: (g, 2tq + 8), a3: (g + 8, 2tq + 8); two keys each.
            const int prow = warp * Traits::kWarpRows + mt * 16 + g + 8 * (r % 2);
            const int pcol = kk * 16 + 2 * tq + 8 * (r / 2);
            *reinterpret_cast<std::uint32_t*>(sP + prow * Traits::kPStride + pcol) = pa[mt][kk][r];
          }
      __syncthreads();  // sP and sBad visible to all
    }

    // O += P V_t
#pragma unroll
    for (int kk = 0; kk < Traits::kPSteps; ++kk)
#pragma unroll
      for (int dp = 0; dp < Traits::kOTiles / 2; ++dp) {
        std::uint32_t vb[4];
        ldmatrix_x4_trans(vb, sV + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kRowStride + dp * 16 + (lane / 16) * 8);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_16816<Traits::kDType>(acc[mt][2 * dp], pa[mt][kk], vb[0], vb[1]);
          mma_16816<Traits::kDType>(acc[mt][2 * dp + 1], pa[mt][kk], vb[2], vb[3]);
        }
      }

    // The terms the zeroed V elements left out, for keys of non-zero weight (rare: only tiles
    // with masked keys whose V held a NaN or Inf).
    if (nonfinite_v) {
#pragma unroll 1
      for (int j = 0; j < kBlockN; ++j) {
        bool flagged = false;  // the threads that scanned key row j
#pragma unroll
        for (int i = 0; i < Traits::kScanThreads; ++i) flagged |= sBad[j * Traits::kScanThreads + i] != 0;
        if (!flagged) continue;
        const E* vglobal = v + (key0 + j) * p.v_row_stride;  // key0 + j < key_end <= n_k: flagged rows were loaded
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const float pj = Elem::to_float(sP[(warp * Traits::kWarpRows + mt * 16 + g + 8 * hh) * Traits::kPStride + j]);
            if (pj == 0.f) continue;
#pragma unroll
            for (int ot = 0; ot < Traits::kOTiles; ++ot)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const float x = Elem::to_float(vglobal[ot * 8 + 2 * tq + e]);
                if (!isfinite(x)) acc[mt][ot][2 * hh + e] += pj * x;
              }
          }
      }
    }
  }

  // Epilogue: O = acc / l and LSE = ln(l) + max (natural log); a row with no visible key gets
  // O = 0 and LSE = -inf.
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float l = row_sum[mt][hh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const std::int64_t row = row0 + warp * Traits::kWarpRows + mt * 16 + g + 8 * hh;
      if (row >= p.n_q) continue;
      const bool empty = l == 0.f;  // NaN (a visible NaN score) is not empty: it reaches O
      const float inv = empty ? 0.f : 1.f / l;
      E* orow = o + row * p.o_row_stride;
#pragma unroll
      for (int ot = 0; ot < Traits::kOTiles; ++ot) {
        const float x0 = empty ? 0.f : acc[mt][ot][2 * hh] * inv;
        const float x1 = empty ? 0.f : acc[mt][ot][2 * hh + 1] * inv;
        *reinterpret_cast<std::uint32_t*>(orow + ot * 8 + 2 * tq) = Elem::pack(x0, x1);
      }
      if (tq == 0) lse[row] = empty ? -INFINITY : (row_max[mt][hh] + log2f(l)) * kLn2;
    }
#endif
}

}  // namespace attn::cuda_fused

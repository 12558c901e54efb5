#pragma once
// cuda_fused's Hopper kernel (sm_90a): f16/bf16, d = 128, causal/padding key limits or none, no
// boolean mask or bias. Both products on wgmma (warpgroup MMA, f32 accumulation): S = Q K_t^T with
// Q and K_t in shared memory, O += P V_t with P in registers (the S accumulator's layout is the
// A-operand layout) and V_t in shared memory read N-major (transposed by the instruction).
//
// Per block: 2 warpgroups (256 threads); warpgroup w owns query rows [64 w, 64 w + 64) of the
// block's 128. Key tiles of 128 keys, double-buffered: cp.async fetches K_{t+1} and V_{t+1} while
// tile t is computed. Shared memory holds every 128 x 128 tile in wgmma's canonical 128-byte
// swizzled layout (what TMA's SWIZZLE_128B writes): two panels of 64 columns, each row's 128 bytes
// of a panel contiguous, its eight 16-byte chunks permuted by the row (chunk c of row r at
// (c ^ (r % 8)) * 16), so that eight threads writing one row's chunks, and wgmma reading eight
// rows, hit distinct banks, and a warp's loads read whole 128-byte lines:
//   row r, 16-byte chunk c (0..15) at (c / 8) * 16384 + r * 128 + ((c % 8) ^ (r % 8)) * 16.
// Q and K are K-major operands (stride byte offset 1024: the next 8 rows; the leading byte
// offset is unused); V is read N-major (n = d, k = keys; leading byte offset 16384: the next
// panel of 64 columns; stride byte offset 1024: the next 8 keys). PTX ISA, "Shared Memory Matrix
// Layout" and "Matrix Descriptor Format"; CUTLASS's canonical GMMA layouts.
//
// Everything else is the mma.sync kernel's (forward_kernel.cuh): base-2 online softmax, masked keys
// -inf before the max, rows without a visible key exponentiate against 0, non-finite V of a masked
// key zeroed in shared memory and a visible key's added back from global memory, LSE in natural
// log, fully masked rows O = 0 and LSE = -inf.
#include "impls/cuda_fused/kernel_traits.cuh"

namespace attn::cuda_fused {

struct WgmmaTraits {
  static constexpr int kHeadDim = 128;
  static constexpr int kBlockM = 128, kBlockN = 128, kThreads = 256, kWarps = 8;
  static constexpr int kTileBytes = 128 * 128 * 2;  // Q, one K stage, one V stage
  static constexpr int kPStride = kBlockN + smem_row_pad;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kTileBytes;       // two stages
  static constexpr int kVOffset = kKOffset + 2 * kTileBytes;   // two stages
  static constexpr int kPOffset = kVOffset + 2 * kTileBytes;
  static constexpr int kBadOffset = kPOffset + kBlockM * kPStride * 2;
  static constexpr int kReduceOffset = kBadOffset + kThreads;
  static constexpr int kSmemBytes = kReduceOffset + 2 * kWarps * 8 + 1024;  // + the base's alignment to 1024
  static_assert(kQOffset % 1024 == 0 && kKOffset % 1024 == 0 && kVOffset % 1024 == 0, "swizzle atoms are 1024-byte aligned");
  static_assert(kBlockM == wgmma_tile_shape().block_m && kBlockN == wgmma_tile_shape().block_n && kThreads == wgmma_tile_shape().threads,
                "traits and the host's tile shape agree");
  static_assert(kSmemBytes == wgmma_smem_bytes(), "traits and the host's shared-memory size agree");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory beyond sm_90's 227 KB per block");
};

// Byte offset of (row, 16-byte chunk) in a 128 x 128 tile (the swizzled layout above).
__device__ __forceinline__ int tile_offset(int row, int chunk) {
  return (chunk >> 3) * 16384 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// A wgmma shared-memory descriptor with 128-byte swizzling: start address, leading and stride
// byte offsets, each in 16-byte units (PTX ISA, "Matrix Descriptor Format"; layout type 1 in
// bits 62-63). Start addresses step by 32 bytes within a swizzle atom (a k16 step of a K-major
// operand) or by whole 1024-byte atoms: the hardware applies the swizzle to the addresses.
__device__ __forceinline__ std::uint64_t wgmma_descriptor(std::uint32_t smem_byte_address, std::uint32_t leading, std::uint32_t stride) {
  return std::uint64_t((smem_byte_address & 0x3FFFF) >> 4) | (std::uint64_t(leading >> 4) << 16) | (std::uint64_t(stride >> 4) << 32) |
         (std::uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Generic-proxy writes to shared memory (cp.async, st.shared) made visible to the async proxy
// that wgmma reads through; each writing thread runs it before the barrier.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// wgmma_wait<N>: until at most N committed wgmma groups of this thread are pending (groups
// complete in order). hold(d): keeps the compiler from moving reads or writes of accumulator
// registers across a wait (the asm statements issuing the products do not name the wait).
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
template <int R>
__device__ __forceinline__ void hold(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// wgmma_ss<D, N>: d (64 x N, f32) = or += A (64 x 16, shared, K-major) B (16 x N, shared, K-major:
// B^T stored). wgmma_rs_trans_b<D>: d (64 x 128) += A (64 x 16, registers) B (16 x 128, shared,
// N-major). Defined for sm_90a only.
// The instruction text once per shape, the element type a string literal (f16 or bf16).
#define ATTN_WGMMA_SS_N64(TYPE)                                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                  \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
               : "l"(a), "l"(b), "r"(accumulate))
#define ATTN_WGMMA_SS_N128(TYPE)                                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                  \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
               : "l"(a), "l"(b), "r"(accumulate))
#define ATTN_WGMMA_RS_N128_TRANS_B(TYPE)                                                                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                      \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))
template <DType D, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], std::uint64_t a, std::uint64_t b, int accumulate) {
  static_assert(N == 64 || N == 128, "the shapes the kernel uses");
  if constexpr (N == 64 && D == DType::f16) ATTN_WGMMA_SS_N64("f16");
  if constexpr (N == 64 && D == DType::bf16) ATTN_WGMMA_SS_N64("bf16");
  if constexpr (N == 128 && D == DType::f16) ATTN_WGMMA_SS_N128("f16");
  if constexpr (N == 128 && D == DType::bf16) ATTN_WGMMA_SS_N128("bf16");
}
template <DType D>
__device__ __forceinline__ void wgmma_rs_trans_b(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t b) {
  if constexpr (D == DType::f16) ATTN_WGMMA_RS_N128_TRANS_B("f16");
  if constexpr (D == DType::bf16) ATTN_WGMMA_RS_N128_TRANS_B("bf16");
}
#undef ATTN_WGMMA_SS_N64
#undef ATTN_WGMMA_SS_N128
#undef ATTN_WGMMA_RS_N128_TRANS_B

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Rows [row_begin, row_begin + 128) of a [rows, 128] tensor into the swizzled layout, rows >=
// row_end zero-filled. 2048 16-byte chunks, 8 per thread; a warp takes 4 rows x the 8 chunks of
// one panel: whole 128-byte lines from global memory, distinct banks in shared memory.
__device__ __forceinline__ void load_tile(unsigned char* smem, const void* global, std::int64_t row_stride, std::int64_t row_begin,
                                          std::int64_t row_end) {
  const unsigned char* base = static_cast<const unsigned char*>(global);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int e = int(threadIdx.x) + i * WgmmaTraits::kThreads;
    const int row = (e & 1023) >> 3, chunk = (e >> 10) * 8 + (e & 7);
    const std::int64_t global_row = row_begin + row;
    const bool valid = global_row < row_end;
    const void* src = valid ? base + (global_row * row_stride + chunk * 8) * 2 : global;
    cp_async_16(smem + tile_offset(row, chunk), src, valid ? 16 : 0);
  }
}

// The softmax steps on a slice of S in wgmma's accumulator layout: kKeys keys, element 4 j + 2 hh + e
// = row g + 8 hh of the warp's 16, key 8 j + 2 tq + e of the slice. visit(index, hh, key) runs on
// each of this thread's elements.
template <int kKeys, class Visit>
__device__ __forceinline__ void for_each_score(int tq, Visit visit) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) visit(4 * j + 2 * hh + e, hh, 8 * j + 2 * tq + e);
}
template <int kKeys>
__device__ __forceinline__ void scale_and_mask(float (&s)[kKeys / 2], float scale_log2, bool masked, const int (&limit)[2], int first_key,
                                               int tq) {
  for_each_score<kKeys>(tq, [&](int i, int hh, int key) {
    const float x = s[i] * scale_log2;
    s[i] = masked && first_key + key >= limit[hh] ? -INFINITY : x;
  });
}
template <int kKeys>
__device__ __forceinline__ void max_into(const float (&s)[kKeys / 2], float (&m)[2]) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) m[hh] = fmaxf(m[hh], fmaxf(s[4 * j + 2 * hh], s[4 * j + 2 * hh + 1]));
}
// exp2(s - m) in place, its row sums added to sum, and P packed as wgmma A fragments (mma.m16n8k16's
// A layout per warp) in the dtype: fragment kk covers keys 16 kk .. 16 kk + 15 of the slice.
template <class Elem, int kKeys>
__device__ __forceinline__ void exponentiate_and_pack(float (&s)[kKeys / 2], const float (&m_use)[2], float (&sum)[2],
                                                      std::uint32_t (&pa)[kKeys / 16][4]) {
  for_each_score<kKeys>(0, [&](int i, int hh, int) {
    s[i] = exp2f(s[i] - m_use[hh]);
    sum[hh] += s[i];
  });
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    pa[kk][0] = Elem::pack(s[8 * kk + 0], s[8 * kk + 1]);
    pa[kk][1] = Elem::pack(s[8 * kk + 2], s[8 * kk + 3]);
    pa[kk][2] = Elem::pack(s[8 * kk + 4], s[8 * kk + 5]);
    pa[kk][3] = Elem::pack(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

// kHalves = 2: S of a tile is computed as two 64-key halves in two wgmma groups, so that the mask
// and row max of the first half run while the second half's product does, and P of the second
// half is exponentiated while the first half's P V runs. kHalves = 1: one 128-key product.
template <DType D, bool KeyLimits, int kHalves>
__global__ void __launch_bounds__(WgmmaTraits::kThreads, 1) fused_forward_wgmma_kernel(const FusedParams p) {
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // built for sm_90a only; the host picks this kernel only where that image runs
#else
  using Elem = ElementOf<D>;
  using E = typename Elem::type;
  using T = WgmmaTraits;
  constexpr int kBlockM = T::kBlockM, kBlockN = T::kBlockN, kKeys = kBlockN / kHalves;
  constexpr float kLn2 = 0.693147180559945309417232121458176568f;
  static_assert(kHalves == 1 || kHalves == 2, "one 128-key product or two 64-key halves");

  const std::int64_t linear = linear_block_index();
  if (linear >= p.total_blocks) return;
  const BlockCoord bc = block_coord(linear, p.num_m_blocks, p.h_q);
  const std::int64_t b = bc.batch, h = bc.head;
  const std::int64_t row0 = bc.m_block * kBlockM;

  extern __shared__ __align__(16) unsigned char smem_unaligned[];
  unsigned char* smem = smem_unaligned + ((1024 - (smem_address(smem_unaligned) & 1023)) & 1023);  // swizzle atoms at 1024
  unsigned char* sQ = smem + T::kQOffset;
  unsigned char* sK = smem + T::kKOffset;
  unsigned char* sV = smem + T::kVOffset;
  E* sP = reinterpret_cast<E*>(smem + T::kPOffset);
  unsigned char* sBad = smem + T::kBadOffset;
  std::int64_t* sReduce = reinterpret_cast<std::int64_t*>(smem + T::kReduceOffset);

  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int wg = warp / 4;                     // warpgroup: rows [64 wg, 64 wg + 64) of the block
  const int wrow = wg * 64 + (warp % 4) * 16;  // this warp's first row within the block
  const int g = lane / 4, tq = lane % 4;

  const auto [q, k, v, o, lse] = block_tensors<E>(p, b, h);
  const auto [tiles, key_end] = block_keys<KeyLimits, T::kWarps, kBlockM, kBlockN>(p, b, row0, sReduce);

  std::int64_t row_limit[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const std::int64_t row = row0 + wrow + g + 8 * hh;
    row_limit[hh] = row < p.n_q ? row_key_limit<KeyLimits>(p, b, row) : 0;
  }

  // O in wgmma's m64n128 layout: element 4 j + 2 hh + e is row g + 8 hh of this warp's 16, column
  // 8 j + 2 tq + e.
  float acc[64];
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;

  if (tiles.end > 0) {
    load_tile(sQ, q, p.q_row_stride, row0, p.n_q);
    load_tile(sK, k, p.k_row_stride, 0, key_end);
    load_tile(sV, v, p.v_row_stride, 0, key_end);
    cp_async_commit();
  }
  const std::uint32_t q_address = smem_address(sQ) + std::uint32_t(wg) * 64 * 128;  // this warpgroup's 64 rows

  for (std::int64_t t = 0; t < tiles.end; ++t) {
    const std::int64_t key0 = t * kBlockN;
    const int stage = int(t & 1);
    cp_async_wait_all();
    wgmma_wait<0>();  // O += P V_{t-1} done: its V stage is the one the next loads overwrite
    hold(acc);
    fence_proxy_async();
    __syncthreads();  // K_t, V_t (and Q) landed for all; every warpgroup is done with the other stage
    if (t + 1 < tiles.end) {
      load_tile(sK + (stage ^ 1) * T::kTileBytes, k, p.k_row_stride, key0 + kBlockN, key_end);
      load_tile(sV + (stage ^ 1) * T::kTileBytes, v, p.v_row_stride, key0 + kBlockN, key_end);
      cp_async_commit();
    }
    const std::uint32_t k_address = smem_address(sK + stage * T::kTileBytes);
    unsigned char* sVt = sV + stage * T::kTileBytes;
    const std::uint32_t v_address = smem_address(sVt);

    // S = Q K_t^T, one wgmma group per half: 8 k16 steps over d, 32 bytes of each row per step,
    // four per 64-column panel; the second half's keys start 64 rows (8192 bytes) into each panel.
    float s[kHalves][kKeys / 2];
#pragma unroll
    for (int hf = 0; hf < kHalves; ++hf)
#pragma unroll
      for (int i = 0; i < kKeys / 2; ++i) s[hf][i] = 0.f;
    wgmma_fence();
#pragma unroll
    for (int hf = 0; hf < kHalves; ++hf) {
#pragma unroll
      for (int ks = 0; ks < 8; ++ks)
        wgmma_ss<D, kKeys>(s[hf], wgmma_descriptor(q_address + (ks >> 2) * 16384 + (ks & 3) * 32, 16, 1024),
                           wgmma_descriptor(k_address + hf * kKeys * 128 + (ks >> 2) * 16384 + (ks & 3) * 32, 16, 1024), ks > 0);
      wgmma_commit();
    }

    // Scores to the base-2 domain, masked keys to -inf, the tile's row max: each half as soon as
    // its product is done.
    const bool masked_tile = t >= tiles.first_masked;
    int limit[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const std::int64_t rel = row_limit[hh] - key0;
      limit[hh] = rel < 0 ? 0 : (rel > kBlockN ? kBlockN : int(rel));
    }
    float m[2] = {row_max[0], row_max[1]};
    wgmma_wait<kHalves - 1>();
    hold(s[0]);
    scale_and_mask<kKeys>(s[0], p.scale_log2, masked_tile, limit, 0, tq);
    max_into<kKeys>(s[0], m);
    if constexpr (kHalves == 2) {
      wgmma_wait<0>();
      hold(s[1]);
      scale_and_mask<kKeys>(s[1], p.scale_log2, masked_tile, limit, kKeys, tq);
      max_into<kKeys>(s[1], m);
    }
    // The online softmax's new max (over the quad that shares a row) and the rescaled O; a row
    // without a visible key yet exponentiates against 0, so never -inf - (-inf).
    float m_use[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      m[hh] = fmaxf(m[hh], __shfl_xor_sync(0xffffffffu, m[hh], 1));
      m[hh] = fmaxf(m[hh], __shfl_xor_sync(0xffffffffu, m[hh], 2));
      m_use[hh] = m[hh] == -INFINITY ? 0.f : m[hh];
      const float alpha = exp2f(row_max[hh] - m_use[hh]);  // 0 when the old max was -inf
      row_max[hh] = m[hh];
      row_sum[hh] *= alpha;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        acc[4 * j + 2 * hh] *= alpha;
        acc[4 * j + 2 * hh + 1] *= alpha;
      }
    }

    // In tiles with masked keys: non-finite V elements to 0 (two threads per key row) before any
    // product reads V_t, and whether there was one.
    bool nonfinite_v = false;
    if (masked_tile) {
      bool bad = false;
      const int key = tid >> 1, half = tid & 1;
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        uint4* chunk_ptr = reinterpret_cast<uint4*>(sVt + tile_offset(key, half * 8 + c));
        uint4 chunk = *chunk_ptr;
        unsigned short* halves = reinterpret_cast<unsigned short*>(&chunk);
        bool changed = false;
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (!Elem::finite_bits(halves[e])) halves[e] = 0, changed = true;
        if (changed) *chunk_ptr = chunk, bad = true;
      }
      sBad[tid] = bad ? 1 : 0;
      fence_proxy_async();  // the rewrites, before the barrier, for wgmma's reads
      nonfinite_v = __syncthreads_or(bad) != 0;
    }

    // P of each half, then O += P V_t over that half's keys (16 keys = 2048 bytes of each panel per
    // k16 step); the second half's exponentials run while the first half's product does.
    std::uint32_t pa[kHalves][kKeys / 16][4];
#pragma unroll
    for (int hf = 0; hf < kHalves; ++hf) {
      exponentiate_and_pack<Elem, kKeys>(s[hf], m_use, row_sum, pa[hf]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk)
        wgmma_rs_trans_b<D>(acc, pa[hf][kk], wgmma_descriptor(v_address + (hf * (kKeys / 16) + kk) * 2048, 16384, 1024));
      wgmma_commit();
    }

    // The terms the zeroed V elements left out, for keys of non-zero weight (rare: only tiles with
    // masked keys whose V held a NaN or Inf), from P in shared memory and V in global memory.
    if (nonfinite_v) {
#pragma unroll
      for (int hf = 0; hf < kHalves; ++hf)
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int prow = wrow + g + 8 * (r % 2);
            const int pcol = hf * kKeys + kk * 16 + 2 * tq + 8 * (r / 2);
            *reinterpret_cast<std::uint32_t*>(sP + prow * T::kPStride + pcol) = pa[hf][kk][r];
          }
      __syncthreads();
      wgmma_wait<0>();
      hold(acc);
#pragma unroll 1
      for (int j = 0; j < kBlockN; ++j) {
        if (sBad[2 * j] == 0 && sBad[2 * j + 1] == 0) continue;
        const E* vglobal = v + (key0 + j) * p.v_row_stride;  // flagged rows were loaded: key0 + j < key_end <= n_k
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float pj = Elem::to_float(sP[(wrow + g + 8 * hh) * T::kPStride + j]);
          if (pj == 0.f) continue;
#pragma unroll
          for (int jb = 0; jb < 16; ++jb)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float x = Elem::to_float(vglobal[8 * jb + 2 * tq + e]);
              if (!isfinite(x)) acc[4 * jb + 2 * hh + e] += pj * x;
            }
        }
      }
    }
  }
  wgmma_wait<0>();
  hold(acc);

  // Epilogue: O = acc / l, LSE = (max + log2 l) ln 2; rows without a visible key: O = 0, LSE = -inf.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float l = row_sum[hh];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const std::int64_t row = row0 + wrow + g + 8 * hh;
    if (row >= p.n_q) continue;
    const bool empty = l == 0.f;
    const float inv = empty ? 0.f : 1.f / l;
    E* orow = o + row * p.o_row_stride;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float x0 = empty ? 0.f : acc[4 * j + 2 * hh] * inv;
      const float x1 = empty ? 0.f : acc[4 * j + 2 * hh + 1] * inv;
      *reinterpret_cast<std::uint32_t*>(orow + 8 * j + 2 * tq) = Elem::pack(x0, x1);
    }
    if (tq == 0) lse[row] = empty ? -INFINITY : (row_max[hh] + log2f(l)) * kLn2;
  }
#endif
}

}  // namespace attn::cuda_fused

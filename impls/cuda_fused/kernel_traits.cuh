#pragma once
// cuda_fused's compile-time shapes and the PTX it is built from. Included by the device code
// only (forward_kernel.cuh, forward_f32_kernel.cuh, backward_kernel.cuh) and the launch headers.
//
// Tensor-core path (f16/bf16), per thread block: 4 warps; warp w owns rows [w * 16 * M, (w + 1) *
// 16 * M) of the block_m query rows, M = m-tiles per warp (2 for d <= 128, 1 for d = 256).
// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: with g = lane / 4 and t = lane % 4 (PTX ISA,
// "Matrix fragments for mma.m16n8k16 with floating point type"):
//   A (16 x 16, row-major), 4 x b32: a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16 x 8, "col": element (k, n) with k contiguous), 2 x b32: b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
//   C (16 x 8, f32), 4 floats: c0, c1 = (g, 2t..2t+1), c2, c3 = (g+8, 2t..2t+1)
// ldmatrix.m8n8.x4: lanes 8i..8i+7 give the row addresses of matrix i; each lane receives, per
// matrix, the two b16 at (row lane / 4, columns 2 (lane % 4)..+1); with .trans, at (rows 2 (lane %
// 4)..+1, column lane / 4) of the stored matrix.
//   Q (A operand) from sQ[row][d]: matrices (rows 0-7, d 0-7), (rows 8-15, d 0-7), (rows 0-7, d 8-15),
//     (rows 8-15, d 8-15) = a0..a3: lane gives row (lane % 16), column 8 (lane / 16).
//   K (B operand of S = Q K^T; B(k = d, n = key) = K[key][d], d contiguous = "col") from sK[key][d]
//     without .trans: matrices (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 0-7), (keys 8-15,
//     d 8-15) = b0, b1 of key tile n and b0, b1 of key tile n + 1: lane gives key (lane % 8) + 8 (lane
//     / 16), column 8 ((lane / 8) % 2).
//   V (B operand of O = P V; B(k = key, n = d) = V[key][d], d contiguous: row-major, hence .trans)
//     from sV[key][d] with .trans: matrices (keys 0-7, d 0-7), (keys 8-15, d 0-7), (keys 0-7, d
//     8-15), (keys 8-15, d 8-15) = b0, b1 of d tile n and b0, b1 of d tile n + 1: lane gives key
//     (lane % 8) + 8 ((lane / 8) % 2), column 8 (lane / 16).
//   P (A operand of O = P V) is the S accumulator in registers: keys 16 kk.. of a row are S tiles
//     2 kk and 2 kk + 1, so a0 = S[2kk].c0c1, a1 = S[2kk].c2c3, a2 = S[2kk+1].c0c1, a3 = S[2kk+1].c2c3.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.hpp"
#include "impls/cuda_fused/fused_params.hpp"
#include "impls/cuda_fused/tile_logic.hpp"

namespace attn::cuda_fused {

template <DType D> struct ElementOf;
template <> struct ElementOf<DType::f16> {
  using type = __half;
  using pair = __half2;
  static constexpr const char* mma_type = "f16";
  // A half is not finite when its exponent bits are all ones.
  static __device__ __forceinline__ bool finite_bits(unsigned short bits) { return (bits & 0x7C00u) != 0x7C00u; }
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);  // .x (lo) in the low 16 bits
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
  static __device__ __forceinline__ float to_float(type x) { return __half2float(x); }
  static __device__ __forceinline__ type from_float(float x) { return __float2half_rn(x); }
};
template <> struct ElementOf<DType::bf16> {
  using type = __nv_bfloat16;
  using pair = __nv_bfloat162;
  static constexpr const char* mma_type = "bf16";
  static __device__ __forceinline__ bool finite_bits(unsigned short bits) { return (bits & 0x7F80u) != 0x7F80u; }
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
  static __device__ __forceinline__ float to_float(type x) { return __bfloat162float(x); }
  static __device__ __forceinline__ type from_float(float x) { return __float2bfloat16_rn(x); }
};

// What the forward and backward tensor-core kernels share for one (dtype, head dimension): four
// warps, rows of HeadDim elements padded in shared memory, moved in 16-byte chunks, multiplied in
// k16 steps over d.
template <DType D, int HeadDim>
struct TensorCoreShape {
  using Elem = ElementOf<D>;
  using E = typename Elem::type;
  static constexpr DType kDType = D;
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowStride = HeadDim + smem_row_pad;  // shared-memory rows, elements
  static constexpr int kChunks = HeadDim / 8;                // 16-byte chunks per row
  static constexpr int kKSteps = HeadDim / 16;               // k16 steps over d
  static_assert(D == DType::f16 || D == DType::bf16, "the tensor-core kernels are f16/bf16");
  static_assert(sizeof(E) == 2, "f16/bf16 elements are 2 bytes");
};

// The tensor-core kernel's shapes for one (dtype, head dimension).
template <DType D, int HeadDim>
struct MmaTraits : TensorCoreShape<D, HeadDim> {
  // What the traits' own constants use (a dependent base's names need naming); the kernels
  // reach the rest through the base.
  using Shape = TensorCoreShape<D, HeadDim>;
  using Shape::kChunks, Shape::kRowStride, Shape::kThreads, Shape::kWarps;
  static constexpr int kMTiles = mma_m_tiles_per_warp(HeadDim);  // 16-row mma tiles per warp
  static constexpr int kWarpRows = 16 * kMTiles;
  static constexpr int kBlockM = kWarps * kWarpRows;
  static constexpr int kBlockN = mma_block_n(HeadDim);
  static constexpr int kPStride = kBlockN + smem_row_pad;    // sP rows, elements
  static constexpr int kSTiles = kBlockN / 8;                // n8 tiles of S
  static constexpr int kPSteps = kBlockN / 16;               // k16 steps of O = P V
  static constexpr int kOTiles = HeadDim / 8;                // n8 tiles of O
  // Shared memory layout (byte offsets), in the order of mma_smem_bytes.
  static constexpr int kQBytes = kBlockM * kRowStride * 2;
  static constexpr int kKVBytes = kBlockN * kRowStride * 2;
  static constexpr int kPBytes = kBlockM * kPStride * 2;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBytes;
  static constexpr int kVOffset = kKOffset + kKVBytes;
  static constexpr int kPOffset = kVOffset + kKVBytes;
  static constexpr int kBadOffset = kPOffset + kPBytes;
  static constexpr int kReduceOffset = kBadOffset + kThreads;
  static constexpr int kSmemBytes = kReduceOffset + 2 * kWarps * 8;

  static_assert(is_supported_head_dim(HeadDim), "head dimension not in {32, 64, 96, 128, 256}");
  static_assert(HeadDim % 16 == 0, "mma k-steps and ldmatrix x4 pairs of n8 tiles need d % 16 == 0");
  static_assert(kBlockN % 16 == 0 && kSTiles % 2 == 0 && kOTiles % 2 == 0, "ldmatrix x4 loads two n8 tiles at once");
  static_assert(kBlockM == mma_tile_shape(HeadDim).block_m && kBlockN == mma_tile_shape(HeadDim).block_n &&
                    kThreads == mma_tile_shape(HeadDim).threads,
                "traits and the host's tile shape agree");
  static_assert(kSmemBytes == mma_smem_bytes(HeadDim), "traits and the host's shared-memory size agree");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory beyond sm_90's 227 KB per block");
  static_assert((kRowStride * 2) % 16 == 0 && (kPStride * 2) % 16 == 0, "padded rows keep 16-byte alignment for cp.async");
  static_assert(kQOffset % 16 == 0 && kKOffset % 16 == 0 && kVOffset % 16 == 0 && kPOffset % 16 == 0 && kReduceOffset % 8 == 0,
                "shared regions aligned");
  static_assert((kBlockM * kChunks) % kThreads == 0 && (kBlockN * kChunks) % kThreads == 0, "tile loads divide among threads");
  static constexpr int kScanThreads = kThreads / kBlockN;  // threads scanning one V row for non-finite values
  static_assert(kThreads % kBlockN == 0 && kChunks % kScanThreads == 0, "the V scan splits each key row evenly among threads");
  // Accumulators per thread: O (kMTiles x kOTiles x 4) + S (kMTiles x kSTiles x 4) floats.
  static_assert(kMTiles * (kOTiles + kSTiles) * 4 <= 192, "accumulators leave registers for fragments and addresses");
};

// The backward kernels' shapes for one (dtype, head dimension) (backward_kernel.cuh; tile_logic.hpp
// has the host's copy): 4 warps, one 16-row mma tile each. dK/dV: the warps' 16 keys each of the
// block's kDkDvBlockN, kDkDvBlockM queries per step; dQ: the warps' 16 queries each of the block's
// kDqBlockM, kDqBlockN keys per step. The same fragment layouts as the forward's (above), with
// keys in the A role for S^T = K Q^T and dP^T = V dO^T (K and V rows as Q's, Q and dO rows as K's).
template <DType D, int HeadDim>
struct BackwardTraits : TensorCoreShape<D, HeadDim> {
  // What the traits' own constants use (a dependent base's names need naming); the kernels
  // reach the rest through the base.
  using Shape = TensorCoreShape<D, HeadDim>;
  using Shape::kChunks, Shape::kRowStride, Shape::kThreads, Shape::kWarps;
  static constexpr int kDTiles = HeadDim / 8;   // n8 tiles over d (dK, dV, dQ)
  static constexpr int kDkDvBlockM = backward_dk_dv_tile_shape(HeadDim).block_m;
  static constexpr int kDkDvBlockN = backward_dk_dv_tile_shape(HeadDim).block_n;
  static constexpr int kDqBlockM = backward_dq_tile_shape().block_m;
  static constexpr int kDqBlockN = backward_dq_tile_shape().block_n;
  static constexpr int kRowBytes = kRowStride * 2;
  // dK/dV shared memory: K, V, then two stages of Q, dO, then two stages of LSE (base 2), D
  // (f32) and key limits (int32), kDkDvBlockM each.
  static constexpr int kDkDvKOffset = 0;
  static constexpr int kDkDvVOffset = kDkDvKOffset + kDkDvBlockN * kRowBytes;
  static constexpr int kDkDvQOffset = kDkDvVOffset + kDkDvBlockN * kRowBytes;        // stage s at + s * kDkDvStageBytes
  static constexpr int kDkDvStageBytes = kDkDvBlockM * kRowBytes;
  static constexpr int kDkDvDoOffset = kDkDvQOffset + 2 * kDkDvStageBytes;
  static constexpr int kDkDvRowsOffset = kDkDvDoOffset + 2 * kDkDvStageBytes;        // [stage][lse2, delta, limit][query]
  static constexpr int kDkDvSmemBytes = kDkDvRowsOffset + 2 * 3 * kDkDvBlockM * 4;
  // dQ shared memory: Q, dO, then two stages of K and V, then the key-limit reduction.
  static constexpr int kDqQOffset = 0;
  static constexpr int kDqDoOffset = kDqQOffset + kDqBlockM * kRowBytes;
  static constexpr int kDqStageBytes = kDqBlockN * kRowBytes;
  static constexpr int kDqKOffset = kDqDoOffset + kDqBlockM * kRowBytes;            // stage s at + s * kDqStageBytes
  static constexpr int kDqVOffset = kDqKOffset + 2 * kDqStageBytes;
  static constexpr int kDqReduceOffset = kDqVOffset + 2 * kDqStageBytes;
  static constexpr int kDqSmemBytes = kDqReduceOffset + 2 * kWarps * 8;

  static_assert(HeadDim == 64 || HeadDim == 128, "backward kernels exist for d = 64 and 128");
  static_assert(kDkDvBlockN == kWarps * 16 && kDqBlockM == kWarps * 16, "one 16-row mma tile per warp");
  static_assert(kDkDvBlockM % 16 == 0 && kDqBlockN % 16 == 0 && kDTiles % 2 == 0, "ldmatrix x4 loads two n8 tiles at once");
  static_assert(kDkDvBlockM <= kThreads, "one thread per query of a step loads its row's LSE, D and key limit");
  static_assert(kDqBlockM <= kWarps * 32, "block_keys: one row per thread");
  static_assert(kDkDvSmemBytes == backward_dk_dv_smem_bytes(HeadDim) && kDqSmemBytes == backward_dq_smem_bytes(HeadDim),
                "traits and the host's shared-memory sizes agree");
  static_assert(kThreads == backward_dk_dv_tile_shape(HeadDim).threads && kThreads == backward_dq_tile_shape().threads,
                "traits and the host's thread counts agree");
  static_assert(kDkDvSmemBytes <= 227 * 1024 && kDqSmemBytes <= 227 * 1024, "shared memory beyond sm_90's 227 KB per block");
  static_assert(kRowBytes % 16 == 0 && kDkDvQOffset % 16 == 0 && kDkDvDoOffset % 16 == 0 && kDkDvRowsOffset % 16 == 0 &&
                    kDqKOffset % 16 == 0 && kDqVOffset % 16 == 0 && kDqReduceOffset % 8 == 0,
                "shared regions aligned for cp.async and int64");
  static_assert((kDkDvBlockN * kChunks) % kThreads == 0 && (kDkDvBlockM * kChunks) % kThreads == 0 &&
                    (kDqBlockM * kChunks) % kThreads == 0 && (kDqBlockN * kChunks) % kThreads == 0,
                "tile loads divide among threads");
  // Accumulators per thread: dK/dV kernel dK + dV (2 x d / 2) + S^T + dP^T (2 x block_m / 2)
  // floats; dQ kernel dQ (d / 2) + S + dP (2 x block_n / 2).
  static_assert(HeadDim + kDkDvBlockM <= 192 && HeadDim / 2 + kDqBlockN <= 192, "accumulators leave registers for fragments");
};

// The f32 kernel's shapes: 4 warps x 4 rows, one key per lane for the scores, d / 32 columns
// per lane for the output.
template <int HeadDim>
struct SimtTraits {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = 4;
  static constexpr int kBlockM = kWarps * kRowsPerWarp;
  static constexpr int kBlockN = 32;
  static constexpr int kCols = HeadDim / 32;
  static constexpr int kKStride = HeadDim + 1;  // lane j reads sK row j: banks (j + c) % 32 differ
  static constexpr int kSmemBytes = (kBlockM * HeadDim + kBlockN * kKStride + kBlockN * HeadDim) * 4;
  static_assert(is_supported_head_dim(HeadDim) && HeadDim % 32 == 0, "d / 32 output columns per lane");
  static_assert(kBlockN == 32, "one key per lane");
  static_assert(kBlockM == simt_tile_shape().block_m && kBlockN == simt_tile_shape().block_n && kThreads == simt_tile_shape().threads,
                "traits and the host's tile shape agree");
  static_assert(kSmemBytes == simt_smem_bytes(HeadDim), "traits and the host's shared-memory size agree");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory beyond sm_90's 227 KB per block");
};

// --- PTX ---------------------------------------------------------------------------------------

__device__ __forceinline__ std::uint32_t smem_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; src_bytes = 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async_16(void* smem, const void* global, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(global), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until every cp.async group this thread committed has completed.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem)));
}

// c += a * b on one 16 x 8 x 16 tile, f32 accumulation.
template <DType D>
__device__ __forceinline__ void mma_16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<DType::f16>(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<DType::bf16>(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// --- Launches ----------------------------------------------------------------------------------

// Above 48 KB of dynamic shared memory a kernel must opt in.
template <class Kernel>
cudaError_t opt_in_shared_memory(Kernel kernel, int smem_bytes) {
  return smem_bytes > 48 * 1024 ? cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes) : cudaSuccess;
}

// --- Shared by the kernels ---------------------------------------------------------------------

// The key limit of query row i of batch b (keys j >= it are masked by causality or padding).
// Params: FusedParams or BackwardParams (n_q, n_k, key_limit, causal).
template <bool KeyLimits, class Params>
__device__ __forceinline__ std::int64_t row_key_limit(const Params& p, std::int64_t b, std::int64_t i) {
  if constexpr (!KeyLimits) {
    return p.n_k;
  } else {
    if (p.key_limit) {
      const std::int64_t limit = p.key_limit[b * p.n_q + i];
      return limit < 0 ? 0 : (limit > p.n_k ? p.n_k : limit);
    }
    return causal_key_limit(p.causal, i, p.n_q, p.n_k);
  }
}

// Loads rows [row_begin, row_begin + kRows) of a [rows, d] tensor into padded shared rows,
// zero-filling rows >= row_end (partial tiles, keys past the block's key limit). Traits: the
// tensor-core kernels' (E, kChunks, kThreads, kRowStride).
template <class Traits, int kRows>
__device__ __forceinline__ void load_tile_async(typename Traits::E* smem, const typename Traits::E* global, std::int64_t row_stride,
                                                std::int64_t row_begin, std::int64_t row_end) {
  constexpr int kPerThread = kRows * Traits::kChunks / Traits::kThreads;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = int(threadIdx.x) + i * Traits::kThreads;
    const int row = e / Traits::kChunks, chunk = e % Traits::kChunks;
    const std::int64_t global_row = row_begin + row;
    const bool valid = global_row < row_end;
    const typename Traits::E* src = valid ? global + global_row * row_stride + chunk * 8 : global;
    cp_async_16(smem + row * Traits::kRowStride + chunk * 8, src, valid ? 16 : 0);
  }
}

// A block's (batch, query head) slices of Q, K, V (through the head's kv head), O and the LSE.
template <class E>
struct BlockTensors {
  const E* q;
  const E* k;
  const E* v;
  E* o;
  float* lse;
};
template <class E>
__device__ __forceinline__ BlockTensors<E> block_tensors(const FusedParams& p, std::int64_t b, std::int64_t h) {
  const std::int64_t kv = h / p.group;
  return {static_cast<const E*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride,
          static_cast<const E*>(p.k) + b * p.k_batch_stride + kv * p.k_head_stride,
          static_cast<const E*>(p.v) + b * p.v_batch_stride + kv * p.v_head_stride,
          static_cast<E*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride, p.lse + (b * p.h_q + h) * p.n_q};
}

// The key tiles a block of kBlockM <= kWarps * 32 query rows (from row0) visits, from its rows'
// smallest and largest key limit (rows >= n_q excluded; thread r reads row r's), reduced over the
// block's kWarps warps through reduce[2 kWarps] in shared memory; key_end: keys >= it are masked
// for every row of the block.
struct BlockKeys {
  KeyTileRange tiles;
  std::int64_t key_end;
};
template <bool KeyLimits, int kWarps, int kBlockM, int kBlockN, class Params>
__device__ __forceinline__ BlockKeys block_keys(const Params& p, std::int64_t b, std::int64_t row0, std::int64_t* reduce) {
  static_assert(kBlockM <= kWarps * 32, "one row per thread");
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  std::int64_t lo = p.n_k, hi = 0;
  if (tid < kBlockM && row0 + tid < p.n_q) lo = hi = row_key_limit<KeyLimits>(p, b, row0 + tid);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const std::int64_t other_lo = __shfl_xor_sync(0xffffffffu, lo, offset);
    const std::int64_t other_hi = __shfl_xor_sync(0xffffffffu, hi, offset);
    lo = other_lo < lo ? other_lo : lo;
    hi = other_hi > hi ? other_hi : hi;
  }
  if (lane == 0) reduce[warp] = lo, reduce[kWarps + warp] = hi;
  __syncthreads();
  lo = reduce[0], hi = reduce[kWarps];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
    lo = reduce[w] < lo ? reduce[w] : lo;
    hi = reduce[kWarps + w] > hi ? reduce[kWarps + w] : hi;
  }
  return {key_tile_range(lo, hi, kBlockN), hi};
}

__device__ __forceinline__ std::int64_t linear_block_index() {
  return std::int64_t(blockIdx.y) * std::int64_t(gridDim.x) + std::int64_t(blockIdx.x);
}

}  // namespace attn::cuda_fused

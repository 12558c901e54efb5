#pragma once
// Device code of cuda_cublas's stages (see kernels.hpp), templated on the problem's dtype.
// Included only by the per-dtype stages_<dtype>.cu files, each instantiating one dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "impls/cuda_cublas/kernels.hpp"
#include "impls/cuda_support/cuda_support.hpp"

namespace attn::cuda_cublas {

// The element type of a dtype and the type its scores, softmax and LSE are computed in.
template <DType D> struct KernelTraits;
template <> struct KernelTraits<DType::f64> {
  using Element = double;
  using Score = double;
  static constexpr const char* name = "f64";
};
template <> struct KernelTraits<DType::f32> {
  using Element = float;
  using Score = float;
  static constexpr const char* name = "f32";
};
template <> struct KernelTraits<DType::f16> {
  using Element = __half;
  using Score = float;
  static constexpr const char* name = "f16";
};
template <> struct KernelTraits<DType::bf16> {
  using Element = __nv_bfloat16;
  using Score = float;
  static constexpr const char* name = "bf16";
};

constexpr int warp_size = 32;
constexpr int max_threads_per_block = 128;  // the plan's rows_per_block (4) warps

__device__ inline float to_score(float x) { return x; }
__device__ inline double to_score(double x) { return x; }
__device__ inline float to_score(__half x) { return __half2float(x); }
__device__ inline float to_score(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class E> __device__ inline E from_score(float x);
template <> __device__ inline float from_score<float>(float x) { return x; }
template <> __device__ inline __half from_score<__half>(float x) { return __float2half_rn(x); }
template <> __device__ inline __nv_bfloat16 from_score<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <class E> __device__ inline E from_score(double x);
template <> __device__ inline double from_score<double>(double x) { return x; }

__device__ inline float exp_of(float x) { return expf(x); }
__device__ inline double exp_of(double x) { return exp(x); }
__device__ inline float log_of(float x) { return logf(x); }
__device__ inline double log_of(double x) { return log(x); }

template <class S> __device__ inline S warp_max(S x) {
  for (int offset = warp_size / 2; offset > 0; offset /= 2) {
    const S other = __shfl_xor_sync(0xffffffffu, x, offset);
    x = other > x ? other : x;
  }
  return x;
}
template <class S> __device__ inline S warp_sum(S x) {
  for (int offset = warp_size / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// V' = V with non-finite elements replaced by 0; flags the kv heads that had one.
template <DType D>
__global__ void __launch_bounds__(256) finite_values_kernel(KernelParams p) {
  using E = typename KernelTraits<D>::Element;
  const E* v = static_cast<const E*>(p.v);
  E* v_finite = static_cast<E*>(p.v_finite);
  const std::int64_t total = p.batch * p.h_kv * p.n_k * p.d_v, per_head = p.n_k * p.d_v;
  const std::int64_t step = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const E x = v[e];
    if (isfinite(to_score(x))) {
      v_finite[e] = x;
    } else {
      v_finite[e] = from_score<E>(typename KernelTraits<D>::Score(0));
      p.v_nonfinite[e / per_head] = 1;  // every writer stores the same value
    }
  }
}

// P and the LSE of each score row, one warp per row. Masked keys are skipped (weight exactly 0,
// never a finite stand-in); the row max is subtracted before exp, so exp never overflows, and
// s - max of two finite scores is at worst -inf (weight 0), never inf - inf. A row without a
// visible key gets weights 0 and LSE -inf.
template <DType D>
__global__ void __launch_bounds__(max_threads_per_block) masked_softmax_kernel(KernelParams p) {
  using E = typename KernelTraits<D>::Element;
  using S = typename KernelTraits<D>::Score;
  const int lane = int(threadIdx.x) % warp_size, warp = int(threadIdx.x) / warp_size;
  const S* scores = static_cast<const S*>(p.scores);
  const S* bias = static_cast<const S*>(p.bias);
  E* weights = static_cast<E*>(p.weights);
  S* lse = static_cast<S*>(p.lse);
  const std::int64_t step = std::int64_t(gridDim.x) * p.rows_per_block;
  for (std::int64_t row = std::int64_t(blockIdx.x) * p.rows_per_block + warp; row < p.rows; row += step) {
    const std::int64_t i = row % p.n_q, h = (row / p.n_q) % p.h_q, b = row / (p.n_q * p.h_q);
    std::int64_t limit = p.key_limit ? p.key_limit[b * p.n_q + i] : p.n_k;
    limit = limit < 0 ? 0 : (limit > p.n_k ? p.n_k : limit);
    const S* s = scores + row * p.n_k;
    const std::uint8_t* flags = p.bool_flags ? p.bool_flags + b * p.flags_batch_stride + h * p.flags_head_stride + i * p.n_k : nullptr;
    const S* row_bias = bias ? bias + b * p.bias_batch_stride + h * p.bias_head_stride + i * p.n_k : nullptr;
    auto visible = [&](std::int64_t j) { return j < limit && (flags == nullptr || flags[j] != 0); };
    auto score = [&](std::int64_t j) { return row_bias ? s[j] + row_bias[j] : s[j]; };

    S m = -INFINITY;
    for (std::int64_t j = lane; j < limit; j += warp_size)
      if (visible(j)) {
        const S x = score(j);
        m = x > m ? x : m;
      }
    m = warp_max(m);
    E* w = weights + row * p.n_k;
    if (m == S(-INFINITY)) {  // no visible key
      for (std::int64_t j = lane; j < p.n_k; j += warp_size) w[j] = from_score<E>(S(0));
      if (lane == 0) lse[row] = S(-INFINITY);
      continue;
    }
    S sum = 0;
    for (std::int64_t j = lane; j < limit; j += warp_size)
      if (visible(j)) sum += exp_of(score(j) - m);
    sum = warp_sum(sum);
    for (std::int64_t j = lane; j < p.n_k; j += warp_size) w[j] = from_score<E>(visible(j) ? exp_of(score(j) - m) / sum : S(0));
    if (lane == 0) lse[row] = m + log_of(sum);
  }
}

// O += the terms P_ij * V_jc that V' left out (V_jc non-finite), for keys of non-zero weight,
// in rows whose kv head had a non-finite V.
template <DType D>
__global__ void __launch_bounds__(max_threads_per_block) nonfinite_values_kernel(KernelParams p) {
  using E = typename KernelTraits<D>::Element;
  using S = typename KernelTraits<D>::Score;
  const int lane = int(threadIdx.x) % warp_size, warp = int(threadIdx.x) / warp_size;
  const E* weights = static_cast<const E*>(p.weights);
  const E* v = static_cast<const E*>(p.v);
  E* out = static_cast<E*>(p.out);
  const std::int64_t group = p.h_q / p.h_kv;
  const std::int64_t step = std::int64_t(gridDim.x) * p.rows_per_block;
  for (std::int64_t row = std::int64_t(blockIdx.x) * p.rows_per_block + warp; row < p.rows; row += step) {
    const std::int64_t h = (row / p.n_q) % p.h_q, b = row / (p.n_q * p.h_q);
    const std::int64_t kv = b * p.h_kv + h / group;
    if (p.v_nonfinite[kv] == 0) continue;
    const E* w = weights + row * p.n_k;
    const E* vv = v + kv * p.n_k * p.d_v;
    for (std::int64_t c = lane; c < p.d_v; c += warp_size) {
      S extra = 0;
      bool any = false;
      for (std::int64_t j = 0; j < p.n_k; ++j) {
        const S weight = to_score(w[j]);
        if (weight == S(0)) continue;
        const S x = to_score(vv[j * p.d_v + c]);
        if (!isfinite(x)) {
          extra += weight * x;
          any = true;
        }
      }
      if (any) out[row * p.d_v + c] = from_score<E>(to_score(out[row * p.d_v + c]) + extra);
    }
  }
}

// The backward's operands in the scores' type: `total` elements of `from` (the dtype) widened,
// non-finite ones replaced by 0 where `finite_only` (K': a masked key's dS is exactly 0, and
// 0 * NaN would reach every dQ row of its kv head).
template <DType D>
__global__ void __launch_bounds__(256) widen_kernel(const void* from, void* to, std::int64_t total, bool finite_only) {
  using E = typename KernelTraits<D>::Element;
  using S = typename KernelTraits<D>::Score;
  const E* in = static_cast<const E*>(from);
  S* out = static_cast<S*>(to);
  const std::int64_t step = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const S x = to_score(in[e]);
    out[e] = finite_only && !isfinite(x) ? S(0) : x;
  }
}

// The gradients rounded once to the dtype, from the f32 GEMMs' results.
template <DType D>
__global__ void __launch_bounds__(256) narrow_kernel(const void* from, void* to, std::int64_t total) {
  using E = typename KernelTraits<D>::Element;
  using S = typename KernelTraits<D>::Score;
  const S* in = static_cast<const S*>(from);
  E* out = static_cast<E*>(to);
  const std::int64_t step = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) out[e] = from_score<E>(in[e]);
}

// The backward's P and dS of each score row, one warp per row, in place: S becomes P and dP
// becomes dS, both in f32 (f64). P = exp(s - LSE) needs no second softmax: the forward's max and
// sum are in its LSE. Masked keys are skipped (P and dS exactly 0, their S and dP never read), and
// so is a row whose LSE is -inf (no visible key: it contributes nothing). D_i is the row sum of
// P dP, not FlashAttention's <dO_i, O_i> (which a fused kernel needs before it has any of a row's
// dP): here dP is materialised anyway, so the sum costs one more read of the row, is taken in f32
// (f64) over the same P that dS is formed from, and carries no rounding of O to its dtype (for f16
// and bf16 the larger error); the backward reads no O at all. In place is safe: each lane reads
// and writes only its own keys of its warp's row, and the warp's shuffle sum orders every read of
// the first sweep before any write of the second.
template <DType D>
__global__ void __launch_bounds__(max_threads_per_block) softmax_backward_kernel(KernelParams p) {
  using S = typename KernelTraits<D>::Score;
  const int lane = int(threadIdx.x) % warp_size, warp = int(threadIdx.x) / warp_size;
  S* scores = static_cast<S*>(p.scores_then_weights);
  S* d_weights = static_cast<S*>(p.d_weights_then_d_scores);
  const S* bias = static_cast<const S*>(p.bias);
  const S* lse = static_cast<const S*>(p.lse);
  const std::int64_t step = std::int64_t(gridDim.x) * p.rows_per_block;
  for (std::int64_t row = std::int64_t(blockIdx.x) * p.rows_per_block + warp; row < p.rows; row += step) {
    const std::int64_t i = row % p.n_q, h = (row / p.n_q) % p.h_q, b = row / (p.n_q * p.h_q);
    const S row_lse = lse[row];
    std::int64_t limit = p.key_limit ? p.key_limit[b * p.n_q + i] : p.n_k;
    limit = limit < 0 ? 0 : (limit > p.n_k ? p.n_k : limit);
    if (row_lse == S(-INFINITY)) limit = 0;
    S* s = scores + row * p.n_k;
    S* dp = d_weights + row * p.n_k;
    const std::uint8_t* flags = p.bool_flags ? p.bool_flags + b * p.flags_batch_stride + h * p.flags_head_stride + i * p.n_k : nullptr;
    const S* row_bias = bias ? bias + b * p.bias_batch_stride + h * p.bias_head_stride + i * p.n_k : nullptr;
    auto weight = [&](std::int64_t j) {
      if (j >= limit || (flags != nullptr && flags[j] == 0)) return S(0);
      return exp_of((row_bias ? s[j] + row_bias[j] : s[j]) - row_lse);
    };

    S d = 0;
    for (std::int64_t j = lane; j < limit; j += warp_size) {
      const S w = weight(j);
      if (w != S(0)) d += w * dp[j];
    }
    d = warp_sum(d);
    for (std::int64_t j = lane; j < p.n_k; j += warp_size) {
      const S w = weight(j);
      const S ds = w != S(0) ? w * (dp[j] - d) : S(0);
      s[j] = w;
      dp[j] = ds;
    }
  }
}

// Blocks for a grid-stride loop over `total` elements: at least one, at most 65536.
inline unsigned elementwise_grid(std::int64_t total, int threads) {
  const std::int64_t blocks = (total + threads - 1) / threads;
  return unsigned(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

// The launch template: one dtype, every stage.
template <DType D>
void launch_stage_for(Stage stage, const KernelParams& p, cudaStream_t stream) {
  static_assert(sizeof(typename KernelTraits<D>::Element) == (D == DType::f64 ? 8 : D == DType::f32 ? 4 : 2),
                "the element type must match the dtype's storage");
  static_assert(sizeof(typename KernelTraits<D>::Score) >= 4, "scores and the softmax run in f32 or f64");
  switch (stage) {
    case Stage::finite_values: {
      constexpr int threads = 256;
      finite_values_kernel<D><<<elementwise_grid(p.batch * p.h_kv * p.n_k * p.d_v, threads), threads, 0, stream>>>(p);
      cuda::check_launch("finite_values_kernel");
      return;
    }
    case Stage::widen_operands:
    case Stage::narrow_gradients: {
      // Q and dO widened, and the gradients narrowed, exactly where the dtype is narrower than the
      // scores (the plan's widened_operands); K' always.
      constexpr bool narrower = sizeof(typename KernelTraits<D>::Element) < sizeof(typename KernelTraits<D>::Score);
      const bool complete = p.q_wide && p.d_o_wide && p.dq_wide && p.dk_wide && p.dv_wide && p.dq && p.dk && p.dv;
      const bool none = !p.q_wide && !p.d_o_wide && !p.dq_wide && !p.dk_wide && !p.dv_wide;
      if (narrower ? !complete : !none)
        throw cuda::CudaError("cuda_cublas: the backward's widened buffers do not match the dtype (a bug in the plan)");
      constexpr int threads = 256;
      const std::int64_t q = p.batch * p.h_q * p.n_q * p.d_k, o = p.batch * p.h_q * p.n_q * p.d_v;
      const std::int64_t k = p.batch * p.h_kv * p.n_k * p.d_k, v = p.batch * p.h_kv * p.n_k * p.d_v;
      if (stage == Stage::widen_operands) {
        widen_kernel<D><<<elementwise_grid(k, threads), threads, 0, stream>>>(p.k, p.k_finite, k, true);
        cuda::check_launch("widen_kernel (K')");
        if (!narrower) return;
        widen_kernel<D><<<elementwise_grid(q, threads), threads, 0, stream>>>(p.q, p.q_wide, q, false);
        cuda::check_launch("widen_kernel (Q)");
        widen_kernel<D><<<elementwise_grid(o, threads), threads, 0, stream>>>(p.d_o, p.d_o_wide, o, false);
        cuda::check_launch("widen_kernel (dO)");
      } else if (narrower) {
        narrow_kernel<D><<<elementwise_grid(q, threads), threads, 0, stream>>>(p.dq_wide, p.dq, q);
        cuda::check_launch("narrow_kernel (dQ)");
        narrow_kernel<D><<<elementwise_grid(k, threads), threads, 0, stream>>>(p.dk_wide, p.dk, k);
        cuda::check_launch("narrow_kernel (dK)");
        narrow_kernel<D><<<elementwise_grid(v, threads), threads, 0, stream>>>(p.dv_wide, p.dv, v);
        cuda::check_launch("narrow_kernel (dV)");
      }
      return;
    }
    case Stage::masked_softmax:
    case Stage::nonfinite_values:
    case Stage::softmax_backward: {
      if (p.threads_per_block != p.rows_per_block * warp_size || p.threads_per_block > max_threads_per_block || p.grid_x < 1 ||
          p.grid_x > 2147483647)
        throw cuda::CudaError("cuda_cublas: the softmax launch parameters are inconsistent (a bug in the plan)");
      const dim3 grid(unsigned(p.grid_x)), block(unsigned(p.threads_per_block));
      if (stage == Stage::masked_softmax) {
        masked_softmax_kernel<D><<<grid, block, 0, stream>>>(p);
        cuda::check_launch("masked_softmax_kernel");
      } else if (stage == Stage::nonfinite_values) {
        nonfinite_values_kernel<D><<<grid, block, 0, stream>>>(p);
        cuda::check_launch("nonfinite_values_kernel");
      } else {
        softmax_backward_kernel<D><<<grid, block, 0, stream>>>(p);
        cuda::check_launch("softmax_backward_kernel");
      }
      return;
    }
  }
}

}  // namespace attn::cuda_cublas

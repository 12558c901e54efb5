#pragma once
// The CUDA kernels of cuda_cublas around its two GEMMs, seen from plain C++: one parameter
// struct and one launch per stage. The kernels are templates over the element type
// (kernel_traits.cuh); launch_stage turns the runtime dtype into the template parameter, in
// this one place, and each dtype's instantiation lives in its own .cu (stages_f32.cu, ...).
//
// Stages, in stream order around the GEMMs:
//   finite_values   V' = V with every non-finite element replaced by 0, and per (batch, kv head)
//                   a flag set when V held one. The output GEMM reads V': a masked key's weight
//                   is exactly 0, and 0 * NaN would otherwise leak a masked key's NaN or Inf
//                   into every row (a masked key must change no output bit).
//   [GEMM 1]        S = scale * Q K^T
//   masked_softmax  P and the LSE from S, one warp per row
//   [GEMM 2]        O = P V'
//   nonfinite_values  rows whose kv head held a non-finite V: add the non-finite terms back,
//                   for keys of non-zero weight only (what O = P V means with masked keys
//                   excluded). Returns at once for the other rows.
//
// The backward pass (cublas_plan.hpp's BackwardGemms), in stream order. Its arithmetic is in the
// scores' type, f32 (f64), and each gradient is rounded once to the dtype: no n_q x n_k matrix is
// stored in f16 or bf16 (an f16 dS would round into subnormals, and doubling dO would then not
// double dQ exactly).
//   widen_operands  K' = K in the scores' type with every non-finite element replaced by 0: the
//                   dQ GEMM reads K', as the forward's output GEMM reads V'. A key of weight 0 has
//                   dS = 0 exactly, and 0 * NaN would leak a masked key's NaN into every dQ row of
//                   its kv head. No terms are added back: a visible key with a non-finite K has a
//                   non-finite score, so its P and dS are not finite, or 0 where the score is
//                   -inf (then the pair contributes nothing, as cpu_naive skips it). For f16 and
//                   bf16 also Q and dO widened, the other operands of the gradients' GEMMs.
//   [GEMM]          S = scale * Q K^T (the forward's scores GEMM)
//   [GEMM]          dP = dO V^T, from the dtype's operands into f32 (f64)
//   softmax_backward  in place: S becomes P = exp(S + bias - LSE) from the given LSE, exactly 0
//                   for masked keys and in rows of LSE -inf (no visible key); D_i = sum_j P_ij
//                   dP_ij; dP becomes dS = P (dP - D) where P != 0, else exactly 0 (a masked key's
//                   dP may be NaN: V is not copied). One warp per row.
//   [GEMM]          dV = P^T dO;  dQ = scale * dS K';  dK = scale * dS^T Q, all in f32 (f64)
//   narrow_gradients  f16 and bf16: dQ, dK and dV rounded to the dtype (f32 and f64: the GEMMs
//                   wrote them directly)
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/dtype.hpp"

namespace attn::cuda_cublas {

struct KernelParams {
  // Shapes.
  std::int64_t batch = 0, h_q = 0, h_kv = 0, n_q = 0, n_k = 0, d_k = 0, d_v = 0;
  std::int64_t rows = 0;                // batch * h_q * n_q
  // Launch (SoftmaxLaunch of the plan; also used by nonfinite_values and softmax_backward).
  std::int64_t grid_x = 0;
  int threads_per_block = 0, rows_per_block = 0;
  // Device buffers. Scores, LSE and bias are f32 (f64 for f64 problems); the rest in the dtype.
  const void* v = nullptr;              // [b, h_kv, n_k, d_v]
  void* v_finite = nullptr;             // same shape: the output GEMM's V
  int* v_nonfinite = nullptr;           // [b * h_kv]: 1 where that kv head's V has a non-finite element
  const void* scores = nullptr;         // [rows, n_k]
  void* weights = nullptr;              // [rows, n_k], P
  void* lse = nullptr;                  // [rows]; the forward's output, the backward's input
  void* out = nullptr;                  // [rows, d_v]
  // The backward's. "wide": in the scores' type, null where the dtype is that type already (f32,
  // f64), whose GEMMs read Q and dO and write the gradients directly.
  const void* q = nullptr;              // [b, h_q, n_q, d_k]
  const void* k = nullptr;              // [b, h_kv, n_k, d_k]
  const void* d_o = nullptr;            // [b, h_q, n_q, d_v]
  void* k_finite = nullptr;             // K', in the scores' type: the dQ GEMM's K
  void* q_wide = nullptr;
  void* d_o_wide = nullptr;
  void* scores_then_weights = nullptr;  // [rows, n_k]: S, then P (softmax_backward)
  void* d_weights_then_d_scores = nullptr;  // [rows, n_k]: dP, then dS
  void* dq_wide = nullptr;              // the gradients' GEMMs' results
  void* dk_wide = nullptr;
  void* dv_wide = nullptr;
  void* dq = nullptr;                   // the gradients in the dtype
  void* dk = nullptr;
  void* dv = nullptr;
  // The mask, broadcast as Mask stores it; null where absent.
  const std::int64_t* key_limit = nullptr;  // [b, n_q]: keys j >= limit are masked (causal, padding)
  const std::uint8_t* bool_flags = nullptr; // [bb, hh, n_q, n_k]
  std::int64_t flags_batch_stride = 0, flags_head_stride = 0;  // elements; 0 where broadcast
  const void* bias = nullptr;               // [bb, hh, n_q, n_k]
  std::int64_t bias_batch_stride = 0, bias_head_stride = 0;
};

enum class Stage { finite_values, masked_softmax, nonfinite_values, widen_operands, softmax_backward, narrow_gradients };

// Enqueues one stage on `stream` for the given element type; throws attn::cuda::CudaError
// naming the kernel when the launch fails.
void launch_stage(Stage stage, DType dtype, const KernelParams& params, cudaStream_t stream);

// The per-dtype entry points behind launch_stage (instantiated in stages_<dtype>.cu).
template <DType D>
void launch_stage_for(Stage stage, const KernelParams& params, cudaStream_t stream);

// Whether this build holds a kernel image the current device can run (cudaSuccess), or why not
// (e.g. cudaErrorNoKernelImageForDevice: built for sm_90 and run on an older GPU).
cudaError_t kernel_image_status();

}  // namespace attn::cuda_cublas

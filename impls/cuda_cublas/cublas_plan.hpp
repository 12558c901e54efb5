#pragma once
// The host side of cuda_cublas (the flash-attention "params" step): a problem validated and
// turned into every argument of the two cublasGemmStridedBatchedEx calls and of the masked
// softmax launch. Plain C++ against the CUDA headers (no device needed), so the shapes, strides
// and rejections are unit-tested on a CPU-only machine (tests/cuda_cublas_plan_test.cpp).
//
// Layout: dense row-major BHSD. cuBLAS is column-major, so each row-major product is computed
// transposed: the row-major [rows x cols] matrix with leading dimension cols is the
// column-major [cols x rows] one.
//
// Grouped-query attention folds into the GEMM shape: the r = h_q / h_kv query heads that read
// kv head g are contiguous in Q ([r * n_q, d_k] rows starting at head g * r), so one batch
// entry per (batch, kv head) multiplies that block by the kv head's K^T and yields the scores
// of those r heads, already in [b, h_q, n_q, n_k] order. Batch entry e = b * h_kv + g.
//   scores: S^T (n_k x r*n_q, ldc n_k) = op_T(K) (n_k x d_k, lda d_k) . Q^T (d_k x r*n_q, ldb d_k)
//   output: O^T (d_v x r*n_q, ldc d_v) = V^T (d_v x n_k, lda d_v) . P^T (n_k x r*n_q, ldb n_k)
// The backward pass (operation backward) adds four, folded the same way, so that dV and dK, which
// sum over queries, sum over the group's r * n_q rows inside one GEMM (the GQA sum, in one fixed
// order, no atomics). dP is the dtype's product into f32 (f64), as S; the other three run in the
// scores' type on P and dS (never rounded to the dtype), K' and, for f16 and bf16, copies of Q and
// dO widened to f32:
//   dP: dP^T (n_k x r*n_q, ldc n_k) = op_T(V) (n_k x d_v, lda d_v) . dO^T (d_v x r*n_q, ldb d_v)
//   dV: dV^T (d_v x n_k, ldc d_v) = dO^T (d_v x r*n_q, lda d_v) . op_T(P^T) (r*n_q x n_k, ldb n_k)
//   dQ: dQ^T (d_k x r*n_q, ldc d_k) = K'^T (d_k x n_k, lda d_k) . dS^T (n_k x r*n_q, ldb n_k)
//   dK: dK^T (d_k x n_k, ldc d_k) = Q^T (d_k x r*n_q, lda d_k) . op_T(dS^T) (r*n_q x n_k, ldb n_k)
#include <cstdint>
#include <optional>
#include <string>

#include <cublas_api.h>
#include <library_types.h>

#include "core/precision.hpp"
#include "core/problem.hpp"

namespace attn::cuda_cublas {

// The products' precision is core/precision.hpp's MatmulPrecision: working (f32 accumulation,
// f64 for f64) or, for f32 inputs, tf32 (TF32 tensor cores, f32 accumulation). bf16 products
// are not offered.

// The arguments of one cublasGemmStridedBatchedEx, in cuBLAS's column-major terms. Everything
// is 64-bit here; the plan rejects a problem whose m, n, k, ld* or batch count exceeds the
// 32-bit int the call takes.
struct GemmArgs {
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between batch entries
  std::int64_t batch_count = 0;
  cudaDataType_t a_type = CUDA_R_32F, b_type = CUDA_R_32F, c_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  double alpha = 1, beta = 0;  // passed as float, or double for CUBLAS_COMPUTE_64F
};

// One warp per score row, rows_per_block warps per block; blocks loop (grid-stride) when the
// rows outnumber what grid.x can hold, so b * h_q * n_q is not limited by the grid.
struct SoftmaxLaunch {
  std::int64_t rows = 0;             // b * h_q * n_q
  int threads_per_block = 0;         // rows_per_block * 32
  int rows_per_block = 0;
  std::int64_t grid_x = 0;           // <= max_grid_x
  bool grid_strided = false;         // grid_x * rows_per_block < rows
  static constexpr std::int64_t max_grid_x = 2147483647;  // 2^31 - 1
};

// The backward pass's GEMMs after S (which it recomputes with the forward's arguments).
struct BackwardGemms {
  GemmArgs d_weights;                // dP = dO V^T, f32 (f64)
  GemmArgs d_values;                 // dV = P^T dO, summed over the group; f32 (f64), as the next two
  GemmArgs d_queries;                // dQ = scale * dS K' (K' = K, non-finite elements 0)
  GemmArgs d_keys;                   // dK = scale * dS^T Q, summed over the group
};

struct CublasAttentionPlan {
  Problem problem;
  MatmulPrecision precision = MatmulPrecision::working;
  std::int64_t group = 1;            // r = h_q / h_kv query heads per kv head
  GemmArgs scores;                   // S = scale * Q K^T, f32 (f64 for f64 problems)
  GemmArgs output;                   // O = P V in the problem's dtype (the forward's)
  BackwardGemms backward;            // operation backward only; batch_count 0 otherwise
  // The backward's dtype is narrower than the scores' (f16, bf16): its GEMMs read f32 copies of Q
  // and dO and write f32 gradients, which are then rounded once to the dtype.
  bool widened_operands = false;
  SoftmaxLaunch softmax;             // the masked softmax, or the backward's softmax_backward
  // Element counts and sizes of the device buffers.
  int element_bytes = 0;             // Q, K, V, P, O
  int score_bytes = 0;               // S and the softmax's arithmetic: 4 (f32) or 8 (f64)
  std::int64_t q_elements = 0, k_elements = 0, v_elements = 0, o_elements = 0;
  std::int64_t score_elements = 0;   // S and P (and the backward's dP and dS): b * h_q * n_q * n_k
  std::int64_t lse_elements = 0;     // b * h_q * n_q
  // Everything the run allocates on the device, for the memory check in supports(). Forward: the
  // inputs, a copy of V, S, P, O, the LSE, the mask, cuBLAS's workspace, guards. Backward: Q, K,
  // K', V, dO, the LSE, S (then P) and dP (then dS), dQ, dK, dV, the wide copies and results where
  // widened, the mask, the workspace, guards.
  double device_bytes = 0;
};

// cuBLAS workspace per run: fixed, so that the algorithm choice (and the bits) do not depend on
// what memory happens to be free. 32 MiB is what cuBLAS recommends for Hopper.
inline constexpr std::size_t cublas_workspace_bytes = std::size_t(32) << 20;
// Guard bytes before and after O and the LSE on the device.
inline constexpr std::size_t guard_bytes = 256;

struct PlanResult {
  std::optional<CublasAttentionPlan> plan;
  std::string reason;  // why not, when !plan
};

// Validates the problem and fills the plan for its operation, or says why cuBLAS cannot run it here
// (an invalid problem, TF32 for a dtype other than f32, a dimension beyond cuBLAS's 32-bit int, or
// what neither pass computes: a window with a lower bound, soft-capping, sinks, dropout, a layout
// other than BHSD, tensors in dtypes of their own).
PlanResult make_cublas_plan(const Problem& problem, MatmulPrecision precision);

}  // namespace attn::cuda_cublas

#include "impls/cuda_cublas/cublas_plan.hpp"

#include <algorithm>
#include <exception>
#include <limits>

#include <fmt/format.h>

namespace attn::cuda_cublas {
namespace {

constexpr std::int64_t int_max = std::numeric_limits<int>::max();
constexpr int warps_per_block = 4;

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f64: return CUDA_R_64F;
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

// The first GEMM argument beyond cuBLAS's 32-bit int, or "".
std::string int_overflow(const char* gemm, const GemmArgs& g) {
  const std::pair<const char*, std::int64_t> values[] = {{"m", g.m},     {"n", g.n},     {"k", g.k},
                                                         {"lda", g.lda}, {"ldb", g.ldb}, {"ldc", g.ldc},
                                                         {"batch count", g.batch_count}};
  for (auto [name, value] : values)
    if (value > int_max)
      return fmt::format("the {} GEMM's {} = {} exceeds cuBLAS's 32-bit int (cublasGemmStridedBatchedEx)", gemm, name, value);
  return "";
}

}  // namespace

PlanResult make_cublas_plan(const Problem& p, MatmulPrecision precision) {
  PlanResult result;
  try {
    p.validate();
  } catch (const std::exception& e) {
    result.reason = fmt::format("invalid problem: {}", e.what());
    return result;
  }
  if (precision == MatmulPrecision::bf16) {
    result.reason = "cuda_cublas offers no bf16 products of f32 inputs";
    return result;
  }
  if (precision == MatmulPrecision::tf32 && p.dtype != DType::f32) {
    result.reason = fmt::format("TF32 products apply to f32 inputs only (got {})", to_string(p.dtype));
    return result;
  }
  if (!p.window.as_causal()) {
    // The kernels take one key limit per row (keys j >= limit masked): no lower bound.
    result.reason = fmt::format("window {} is not supported: the kernels mask by one key limit per row (causal windows and padding only)",
                                to_string(p.window));
    return result;
  }
  const double scores_total = double(p.batch) * double(p.h_q) * double(p.n_q) * double(p.n_k);
  if (scores_total > 0x1p62) {
    result.reason = fmt::format("the score matrix would hold {:.3g} elements (more than 2^62)", scores_total);
    return result;
  }

  CublasAttentionPlan plan;
  plan.problem = p;
  plan.precision = precision;
  plan.group = p.h_q / p.h_kv;
  const bool f64 = p.dtype == DType::f64;
  plan.element_bytes = bytes_per_element(p.dtype);
  plan.score_bytes = f64 ? 8 : 4;
  plan.q_elements = p.batch * p.h_q * p.n_q * p.d_k;
  plan.k_elements = p.batch * p.h_kv * p.n_k * p.d_k;
  plan.v_elements = p.batch * p.h_kv * p.n_k * p.d_v;
  plan.o_elements = p.batch * p.h_q * p.n_q * p.d_v;
  plan.score_elements = p.batch * p.h_q * p.n_q * p.n_k;
  plan.lse_elements = p.batch * p.h_q * p.n_q;

  const std::int64_t r = plan.group;
  const cudaDataType_t element = cuda_type(p.dtype);
  const cudaDataType_t score = f64 ? CUDA_R_64F : CUDA_R_32F;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F
                                          : (precision == MatmulPrecision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);

  // S^T = op_T(K) . Q^T per (batch, kv head); the scale folded into alpha.
  GemmArgs& s = plan.scores;
  s.trans_a = CUBLAS_OP_T;
  s.trans_b = CUBLAS_OP_N;
  s.m = p.n_k;
  s.n = r * p.n_q;
  s.k = p.d_k;
  s.lda = p.d_k;
  s.ldb = p.d_k;
  s.ldc = p.n_k;
  s.stride_a = p.n_k * p.d_k;
  s.stride_b = r * p.n_q * p.d_k;
  s.stride_c = r * p.n_q * p.n_k;
  s.batch_count = p.batch * p.h_kv;
  s.a_type = s.b_type = element;
  s.c_type = score;
  s.compute = compute;
  s.alpha = p.effective_scale();
  s.beta = 0;

  // O^T = V^T . P^T per (batch, kv head); P in the input dtype.
  GemmArgs& o = plan.output;
  o.trans_a = CUBLAS_OP_N;
  o.trans_b = CUBLAS_OP_N;
  o.m = p.d_v;
  o.n = r * p.n_q;
  o.k = p.n_k;
  o.lda = p.d_v;
  o.ldb = p.n_k;
  o.ldc = p.d_v;
  o.stride_a = p.n_k * p.d_v;
  o.stride_b = r * p.n_q * p.n_k;
  o.stride_c = r * p.n_q * p.d_v;
  o.batch_count = p.batch * p.h_kv;
  o.a_type = o.b_type = o.c_type = element;
  o.compute = compute;
  o.alpha = 1;
  o.beta = 0;

  for (auto [name, gemm] : {std::pair{"scores", &s}, std::pair{"output", &o}})
    if (std::string overflow = int_overflow(name, *gemm); !overflow.empty()) {
      result.reason = std::move(overflow);
      return result;
    }

  SoftmaxLaunch& l = plan.softmax;
  l.rows = plan.lse_elements;
  l.rows_per_block = warps_per_block;
  l.threads_per_block = warps_per_block * 32;
  const std::int64_t blocks = (l.rows + warps_per_block - 1) / warps_per_block;
  l.grid_x = std::min(blocks, SoftmaxLaunch::max_grid_x);
  l.grid_strided = l.grid_x < blocks;

  const double eb = plan.element_bytes, sb = plan.score_bytes;
  double bytes = eb * double(plan.q_elements + plan.k_elements + 2 * plan.v_elements + plan.o_elements);  // V and its finite copy
  bytes += (sb + eb) * double(plan.score_elements);                                                        // S and P
  bytes += sb * double(plan.lse_elements);
  bytes += 4.0 * double(guard_bytes) + double(cublas_workspace_bytes);
  bytes += 4.0 * double(p.batch * p.h_kv);                                                                  // non-finite V flags
  if (!p.window.is_none() || p.padding.kind != KeyPadding::Kind::none) bytes += 8.0 * double(p.batch * p.n_q);  // key limits
  if (p.bool_mask.enabled) bytes += broadcast_elements(p, p.bool_mask.broadcast);
  if (p.bias.enabled) bytes += sb * broadcast_elements(p, p.bias.broadcast);
  plan.device_bytes = bytes;

  result.plan = std::move(plan);
  return result;
}

}  // namespace attn::cuda_cublas

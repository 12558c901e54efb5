#include "impls/cuda_cublas/cublas_plan.hpp"

#include <algorithm>
#include <exception>
#include <limits>
#include <utility>
#include <vector>

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
  // What neither pass computes; covers() refuses each undeclared one first, but a caller of
  // supports() or run() alone must not get attention without it.
  if (p.softcap) {
    result.reason = "soft-capping is not supported: the softmax kernels take the scores as the GEMM writes them";
    return result;
  }
  if (p.sinks.enabled) {
    result.reason = "attention sinks are not supported: the softmax kernels have no sink term";
    return result;
  }
  if (p.dropout.enabled()) {
    result.reason = "dropout is not supported: the kernels draw no keep mask";
    return result;
  }
  if (p.layout != Layout::bhsd) {
    result.reason = fmt::format("layout {} is not supported: the GEMMs' strides are dense BHSD's", to_string(p.layout));
    return result;
  }
  if (p.mixed()) {
    result.reason = "tensors in dtypes of their own are not supported: every buffer is in the problem's dtype";
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

  const bool backward = p.operation == Operation::backward;
  if (backward) {
    plan.widened_operands = plan.element_bytes < plan.score_bytes;
    // dP^T = op_T(V) . dO^T: the scores GEMM with V for K and dO for Q; in f32 (f64), as S.
    GemmArgs& dp = plan.backward.d_weights;
    dp = s;
    dp.k = p.d_v;
    dp.lda = p.d_v;
    dp.ldb = p.d_v;
    dp.stride_a = p.n_k * p.d_v;
    dp.stride_b = r * p.n_q * p.d_v;
    dp.alpha = 1;

    // dV^T = dO^T . op_T(P^T): the group's r * n_q rows are the inner dimension.
    GemmArgs& dv = plan.backward.d_values;
    dv.trans_a = CUBLAS_OP_N;
    dv.trans_b = CUBLAS_OP_T;
    dv.m = p.d_v;
    dv.n = p.n_k;
    dv.k = r * p.n_q;
    dv.lda = p.d_v;
    dv.ldb = p.n_k;
    dv.ldc = p.d_v;
    dv.stride_a = r * p.n_q * p.d_v;
    dv.stride_b = r * p.n_q * p.n_k;
    dv.stride_c = p.n_k * p.d_v;
    dv.batch_count = p.batch * p.h_kv;
    dv.a_type = dv.b_type = dv.c_type = score;
    dv.compute = compute;
    dv.alpha = 1;
    dv.beta = 0;

    // dQ^T = K'^T . dS^T: the output GEMM with K' for V and dS for P, the scale in alpha.
    GemmArgs& dq = plan.backward.d_queries;
    dq = o;
    dq.m = p.d_k;
    dq.lda = p.d_k;
    dq.ldc = p.d_k;
    dq.stride_a = p.n_k * p.d_k;
    dq.stride_c = r * p.n_q * p.d_k;
    dq.a_type = dq.b_type = dq.c_type = score;
    dq.alpha = p.effective_scale();

    // dK^T = Q^T . op_T(dS^T): the dV GEMM with Q for dO and dS for P, the scale in alpha.
    GemmArgs& dk = plan.backward.d_keys;
    dk = dv;
    dk.m = p.d_k;
    dk.lda = p.d_k;
    dk.ldc = p.d_k;
    dk.stride_a = r * p.n_q * p.d_k;
    dk.stride_c = p.n_k * p.d_k;
    dk.alpha = p.effective_scale();
  }

  std::vector<std::pair<const char*, const GemmArgs*>> gemms{{"scores", &s}};
  if (backward)
    gemms.insert(gemms.end(), {{"dP", &plan.backward.d_weights}, {"dV", &plan.backward.d_values}, {"dQ", &plan.backward.d_queries},
                               {"dK", &plan.backward.d_keys}});
  else
    gemms.emplace_back("output", &o);
  for (auto [name, gemm] : gemms)
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
  double bytes = 0;
  if (backward) {
    // Q and dQ, K and dK, V and dV, dO; K'; S then P, dP then dS; three guarded outputs. Widened:
    // Q and dO, and the three gradients as the GEMMs write them.
    bytes += eb * double(2 * plan.q_elements + 2 * plan.k_elements + 2 * plan.v_elements + plan.o_elements);
    bytes += sb * double(plan.k_elements + 2 * plan.score_elements);
    if (plan.widened_operands) bytes += sb * double(2 * plan.q_elements + plan.o_elements + plan.k_elements + plan.v_elements);
    bytes += 6.0 * double(guard_bytes);
  } else {
    bytes += eb * double(plan.q_elements + plan.k_elements + 2 * plan.v_elements + plan.o_elements);  // V and its finite copy
    bytes += (sb + eb) * double(plan.score_elements);                                                  // S and P
    bytes += 4.0 * double(guard_bytes);
    bytes += 4.0 * double(p.batch * p.h_kv);  // non-finite V flags
  }
  bytes += sb * double(plan.lse_elements) + double(cublas_workspace_bytes);
  if (!p.window.is_none() || p.padding.kind != KeyPadding::Kind::none) bytes += 8.0 * double(p.batch * p.n_q);  // key limits
  if (p.bool_mask.enabled) bytes += broadcast_elements(p, p.bool_mask.broadcast);
  if (p.bias.enabled) bytes += sb * broadcast_elements(p, p.bias.broadcast);
  plan.device_bytes = bytes;

  result.plan = std::move(plan);
  return result;
}

}  // namespace attn::cuda_cublas

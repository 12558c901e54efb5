#include "impls/cuda_fused/fused_plan.hpp"

#include <cmath>

#include <fmt/format.h>

namespace attn::cuda_fused {
namespace {

FusedPlanResult no(std::string why) { return FusedPlanResult{std::nullopt, std::move(why)}; }

}  // namespace

FusedPlanResult make_fused_plan(const Problem& p, bool hopper) {
  try {
    p.validate();
  } catch (const std::exception& e) {
    return no(e.what());
  }
  if (p.dtype == DType::f64)
    return no("f64 is not supported: the fused kernel computes in f32 (f16/bf16 tensor-core products or f32 FMA); cuda_cublas runs f64");
  if (!p.window.as_causal())
    return no(fmt::format("window {} is not supported: the fused kernel computes causal windows and key padding only (no lower bound)",
                          to_string(p.window)));
  const std::int64_t d = kernel_head_dim(p.d_k, p.d_v);
  if (d == 0)
    return no(fmt::format("head dimensions d_k = {}, d_v = {}: the largest instantiated kernel is d = 256", p.d_k, p.d_v));

  FusedPlan plan;
  plan.problem = p;
  FusedParams& k = plan.params;
  k.batch = p.batch, k.h_q = p.h_q, k.h_kv = p.h_kv, k.n_q = p.n_q, k.n_k = p.n_k, k.head_dim = d;
  k.group = p.h_q / p.h_kv;
  plan.pad_q_k = p.d_k != d;
  plan.pad_v_o = p.d_v != d;
  // Dense row-major BHSD, the harness's layout (or the run's padded copies of it, d columns).
  k.q_row_stride = d, k.q_head_stride = p.n_q * d, k.q_batch_stride = p.h_q * p.n_q * d;
  k.k_row_stride = d, k.k_head_stride = p.n_k * d, k.k_batch_stride = p.h_kv * p.n_k * d;
  k.v_row_stride = d, k.v_head_stride = p.n_k * d, k.v_batch_stride = p.h_kv * p.n_k * d;
  k.o_row_stride = d, k.o_head_stride = p.n_q * d, k.o_batch_stride = p.h_q * p.n_q * d;
  const double scale = p.effective_scale();
  k.scale = static_cast<float>(scale);
  k.scale_log2 = static_cast<float>(scale * 1.4426950408889634073599246810018921);  // log2(e)
  if (!std::isfinite(k.scale) || !std::isfinite(k.scale_log2))
    return no(fmt::format("scale {} is not finite in f32", scale));

  const Causal causal = *p.window.as_causal();
  k.causal = causal == Causal::top_left ? CausalMode::top_left : causal == Causal::bottom_right ? CausalMode::bottom_right : CausalMode::none;
  plan.upload_key_limit = p.padding.kind != KeyPadding::Kind::none;
  k.key_limits = causal != Causal::none || plan.upload_key_limit;
  k.element_mask = p.bool_mask.enabled || p.bias.enabled;  // their strides: the run's, from the uploaded tensors

  k.dtype = p.dtype;
  const bool tensor_cores = p.dtype == DType::f16 || p.dtype == DType::bf16;
  k.wgmma = hopper && wgmma_eligible(tensor_cores, d, k.element_mask);
  k.tile = k.wgmma ? wgmma_tile_shape() : tensor_cores ? mma_tile_shape(int(d)) : simt_tile_shape();
  k.smem_bytes = k.wgmma ? wgmma_smem_bytes() : tensor_cores ? mma_smem_bytes(int(d)) : simt_smem_bytes(int(d));
  k.num_m_blocks = (p.n_q + k.tile.block_m - 1) / k.tile.block_m;
  if (k.num_m_blocks > max_grid_x * max_grid_y / p.batch / p.h_q)
    return no(fmt::format("{} x {} x {} query tiles are more blocks than a grid holds", p.batch, p.h_q, k.num_m_blocks));
  k.total_blocks = p.batch * p.h_q * k.num_m_blocks;
  k.grid = grid_shape(k.total_blocks);
  if (!k.grid.ok) return no(fmt::format("{} blocks are more than a grid holds", k.total_blocks));
  return FusedPlanResult{std::move(plan), {}};
}

FusedBackwardPlanResult make_fused_backward_plan(const Problem& p) {
  auto no = [](std::string why) { return FusedBackwardPlanResult{std::nullopt, std::move(why)}; };
  try {
    p.validate();
  } catch (const std::exception& e) {
    return no(e.what());
  }
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    return no(fmt::format("the backward pass is not supported in {}: its kernels are tensor-core ones (mma.sync on f16/bf16 operands); "
                          "cpu_blocked computes it",
                          to_string(p.dtype)));
  if (!p.window.as_causal())
    return no(fmt::format("window {} is not supported: the fused kernels compute causal windows and key padding only (no lower bound)",
                          to_string(p.window)));
  if (p.bool_mask.enabled)
    return no("a boolean mask is not supported by the backward pass: its kernels take one key limit per query row (causality and "
              "padding), not per-element flags");
  if (p.bias.enabled)
    return no("an additive bias is not supported by the backward pass: its kernels add no bias to the recomputed scores and compute no "
              "dBias");
  const std::int64_t d = backward_kernel_head_dim(p.d_k, p.d_v);
  if (d == 0)
    return no(fmt::format("head dimensions d_k = {}, d_v = {} are not supported by the backward pass: its kernels are built for d = 64 "
                          "and 128 (smaller ones zero-padded), since dK and dV of a key tile stay in registers",
                          p.d_k, p.d_v));

  FusedBackwardPlan plan;
  plan.problem = p;
  BackwardParams& k = plan.params;
  k.batch = p.batch, k.h_q = p.h_q, k.h_kv = p.h_kv, k.n_q = p.n_q, k.n_k = p.n_k, k.head_dim = d;
  k.group = p.h_q / p.h_kv;
  plan.pad_q_k = p.d_k != d;
  plan.pad_v = p.d_v != d;
  k.q_head_stride = p.n_q * d, k.q_batch_stride = p.h_q * p.n_q * d;
  k.k_head_stride = p.n_k * d, k.k_batch_stride = p.h_kv * p.n_k * d;
  k.o_width = p.d_v;
  const double scale = p.effective_scale();
  k.scale = static_cast<float>(scale);
  k.scale_log2 = static_cast<float>(scale * 1.4426950408889634073599246810018921);
  if (!std::isfinite(k.scale) || !std::isfinite(k.scale_log2)) return no(fmt::format("scale {} is not finite in f32", scale));
  const Causal causal = *p.window.as_causal();
  k.causal = causal == Causal::top_left ? CausalMode::top_left : causal == Causal::bottom_right ? CausalMode::bottom_right : CausalMode::none;
  plan.upload_key_limit = p.padding.kind != KeyPadding::Kind::none;

  k.dtype = p.dtype;
  k.dk_dv_tile = backward_dk_dv_tile_shape(int(d));
  k.dq_tile = backward_dq_tile_shape();
  k.dk_dv_smem_bytes = backward_dk_dv_smem_bytes(int(d));
  k.dq_smem_bytes = backward_dq_smem_bytes(int(d));
  k.num_n_blocks = (p.n_k + k.dk_dv_tile.block_n - 1) / k.dk_dv_tile.block_n;
  k.num_m_blocks = (p.n_q + k.dq_tile.block_m - 1) / k.dq_tile.block_m;
  if (k.num_n_blocks > max_grid_x * max_grid_y / p.batch / p.h_kv || k.num_m_blocks > max_grid_x * max_grid_y / p.batch / p.h_q)
    return no(fmt::format("{} x {} x {} query tiles or {} x {} x {} key tiles are more blocks than a grid holds", p.batch, p.h_q,
                          k.num_m_blocks, p.batch, p.h_kv, k.num_n_blocks));
  k.dk_dv_blocks = p.batch * p.h_kv * k.num_n_blocks;
  k.dq_blocks = p.batch * p.h_q * k.num_m_blocks;
  k.dk_dv_grid = grid_shape(k.dk_dv_blocks);
  k.dq_grid = grid_shape(k.dq_blocks);
  if (!k.dk_dv_grid.ok || !k.dq_grid.ok) return no(fmt::format("{} or {} blocks are more than a grid holds", k.dk_dv_blocks, k.dq_blocks));
  return FusedBackwardPlanResult{std::move(plan), {}};
}

}  // namespace attn::cuda_fused

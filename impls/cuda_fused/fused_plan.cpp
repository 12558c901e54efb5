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

}  // namespace attn::cuda_fused

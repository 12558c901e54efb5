#pragma once
// The backward pass's launch template: for one (dtype, head dimension), the preprocessing, the dQ
// kernel and the dK/dV kernel on one stream, their grids from the parameters, their dynamic shared
// memory (opted in above 48 KB once per instantiation).
#include <algorithm>

#include "impls/cuda_fused/backward_kernel.cuh"
#include "impls/cuda_fused/dispatch.hpp"
#include "impls/cuda_support/cuda_support.hpp"

namespace attn::cuda_fused {

template <DType D, int HeadDim>
void launch_backward_for(const BackwardParams& p, cudaStream_t stream) {
  using Traits = BackwardTraits<D, HeadDim>;
  if (p.dtype != D || p.head_dim != HeadDim)
    throw cuda::CudaError("cuda_fused: launch_backward_for called for another kernel (a bug in the dispatch)");
  const auto shape_is = [](const TileShape& t, int block_m, int block_n) {
    return t.block_m == block_m && t.block_n == block_n && t.threads == Traits::kThreads;
  };
  const auto grid_holds = [](const GridShape& g, std::int64_t blocks) { return g.ok && blocks >= 1 && g.x * g.y >= blocks; };
  if (!shape_is(p.dk_dv_tile, Traits::kDkDvBlockM, Traits::kDkDvBlockN) || !shape_is(p.dq_tile, Traits::kDqBlockM, Traits::kDqBlockN) ||
      p.dk_dv_smem_bytes != Traits::kDkDvSmemBytes || p.dq_smem_bytes != Traits::kDqSmemBytes || !grid_holds(p.dk_dv_grid, p.dk_dv_blocks) ||
      !grid_holds(p.dq_grid, p.dq_blocks))
    throw cuda::CudaError("cuda_fused: the backward's launch parameters disagree with its kernels (a bug in the host plan)");

  // A warp per row, grid-strided past 2^20 blocks.
  const std::int64_t rows = p.batch * p.h_q * p.n_q;
  const unsigned preprocess_blocks = unsigned(std::min<std::int64_t>((rows + 7) / 8, std::int64_t{1} << 20));
  fused_backward_preprocess_kernel<typename Traits::Elem><<<preprocess_blocks, 256, 0, stream>>>(p);
  cuda::check_launch("fused_backward_preprocess_kernel");

  constexpr auto dq_kernel = fused_backward_dq_kernel<Traits>;
  static const cudaError_t dq_opted_in = opt_in_shared_memory(dq_kernel, Traits::kDqSmemBytes);  // once per instantiation
  cuda::check(dq_opted_in, "cudaFuncSetAttribute (cudaFuncAttributeMaxDynamicSharedMemorySize)");
  dq_kernel<<<dim3(unsigned(p.dq_grid.x), unsigned(p.dq_grid.y), 1u), Traits::kThreads, std::size_t(Traits::kDqSmemBytes), stream>>>(p);
  cuda::check_launch("fused_backward_dq_kernel");

  constexpr auto dk_dv_kernel = fused_backward_dk_dv_kernel<Traits>;
  static const cudaError_t dk_dv_opted_in = opt_in_shared_memory(dk_dv_kernel, Traits::kDkDvSmemBytes);
  cuda::check(dk_dv_opted_in, "cudaFuncSetAttribute (cudaFuncAttributeMaxDynamicSharedMemorySize)");
  dk_dv_kernel<<<dim3(unsigned(p.dk_dv_grid.x), unsigned(p.dk_dv_grid.y), 1u), Traits::kThreads, std::size_t(Traits::kDkDvSmemBytes),
                 stream>>>(p);
  cuda::check_launch("fused_backward_dk_dv_kernel");
}

}  // namespace attn::cuda_fused

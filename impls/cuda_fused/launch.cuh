#pragma once
// The launch template: one (dtype, head dimension, mask flags) kernel, its grid from the
// parameters, its dynamic shared memory (opted in above 48 KB once per instantiation).
#include "impls/cuda_fused/dispatch.hpp"
#include "impls/cuda_fused/forward_f32_kernel.cuh"
#include "impls/cuda_fused/forward_kernel.cuh"
#include "impls/cuda_support/cuda_support.hpp"

namespace attn::cuda_fused {

template <class Kernel>
void launch_kernel(Kernel kernel, cudaError_t opted_in, const FusedParams& p, int threads, int smem_bytes, cudaStream_t stream,
                   const char* name) {
  if (p.tile.threads != threads || p.smem_bytes != smem_bytes || p.total_blocks < 1 || !p.grid.ok ||
      p.grid.x * p.grid.y < p.total_blocks)
    throw cuda::CudaError(std::string("cuda_fused: the launch parameters disagree with ") + name + " (a bug in the host plan)");
  cuda::check(opted_in, "cudaFuncSetAttribute (cudaFuncAttributeMaxDynamicSharedMemorySize)");
  const dim3 grid{unsigned(p.grid.x), unsigned(p.grid.y), 1u}, block{unsigned(threads), 1u, 1u};
  kernel<<<grid, block, std::size_t(smem_bytes), stream>>>(p);
  cuda::check_launch(name);
}

template <DType D, int HeadDim, bool KeyLimits, bool ElementMask>
void launch_forward_for(const FusedParams& p, cudaStream_t stream) {
  if (p.dtype != D || p.head_dim != HeadDim || p.key_limits != KeyLimits || p.element_mask != ElementMask)
    throw cuda::CudaError("cuda_fused: launch_forward_for called for another kernel (a bug in the dispatch)");
  if constexpr (D == DType::f32) {
    using Traits = SimtTraits<HeadDim>;
    constexpr auto kernel = fused_forward_f32_kernel<HeadDim, KeyLimits, ElementMask>;
    static const cudaError_t opted_in = opt_in_shared_memory(kernel, Traits::kSmemBytes);  // once per instantiation
    launch_kernel(kernel, opted_in, p, Traits::kThreads, Traits::kSmemBytes, stream, "fused_forward_f32_kernel");
  } else {
    using Traits = MmaTraits<D, HeadDim>;
    constexpr auto kernel = fused_forward_mma_kernel<Traits, KeyLimits, ElementMask>;
    static const cudaError_t opted_in = opt_in_shared_memory(kernel, Traits::kSmemBytes);  // once per instantiation
    launch_kernel(kernel, opted_in, p, Traits::kThreads, Traits::kSmemBytes, stream, "fused_forward_mma_kernel");
  }
}

}  // namespace attn::cuda_fused

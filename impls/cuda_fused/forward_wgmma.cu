// cuda_fused: the Hopper kernels (f16/bf16, d = 128, with and without per-row key limits). This file
// alone is built for sm_90a (wgmma needs the arch-specific target): impls/CMakeLists.txt.
#include "impls/cuda_fused/forward_wgmma_kernel.cuh"
#include "impls/cuda_fused/launch.cuh"

namespace attn::cuda_fused {
namespace {

// S of a tile as two 64-key halves (the softmax of one overlaps the other's products).
constexpr int kWgmmaHalves = 2;

template <DType D, bool KeyLimits>
void launch_wgmma_for(const FusedParams& p, cudaStream_t stream) {
  constexpr auto kernel = fused_forward_wgmma_kernel<D, KeyLimits, kWgmmaHalves>;
  static const cudaError_t opted_in = opt_in_shared_memory(kernel, WgmmaTraits::kSmemBytes);  // once per instantiation
  launch_kernel(kernel, opted_in, p, WgmmaTraits::kThreads, WgmmaTraits::kSmemBytes, stream, "fused_forward_wgmma_kernel");
}

}  // namespace

void launch_forward_wgmma(const FusedParams& p, cudaStream_t stream) {
  if (!p.wgmma || p.head_dim != 128 || p.element_mask)
    throw cuda::CudaError("cuda_fused: launch_forward_wgmma called for a problem the plan did not give it (a bug in the dispatch)");
  if (p.dtype == DType::f16) return p.key_limits ? launch_wgmma_for<DType::f16, true>(p, stream) : launch_wgmma_for<DType::f16, false>(p, stream);
  if (p.dtype == DType::bf16)
    return p.key_limits ? launch_wgmma_for<DType::bf16, true>(p, stream) : launch_wgmma_for<DType::bf16, false>(p, stream);
  throw cuda::CudaError("cuda_fused: the wgmma kernel is f16/bf16 only (a bug in the plan)");
}

cudaError_t wgmma_image_status() {
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, fused_forward_wgmma_kernel<DType::bf16, false, kWgmmaHalves>);
  if (status != cudaSuccess) {
    cudaGetLastError();  // not sticky: the mma.sync kernels still run
    return status;
  }
  return attributes.binaryVersion == 90 ? cudaSuccess : cudaErrorNoKernelImageForDevice;
}

}  // namespace attn::cuda_fused

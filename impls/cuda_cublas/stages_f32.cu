// cuda_cublas's stages for f32 (one dtype per .cu, so the builds parallelise).
#include "impls/cuda_cublas/kernel_traits.cuh"

namespace attn::cuda_cublas {

template void launch_stage_for<DType::f32>(Stage stage, const KernelParams& params, cudaStream_t stream);

cudaError_t kernel_image_status() {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, masked_softmax_kernel<DType::f32>);
}

}  // namespace attn::cuda_cublas

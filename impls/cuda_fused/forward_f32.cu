// cuda_fused: the f32 (FMA) kernels, every head dimension and mask variant; and whether this
// build holds an image the device can run.
#include "impls/cuda_fused/launch.cuh"

namespace attn::cuda_fused {

#define ATTN_FUSED_F32(D)                                                                             \
  template void launch_forward_for<DType::f32, D, false, false>(const FusedParams&, cudaStream_t); \
  template void launch_forward_for<DType::f32, D, false, true>(const FusedParams&, cudaStream_t);  \
  template void launch_forward_for<DType::f32, D, true, false>(const FusedParams&, cudaStream_t);  \
  template void launch_forward_for<DType::f32, D, true, true>(const FusedParams&, cudaStream_t);
ATTN_FUSED_F32(32)
ATTN_FUSED_F32(64)
ATTN_FUSED_F32(96)
ATTN_FUSED_F32(128)
ATTN_FUSED_F32(256)
#undef ATTN_FUSED_F32

cudaError_t kernel_image_status() {
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, fused_forward_f32_kernel<64, false, false>);
  cudaGetLastError();
  return status;
}

}  // namespace attn::cuda_fused

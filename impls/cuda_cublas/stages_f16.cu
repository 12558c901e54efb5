// cuda_cublas's stages for f16 (one dtype per .cu, so the builds parallelise).
#include "impls/cuda_cublas/kernel_traits.cuh"

namespace attn::cuda_cublas {

template void launch_stage_for<DType::f16>(Stage stage, const KernelParams& params, cudaStream_t stream);

}  // namespace attn::cuda_cublas

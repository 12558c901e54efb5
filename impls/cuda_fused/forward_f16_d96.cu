// cuda_fused: the f16 tensor-core kernels for d = 96, every mask variant (one (dtype, d) per .cu).
#include "impls/cuda_fused/launch.cuh"

namespace attn::cuda_fused {

template void launch_forward_for<DType::f16, 96, false, false>(const FusedParams&, cudaStream_t);
template void launch_forward_for<DType::f16, 96, false, true>(const FusedParams&, cudaStream_t);
template void launch_forward_for<DType::f16, 96, true, false>(const FusedParams&, cudaStream_t);
template void launch_forward_for<DType::f16, 96, true, true>(const FusedParams&, cudaStream_t);

}  // namespace attn::cuda_fused

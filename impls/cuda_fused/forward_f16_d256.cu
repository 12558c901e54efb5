// cuda_fused: the f16 tensor-core kernels for d = 256, every mask variant (one (dtype, d) per .cu).
#include "impls/cuda_fused/launch.cuh"

namespace attn::cuda_fused {

template void launch_forward_for<DType::f16, 256, false, false>(const FusedParams&, cudaStream_t);
template void launch_forward_for<DType::f16, 256, false, true>(const FusedParams&, cudaStream_t);
template void launch_forward_for<DType::f16, 256, true, false>(const FusedParams&, cudaStream_t);
template void launch_forward_for<DType::f16, 256, true, true>(const FusedParams&, cudaStream_t);

}  // namespace attn::cuda_fused

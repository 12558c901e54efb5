// cuda_fused: the bf16 backward kernels for d = 128 (one (dtype, d) per .cu).
#include "impls/cuda_fused/backward_launch.cuh"

namespace attn::cuda_fused {

template void launch_backward_for<DType::bf16, 128>(const BackwardParams&, cudaStream_t);

}  // namespace attn::cuda_fused

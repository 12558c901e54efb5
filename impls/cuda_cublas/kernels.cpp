#include "impls/cuda_cublas/kernels.hpp"

namespace attn::cuda_cublas {

// The one place where the runtime dtype becomes the template parameter.
void launch_stage(Stage stage, DType dtype, const KernelParams& params, cudaStream_t stream) {
  switch (dtype) {
    case DType::f64: return launch_stage_for<DType::f64>(stage, params, stream);
    case DType::f32: return launch_stage_for<DType::f32>(stage, params, stream);
    case DType::f16: return launch_stage_for<DType::f16>(stage, params, stream);
    case DType::bf16: return launch_stage_for<DType::bf16>(stage, params, stream);
  }
}

}  // namespace attn::cuda_cublas

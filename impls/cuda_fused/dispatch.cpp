// The one place where cuda_fused's runtime flags become template parameters.
#include "impls/cuda_fused/dispatch.hpp"

#include <stdexcept>
#include <string>

namespace attn::cuda_fused {
namespace {

template <DType D, int HeadDim>
void by_mask(const FusedParams& p, cudaStream_t stream) {
  if (p.key_limits) {
    if (p.element_mask) return launch_forward_for<D, HeadDim, true, true>(p, stream);
    return launch_forward_for<D, HeadDim, true, false>(p, stream);
  }
  if (p.element_mask) return launch_forward_for<D, HeadDim, false, true>(p, stream);
  return launch_forward_for<D, HeadDim, false, false>(p, stream);
}

template <DType D>
void by_head_dim(const FusedParams& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 32: return by_mask<D, 32>(p, stream);
    case 64: return by_mask<D, 64>(p, stream);
    case 96: return by_mask<D, 96>(p, stream);
    case 128: return by_mask<D, 128>(p, stream);
    case 256: return by_mask<D, 256>(p, stream);
    default: throw std::invalid_argument("cuda_fused: no kernel for head dimension " + std::to_string(p.head_dim));
  }
}

}  // namespace

void launch_forward(const FusedParams& p, cudaStream_t stream) {
  if (p.wgmma) return launch_forward_wgmma(p, stream);
  switch (p.dtype) {
    case DType::f16: return by_head_dim<DType::f16>(p, stream);
    case DType::bf16: return by_head_dim<DType::bf16>(p, stream);
    case DType::f32: return by_head_dim<DType::f32>(p, stream);
    case DType::f64: break;
  }
  throw std::invalid_argument("cuda_fused: no kernel for dtype " + std::string(to_string(p.dtype)));
}

void launch_backward(const BackwardParams& p, cudaStream_t stream) {
  if (p.dtype == DType::f16 && p.head_dim == 64) return launch_backward_for<DType::f16, 64>(p, stream);
  if (p.dtype == DType::f16 && p.head_dim == 128) return launch_backward_for<DType::f16, 128>(p, stream);
  if (p.dtype == DType::bf16 && p.head_dim == 64) return launch_backward_for<DType::bf16, 64>(p, stream);
  if (p.dtype == DType::bf16 && p.head_dim == 128) return launch_backward_for<DType::bf16, 128>(p, stream);
  throw std::invalid_argument("cuda_fused: no backward kernel for " + std::string(to_string(p.dtype)) + " at head dimension " +
                              std::to_string(p.head_dim));
}

}  // namespace attn::cuda_fused

#pragma once
// cuda_fused's kernels seen from plain C++: launch_forward turns the runtime flags of the
// parameters (dtype, head dimension, per-row key limits, per-element mask) into the template
// parameters of launch_forward_for, and launch_backward (dtype, head dimension) into those of
// launch_backward_for, in this one place (dispatch.cpp). Each (dtype, head dimension) is
// instantiated in its own .cu (forward_bf16_d128.cu, ...; f32 in forward_f32.cu).
#include <cuda_runtime_api.h>

#include "core/dtype.hpp"
#include "impls/cuda_fused/fused_params.hpp"

namespace attn::cuda_fused {

// Enqueues the forward pass on `stream`; throws attn::cuda::CudaError naming the kernel when the
// launch fails, std::invalid_argument for parameters no kernel was built for.
void launch_forward(const FusedParams& params, cudaStream_t stream);

template <DType D, int HeadDim, bool KeyLimits, bool ElementMask>
void launch_forward_for(const FusedParams& params, cudaStream_t stream);

// Enqueues the backward pass (preprocessing, dQ, dK and dV) on `stream`; throws as launch_forward.
// Each (dtype, head dimension) is instantiated in its own .cu (backward_bf16_d128.cu, ...).
void launch_backward(const BackwardParams& params, cudaStream_t stream);

template <DType D, int HeadDim>
void launch_backward_for(const BackwardParams& params, cudaStream_t stream);

// Whether this build holds kernel images the current device can run (cudaSuccess), or why not.
cudaError_t kernel_image_status();

// The Hopper kernel (forward_wgmma.cu, built for sm_90a alone): params.wgmma selects it.
void launch_forward_wgmma(const FusedParams& params, cudaStream_t stream);
// cudaSuccess where the current device runs its sm_90a image (an H100 or H200), else why not.
cudaError_t wgmma_image_status();

}  // namespace attn::cuda_fused

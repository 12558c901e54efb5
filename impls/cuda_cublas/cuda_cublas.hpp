#pragma once
// cuda_cublas: unfused attention on the GPU, as PyTorch's math backend computes it. Two batched
// cuBLAS GEMMs (S = scale * Q K^T in f32, O = P V) around a masked-softmax kernel; grouped
// heads folded into the GEMM shape (cublas_plan.hpp). Its backward recomputes S, forms dP = dO V^T,
// P and dS in a softmax-backward kernel (P from the forward's LSE) and dV, dQ, dK by three more
// GEMMs (README.md, "The backward pass"). Registered only in builds with CUDA; skips every problem
// with the reason where no device is.
//   cuda_cublas        products in the dtype's precision (f32 accumulation; f64 for f64)
//   cuda_cublas_tf32   f32 inputs through TF32 tensor cores; its pass rule's yardstick is scaled
//                      to TF32's unit roundoff (Capabilities::matmul_precision)
#include "impls/registry.hpp"

namespace attn {

void register_cuda_cublas(Registry& registry);  // both variants

}  // namespace attn

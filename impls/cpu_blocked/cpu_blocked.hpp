#pragma once
// cpu_blocked: the flash-attention forward pass on the CPU. A query tile streams every key tile
// through an online softmax (running row max and sum, the output accumulator rescaled when the
// max grows), so no n_q x n_k buffer exists: the workspace is a few tiles per thread, whatever
// n is. Tile products are register-blocked SIMD micro-kernels (micro_kernels.hpp); key tiles, and
// panels of 32 keys near the diagonal, that the causal or padding mask hides are skipped;
// threads take (batch, head, query tile) items dynamically.
// Computes in f64 for f64 problems and in f32 otherwise (f16/bf16 inputs widen exactly).
// A backward problem (Problem::operation) runs FlashAttention-2's backward pass instead
// (cpu_blocked_backward.hpp); not declared yet (Capabilities::operations).
#include "impls/registry.hpp"

namespace attn {

void register_cpu_blocked(Registry& registry);

}  // namespace attn

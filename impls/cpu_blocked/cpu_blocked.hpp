#pragma once
// cpu_blocked: the flash-attention forward pass on the CPU. A query tile streams every key tile
// through an online softmax (running row max and sum, the output accumulator rescaled when the
// max grows), so no n_q x n_k buffer exists: the workspace is a few tiles per thread, whatever
// n is. Tile products are Eigen GEMMs; key tiles that the causal or padding mask hides from the
// whole query tile are skipped; threads take (batch, head, query tile) items dynamically.
// Computes in f64 for f64 problems and in f32 otherwise (f16/bf16 inputs widen exactly).
#include "impls/registry.hpp"

namespace attn {

void register_cpu_blocked(Registry& registry);

}  // namespace attn

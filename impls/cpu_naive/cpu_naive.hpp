#pragma once
// cpu_naive: the textbook algorithm. Materialise the scores, scale, mask, subtract the row max,
// exponentiate, normalise, multiply by V. Computes in f64 for f64 problems and in f32
// otherwise (f16/bf16 inputs widen exactly to f32; the output rounds back once). Its error is
// the pass rule's yardstick: "the naive algorithm run in the same precision".
// Backward, the same way (reference/README.md, "The backward pass", gives the formulas), the
// textbook's materialised matrices: per query head the whole P (n_q x n_k) recomputed from the
// scores as the forward does (not from a given LSE), dV += (P Z r)^T dO, dP = Z r dO V^T, D = sum_j
// P dP (not <dO, O>: from the row itself), dS = P (dP - D) through the soft-cap's slope in dP's
// place, then dQ = scale dS K and dK += scale dS^T Q; dK and dV summed over the rows of every query
// head of a kv group in order, each gradient rounded once to its dtype. Where asked for
// (RoleTensors::backward with d_sink, d_bias) the parameters' gradients too: dσ_h = -sum P_i,sink
// D_i over the batches and rows of head h, and dBias = dS (before the soft-cap's slope) summed
// into the bias's shape over the dimensions it broadcasts, both over b, h, i in order and rounded
// once to their tensors' dtypes. Its workspace (two or three n_q x n_k matrices, and dBias's
// accumulator with a bias) is what a tiled backward pass is measured against.
#include "impls/implementation.hpp"

namespace attn {

// The algorithm itself, usable without a registry (the verifier's baseline calls it): the
// problem's operation, forward (RoleTensors::forward) or backward (RoleTensors::backward).
void naive_attention(const RunArgs& args);
std::size_t naive_workspace_bytes(const Problem& problem);

class Registry;
void register_cpu_naive(Registry& registry);  // in attn_impls (cpu_naive_registration.cpp)

}  // namespace attn

#pragma once
// cpu_naive: the textbook algorithm. Materialise the scores, scale, mask, subtract the row max,
// exponentiate, normalise, multiply by V. Computes in f64 for f64 problems and in f32
// otherwise (f16/bf16 inputs widen exactly to f32; the output rounds back once). Its error is
// the pass rule's yardstick: "the naive algorithm run in the same precision".
#include "impls/implementation.hpp"

namespace attn {

// The algorithm itself, usable without a registry (the verifier's baseline calls it).
void naive_attention(const RunArgs& args);
std::size_t naive_workspace_bytes(const Problem& problem);

class Registry;
void register_cpu_naive(Registry& registry);  // in attn_impls (cpu_naive_registration.cpp)

}  // namespace attn

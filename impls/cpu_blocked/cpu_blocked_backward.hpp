#pragma once
// cpu_blocked's backward pass: FlashAttention-2's algorithm on the CPU. Given Q, K, V, dO and the
// forward's O and LSE (RunArgs, RoleTensors::backward with o and lse), D = rowsum(dO * O) comes
// first; then every key tile streams the query tiles past it, P recomputed tile by tile as
// exp(s - LSE) (no second softmax), dK and dV accumulated per key tile, and dQ summed from
// per-slot partial rows, so no n_q x n_k buffer exists: the workspace grows with n_k and the tile
// sizes (reference/README.md, "The backward pass", states the gradients).
// The key tiles of a head are dealt round-robin to a fixed number of slots, each with its own
// dQ partial, reduced in slot order: results do not depend on the thread count or on which thread
// ran a slot. Threads take steps of 512 queries slot by slot, ordered by what each item reads
// rather than by barriers, so they run ahead of a late one (a shared machine's preempted thread).
// Computes in f64 for f64 problems and in f32 otherwise; each gradient is rounded once to its
// dtype.
#include <cstddef>

#include "impls/implementation.hpp"

namespace attn {

// Workspace for up to `threads` threads (0: default_thread_count()).
std::size_t blocked_backward_workspace_bytes(const Problem& problem, int threads = 0);
// The backward pass of args.problem: dq, dk, dv from q, k, v, d_o, o and lse (RunArgs).
void blocked_backward(const RunArgs& args);

}  // namespace attn

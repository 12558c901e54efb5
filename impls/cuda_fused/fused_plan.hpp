#pragma once
// cuda_fused's host API: validates a problem and fills the kernel parameters (everything but the
// device pointers and the mask's strides, which the run takes from the tensors it uploads), or
// says why the problem is not supported. Plain C++, no device needed:
// tests/cuda_fused_plan_test.cpp checks it on the CPU.
#include <optional>
#include <string>

#include "core/problem.hpp"
#include "impls/cuda_fused/fused_params.hpp"

namespace attn::cuda_fused {

struct FusedPlan {
  Problem problem;
  FusedParams params;       // pointers null; the run fills them
  bool upload_key_limit = false;  // key padding: the end of Mask::key_range per (b, i) goes to the device
  // The kernel's head dimension (params.head_dim, kernel_head_dim) exceeds d_k: the run copies Q
  // and K into zero-padded buffers; exceeds d_v: V likewise, and O comes back through a padded
  // buffer. The copies are part of each timed run.
  bool pad_q_k = false;
  bool pad_v_o = false;
};

struct FusedPlanResult {
  std::optional<FusedPlan> plan;
  std::string reason;  // why not, when !plan
};

// hopper: the device runs the sm_90a image of the wgmma kernel (cuda_fused.cpp asks the device);
// eligible problems (wgmma_eligible) then get its tile shape and shared memory.
FusedPlanResult make_fused_plan(const Problem& problem, bool hopper = false);

// The backward pass (op=backward): f16/bf16, causality and key padding, GQA, head dimensions up to
// 128 on the d = 64 and 128 kernels (zero-padded like the forward's: Q, K, dQ and dK where d_k is
// smaller, V, dO and dV where d_v is; the copies are part of each timed run). The rest of what
// the forward computes is refused, naming it: a boolean mask, a bias, f32, d past 128.
struct FusedBackwardPlan {
  Problem problem;
  BackwardParams params;  // pointers null; the run fills them
  bool upload_key_limit = false;
  bool pad_q_k = false;  // d_k < params.head_dim
  bool pad_v = false;    // d_v < params.head_dim
};

struct FusedBackwardPlanResult {
  std::optional<FusedBackwardPlan> plan;
  std::string reason;
};

FusedBackwardPlanResult make_fused_backward_plan(const Problem& problem);

}  // namespace attn::cuda_fused

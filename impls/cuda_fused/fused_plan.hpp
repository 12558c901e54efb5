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

}  // namespace attn::cuda_fused

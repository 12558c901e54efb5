#pragma once
// cuda_fused's host API: validates a problem and fills the kernel parameters (everything but the
// device pointers), or says why the problem is not supported. Plain C++, no device needed:
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
};

struct FusedPlanResult {
  std::optional<FusedPlan> plan;
  std::string reason;  // why not, when !plan
};

FusedPlanResult make_fused_plan(const Problem& problem);

}  // namespace attn::cuda_fused

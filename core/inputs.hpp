#pragma once
// Seeded generation of a case's inputs in every input regime. Values are drawn in double and
// rounded once to its role's dtype (ProblemNumerics::dtype_of); the stored (rounded) values are the inputs every
// implementation and the reference read. The same problem gives the same bits everywhere.
#include "core/mask.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"

namespace attn {

struct CaseInputs {
  Tensor q;  // [b, h_q, n_q, d_k]
  Tensor k;  // [b, h_kv, n_k, d_k]
  Tensor v;  // [b, h_kv, n_k, d_v]
  Mask mask;
};

CaseInputs generate_inputs(const Problem& problem);

// An output tensor [b, h_q, n_q, d_v] in o's dtype, poisoned.
Tensor make_output(const Problem& problem);
// Row log-sum-exp [b, h_q, n_q, 1]: f64 for f64 problems, f32 otherwise. Poisoned.
Tensor make_lse(const Problem& problem);

}  // namespace attn

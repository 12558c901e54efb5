#pragma once
// The backward pass of the reference: dQ, dK, dV (and dσ for sinks, dBias for a bias) computed
// at 113 bits (Boost.Multiprecision's float128) from the exact stored Q, K, V, the mask (with the
// implementation's reported keep mask for dropout) and the upstream gradient dO, through every
// step of the score pipeline (core/score_pipeline.hpp). The semantics (reference/README.md,
// "The backward pass"): with P after the sink and before dropout, Z the keep mask, r = 1/(1 - p),
//   dV_j = sum_i P_ij Z_ij r dO_i          dP_ij = <dO_i, v_j> Z_ij r      D_i = sum_j P_ij dP_ij
//   dS_ij = P_ij (dP_ij - D_i)             dX_ij = dS_ij f'(x_ij)   (x = scale <q_i, k_j>; f the
//                                                                    soft-cap, f' = sech^2(x / c))
//   dQ_i = scale sum_j dX_ij k_j           dK_j = scale sum_i dX_ij q_i
//   dsink_h = -sum_{b,i} P_i,sink D_i      dBias = dS summed over the bias's broadcast dimensions
// dK and dV sum over the query heads of a GQA group; a fully masked row contributes nothing; a
// masked key gets no gradient from that row. Every sum runs over float128 values of exactly stored
// inputs, so the result is the exact gradient to about 2^-100 relative to the magnitudes summed.
#include <vector>

#include "core/inputs.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"

namespace attn {

struct BackwardReference {
  // Unrounded (float128 converted to the nearest double), dense BHSD like the inputs:
  std::vector<double> dq;      // [b, h_q, n_q, d_k]
  std::vector<double> dk;      // [b, h_kv, n_k, d_k]
  std::vector<double> dv;      // [b, h_kv, n_k, d_v]
  std::vector<double> d_sink;  // [h_q] when the problem has sinks, else empty
  // The shape of the mask's bias tensor ([1|b, 1|h_q, n_q, n_k]) when the problem has a bias
  // (ALiBi's too: the gradient of its materialised bias), else empty.
  std::vector<double> d_bias;
  // What rounding each product's terms once in the working precision costs, per unit roundoff:
  // for each gradient, the largest sum of its terms' magnitudes over its elements (dQ_i: scale
  // sum_j P_ij (|dP|_ij + |D|_i) |f'_ij| |k_j|, with |dP|_ij = r sum_c |dO_ic v_jc| and |D|_i =
  // sum_j P_ij |dP|_ij; dK_j the same over i with |q_i|; dV_j: sum_i P_ij Z_ij r |dO_i|; dsink_h:
  // sum_{b,i} P_i,sink |D|_i; dBias: P_ij (|dP|_ij + |D|_i), the magnitude of dS_ij's terms,
  // summed over the bias's broadcast dimensions). dQ sums the rows of dS, which sum to zero: a
  // gradient can be far smaller than its terms (exactly 0 at a single key), and there a correct
  // kernel's rounding of D and dP, which the naive yardstick may cancel by luck, is u times this
  // (the pass rule's gradient floor, core/pass_rule.hpp). dsink_h is such a sum too (D_i has
  // either sign), and so is a shared bias's dBias. 0 for a gradient the problem does not have.
  struct TermMagnitudes {
    double dq = 0, dk = 0, dv = 0, d_sink = 0, d_bias = 0;
  } term_magnitude;
  // max |LSE_i| over the rows that see a key: a backward recomputes P = exp(s - LSE) from the LSE
  // its forward returned, rounded to the LSE's dtype, whose error |LSE| u reaches every weight as a
  // relative one (and through them every term above).
  double lse_max_abs = 0;
};

// d_o: [b, h_q, n_q, d_v] in any dtype (its stored values are exact in float128). threads: 0 for
// every core; the result does not depend on it.
BackwardReference compute_reference_backward(const Problem& problem, const CaseInputs& inputs, const Tensor& d_o, int threads = 0);

}  // namespace attn

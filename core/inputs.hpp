#pragma once
// Seeded generation of a case's inputs in every input regime. Values are drawn in double and
// rounded once to its role's dtype (ProblemNumerics::dtype_of); the stored (rounded) values are the inputs every
// implementation and the reference read. The same problem gives the same bits everywhere.
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

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

// The scores q·k and scale·q·k of every visible pair must lie in the working precision's range:
// the naive baseline (the pass rule's yardstick) computes them there, and an overflow would read
// as an unsound oracle, blaming the reference for the input. Throws InputError naming the scale's
// source or the pair (name(role): each role's file or argument). A bound from the largest row
// norms first; the pairs one by one only when it does not hold.
void check_scores_in_range(const Problem& p, const CaseInputs& in, const std::function<std::string(const char*)>& name,
                           const std::string& scale_from);

// An output tensor [b, h_q, n_q, d_v] in o's dtype, poisoned.
// The backward pass's upstream gradient dO [b, h_q, n_q, d_v] in d_o's dtype, drawn from the
// problem's seed on a stream of its own (the forward inputs' bits do not move) as V is drawn in
// the problem's regime: normal(0, 1), sparse small integers, or uniform [0, 1) on its dtype's grid.
Tensor generate_d_o(const Problem& problem);
Tensor make_output(const Problem& problem);
// Row log-sum-exp [b, h_q, n_q, 1]: f64 for f64 problems, f32 otherwise. Poisoned.
Tensor make_lse(const Problem& problem);
// A backward pass's outputs, poisoned, each in its role's dtype: dq [b, h_q, n_q, d_k], dk
// [b, h_kv, n_k, d_k], dv [b, h_kv, n_k, d_v]; and the parameters' where asked for (the second
// make_gradients): d_sink as the sinks' tensor ([h_q, 1, 1, 1], f32) and d_bias as the bias's
// ([1|b, 1|h_q, n_q, n_k] in its dtype), each empty (numel 0) where not computed.
struct Gradients {
  Tensor dq, dk, dv;
  Tensor d_sink, d_bias;
  const Tensor& of(Role role) const { return pick(*this, role); }
  Tensor& of(Role role) { return pick(*this, role); }
  bool holds(Role role) const { return of(role).numel() > 0; }
  // dq, dk, dv, then d_sink and d_bias where held.
  std::vector<Role> roles() const {
    std::vector<Role> held{Role::dq, Role::dk, Role::dv};
    for (Role r : {Role::d_sink, Role::d_bias})
      if (holds(r)) held.push_back(r);
    return held;
  }

 private:
  template <class Self>
  static auto pick(Self& self, Role role) -> decltype((self.dq)) {
    switch (role) {
      case Role::dq: return self.dq;
      case Role::dk: return self.dk;
      case Role::dv: return self.dv;
      case Role::d_sink: return self.d_sink;
      case Role::d_bias: return self.d_bias;
      default: throw std::logic_error("Gradients::of: " + std::string(to_string(role)) + " is not a gradient");
    }
  }
};
Gradients make_gradients(const Problem& problem);
// With d_sink where the mask has sinks and d_bias where it has a bias, shaped and typed as those.
Gradients make_gradients(const Problem& problem, const Mask& parameters);
// Dropout's keep mask [b, h_q, n_q, n_k] as the harness holds it, f32 (1 kept, 0 dropped), poisoned.
Tensor make_keep(const Problem& problem);

}  // namespace attn

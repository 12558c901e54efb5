#pragma once
// The tensors of one call, keyed by role (core/tensor_role.hpp): a small fixed array, one slot per
// role, each empty, an input (read-only) or an output (written by the call). RunArgs carries one
// (impls/implementation.hpp), so an implementation asks for the role it computes, not for a
// member named after it, and a backward pass (dO, O, LSE -> dQ, dK, dV) fits the same set.
#include <array>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/inputs.hpp"
#include "core/tensor.hpp"
#include "core/tensor_role.hpp"

namespace attn {

class RoleTensors {
 public:
  // A forward pass's: q, k, v (and the bias, as the mask stores it: [b or 1, h_q or 1, n_q, n_k])
  // in; o out, and lse, weights and dropout's keep mask when not null (not wanted). The boolean
  // mask's flags have no dtype of ours and stay with the Mask (CaseInputs::mask).
  static RoleTensors forward(const CaseInputs& inputs, Tensor& o, Tensor* lse = nullptr, Tensor* weights = nullptr, Tensor* keep = nullptr) {
    RoleTensors t;
    t.set_input(Role::q, inputs.q);
    t.set_input(Role::k, inputs.k);
    t.set_input(Role::v, inputs.v);
    if (inputs.mask.has_bias()) t.set_input(Role::bias, inputs.mask.bias_tensor());
    if (inputs.mask.has_sinks()) t.set_input(Role::sink, inputs.mask.sinks_tensor());
    t.set_output(Role::o, &o);
    t.set_output(Role::lse, lse);
    t.set_output(Role::weights, weights);
    t.set_output(Role::keep, keep);
    return t;
  }

  // A backward pass's: q, k, v, d_o (and the bias, the sinks, the forward's o and lse where given)
  // in; dq, dk, dv out (d_sink and d_bias: the overload below).
  static RoleTensors backward(const CaseInputs& inputs, const Tensor& d_o, Tensor& dq, Tensor& dk, Tensor& dv, const Tensor* o = nullptr,
                              const Tensor* lse = nullptr) {
    RoleTensors t;
    t.set_input(Role::q, inputs.q);
    t.set_input(Role::k, inputs.k);
    t.set_input(Role::v, inputs.v);
    t.set_input(Role::d_o, d_o);
    if (inputs.mask.has_bias()) t.set_input(Role::bias, inputs.mask.bias_tensor());
    if (inputs.mask.has_sinks()) t.set_input(Role::sink, inputs.mask.sinks_tensor());
    if (o != nullptr) t.set_input(Role::o, *o);
    if (lse != nullptr) t.set_input(Role::lse, *lse);
    t.set_output(Role::dq, &dq);
    t.set_output(Role::dk, &dk);
    t.set_output(Role::dv, &dv);
    return t;
  }
  // The same for a Gradients, with d_sink and d_bias out where it holds them (make_gradients with
  // the mask: the implementation declares Capabilities::parameter_gradients) and the problem has
  // sinks and a bias.
  static RoleTensors backward(const CaseInputs& inputs, const Tensor& d_o, Gradients& gradients, const Tensor* o = nullptr,
                              const Tensor* lse = nullptr) {
    RoleTensors t = backward(inputs, d_o, gradients.dq, gradients.dk, gradients.dv, o, lse);
    if (inputs.mask.has_sinks() && gradients.holds(Role::d_sink)) t.set_output(Role::d_sink, &gradients.d_sink);
    if (inputs.mask.has_bias() && gradients.holds(Role::d_bias)) t.set_output(Role::d_bias, &gradients.d_bias);
    return t;
  }

  void set_input(Role role, const Tensor& tensor) {
    inputs_[index(role)] = &tensor;
    outputs_[index(role)] = nullptr;
  }
  // Null empties the slot: the role is not wanted.
  void set_output(Role role, Tensor* tensor) {
    outputs_[index(role)] = tensor;
    inputs_[index(role)] = nullptr;
  }

  // Null unless the role is an input (an output is not one).
  const Tensor* input(Role role) const { return inputs_[index(role)]; }
  // Null unless the role is an output: then the call writes it.
  Tensor* output(Role role) const { return outputs_[index(role)]; }
  // An output the call cannot go without (o in a forward pass); throws std::logic_error naming it.
  Tensor& required_output(Role role) const {
    if (outputs_[index(role)] == nullptr) throw std::logic_error("no " + std::string(to_string(role)) + " tensor to write");
    return *outputs_[index(role)];
  }
  bool has(Role role) const { return inputs_[index(role)] != nullptr || outputs_[index(role)] != nullptr; }

  // The role's tensor as a DLPack-shaped view, input or output; nullopt for an empty slot.
  std::optional<ConstTensorView> view(Role role) const {
    if (const Tensor* t = input(role)) return t->view();
    if (const Tensor* t = output(role)) return std::as_const(*t).view();
    return std::nullopt;
  }
  // The roles held, in role order.
  std::vector<Role> input_roles() const { return held(inputs_); }
  std::vector<Role> output_roles() const { return held(outputs_); }

 private:
  static std::size_t index(Role role) { return std::size_t(role); }
  template <class Slots>
  static std::vector<Role> held(const Slots& slots) {
    std::vector<Role> roles;
    for (Role r : all_roles)
      if (slots[index(r)] != nullptr) roles.push_back(r);
    return roles;
  }

  std::array<const Tensor*, role_count> inputs_{};
  std::array<Tensor*, role_count> outputs_{};
};

}  // namespace attn

#pragma once
// The roles a tensor plays in an attention call: one vocabulary for the harness's tensor sets
// (core/role_tensors.hpp), its per-role verdicts (core/pass_rule.hpp) and records, and the plugin
// ABI, whose ATTNBENCH_ROLE_* constants map onto it in one function (impls/plugin/plugin_abi.hpp,
// to_role). Forward: q k v (bias mask sink) in, o (lse weights keep) out. Backward: q k v o lse d_o
// (bias mask sink) in, dq dk dv (d_sink d_bias) out. The packed/paged roles are reserved, as in the ABI.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace attn {

// weights (the softmax probabilities [b, h_q, n_q, n_k]) is the harness's own: the plugin ABI
// has no role for it. keep is dropout's keep mask [b, h_q, n_q, n_k] (1 kept, 0 dropped) that an
// implementation reports (DESIGN: a kernel's random stream is its own); the harness holds it in f32.
// d_sink and d_bias are the backward's gradients of the sink logits ([h_q, 1, 1, 1], f32, as sink)
// and of the bias (the bias's own shape and dtype), computed where an implementation declares so
// (Capabilities::parameter_gradients). Appended last, so that no earlier role's value moves; the
// plugin ABI has no constant for them (yet), as for weights.
enum class Role : std::uint8_t {
  q, k, v, o, lse, weights, d_o, dq, dk, dv, bias, mask, sink, keep, cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table, d_sink, d_bias
};
inline constexpr std::size_t role_count = std::size_t(Role::d_bias) + 1;

// Every role in declaration order (a role's index is its value).
inline constexpr std::array<Role, role_count> all_roles = [] {
  std::array<Role, role_count> roles{};
  for (std::size_t i = 0; i < role_count; ++i) roles[i] = Role(i);
  return roles;
}();

// "q", "d_o", "block_table": the names records and the plugin ABI's messages use.
constexpr std::string_view to_string(Role role) {
  constexpr std::array<std::string_view, role_count> names{"q",  "k",  "v",    "o",    "lse",  "weights",      "d_o",          "dq",       "dk",
                                                           "dv", "bias", "mask", "sink", "keep", "cu_seqlens_q", "cu_seqlens_k", "seqlens_k", "block_table",
                                                           "d_sink", "d_bias"};
  return std::size_t(role) < role_count ? names[std::size_t(role)] : std::string_view("?");
}

constexpr std::optional<Role> parse_role(std::string_view name) {
  for (Role r : all_roles)
    if (to_string(r) == name) return r;
  return std::nullopt;
}

}  // namespace attn

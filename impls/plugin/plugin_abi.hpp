#pragma once
// The harness's side of the C ABI (attnbench_plugin.h), without any process or library: a
// plugin's description as C++ values (what the worker reports), its capabilities as attn's,
// whether a problem fits them, the problem as the ABI's struct, and the layouts' strides.
// Pure functions, unit-tested in tests/plugin_abi_test.cpp.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "impls/implementation.hpp"
#include "impls/plugin/attnbench_plugin.h"

namespace attn::plugin {

// A plugin's description, copied out of its static attnbench_plugin_v1.
struct PluginInfo {
  std::string path;  // the shared library
  std::string name, version, description;
  std::uint32_t abi_version = 0;
  std::uint32_t dtypes = 0, layouts = 0, masks = 0;
  FullyMaskedPolicy fully_masked = FullyMaskedPolicy::zeros;
  std::int32_t min_head_dim = 0, max_head_dim = 0;
  std::vector<std::int32_t> head_dims;  // non-empty: only these
  bool different_dk_dv = false, gqa = false, returns_lse = false, deterministic = true;
  bool cuda = false;                    // device_type CUDA
  bool has_supports = false;            // exports the optional supports()
};

// Copies and checks a description; throws std::runtime_error naming the bad field (an unknown
// device type, a NULL name, head dims out of order, no dtype, no layout).
PluginInfo read_plugin_info(const attnbench_plugin_v1& plugin, const std::string& path);
void to_json(nlohmann::json& j, const PluginInfo& info);
void from_json(const nlohmann::json& j, PluginInfo& info);

Capabilities to_capabilities(const PluginInfo& info);
// Lines describing the capabilities for `attnbench validate` ("dtypes: f32, f64", ...).
std::vector<std::string> describe_capabilities(const PluginInfo& info);
// Whether the declared capabilities cover the problem (dtype, masks, head dims, d_k != d_v, GQA,
// a layout attnbench can pass); the reason names the first thing missing.
Support check_capabilities(const PluginInfo& info, const Problem& problem);

int32_t to_abi(DType dtype);
DType dtype_from_abi(int32_t code);  // throws std::invalid_argument on an unknown code

// The layouts a plugin's ATTNBENCH_LAYOUT_* bits declare, in all_layouts() order (BHSD first).
std::vector<Layout> declared_layouts(std::uint32_t layouts);
using Strides = std::array<std::int64_t, 4>;
// Strides in elements of a logical [b, h, s, d] tensor stored in the layout: dense BHSD, dense
// BSHD, or (strided) BHSD order with gaps after every row, head and batch, so a kernel that
// assumes dense strides instead of reading them reads the wrong elements.
Strides layout_strides(const Tensor::Shape& shape, Layout layout);
// Strides of a [b, h_q, n_q, n_k] mask or bias stored as core/mask.hpp stores it, [bb, hh, n_q,
// n_k] with bb, hh 1 where it broadcasts: stride 0 there.
Strides broadcast_strides(const Problem& problem, Broadcast broadcast);
// Elements of storage a view with these shape and strides spans (max offset + 1).
std::int64_t storage_elements(const Tensor::Shape& shape, const Strides& strides);

// The ABI's problem struct; valid_len points into problem.padding.valid_len, so the problem
// must outlive it.
attnbench_problem to_abi(const Problem& problem);

// "SIGSEGV (segmentation fault)" for a signal number.
std::string signal_description(int signal);

}  // namespace attn::plugin

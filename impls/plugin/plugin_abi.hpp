#pragma once
// The harness's side of the C ABI (attnbench_plugin.h, version 2), without any process or
// library: a plugin's description as C++ values (what the worker reports), its capabilities as
// attn's, whether a problem fits them, DLPack dtypes, and the layouts' strides. Pure functions,
// unit-tested in tests/plugin_abi_test.cpp. The problem as data for the worker is
// call_description.hpp; a version 1 plugin is read through abi_v1_shim.hpp.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "core/tensor_role.hpp"
#include "impls/implementation.hpp"
#include "impls/plugin/attnbench_plugin.h"

// In the C type's own (global) namespace, so that argument-dependent lookup finds it anywhere.
inline bool operator==(const attnbench_dl_datatype& a, const attnbench_dl_datatype& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

namespace attn::plugin {

using DlType = attnbench_dl_datatype;

// One dtype a role accepts (attnbench_role_dtype as a C++ value).
struct RoleDtype {
  std::int32_t role = ATTNBENCH_ROLE_DATA;
  DlType dtype{};
  bool operator==(const RoleDtype&) const = default;
};

// A plugin's description, copied out of its static attnbench_plugin_v2 (a version 1 plugin's
// through the shim: abi_version says which the plugin speaks).
struct PluginInfo {
  std::string path;  // the shared library
  std::string name, version, description;
  std::uint32_t abi_version = 0;
  std::uint32_t operations = 0, features = 0, layouts = 0;  // ATTNBENCH_OP_BIT, _FEATURE_*, _ACCEPTS_*
  std::vector<RoleDtype> dtypes;
  FullyMaskedPolicy fully_masked = FullyMaskedPolicy::zeros;
  std::int32_t min_head_dim = 0, max_head_dim = 0;
  std::vector<std::int32_t> head_dims;  // non-empty: only these
  MatmulPrecision matmul_precision = MatmulPrecision::working;
  MatmulPrecision accumulation_precision = MatmulPrecision::working;  // from accumulation_bits
  bool cuda = false;                    // device_type CUDA
  bool has_supports = false;            // exports the optional supports()
  // The score modifications declared by name (the exported attnbench_score_modifications), in
  // score_modification_rows order, no duplicates; to_capabilities adds those of the feature bits.
  std::vector<ScoreModification> score_modifications;

  bool has(std::uint32_t feature) const { return (features & feature) != 0; }
  bool accepts(std::int32_t role, DlType dtype) const;
  // The problem dtypes attnbench can run: those q, k, v and o all accept.
  std::vector<DType> data_dtypes() const;
};

// Copies and checks a description; throws std::runtime_error naming the bad field (an unknown
// device type, a NULL name, head dims out of order, no dtype, no layout, a short struct, a score
// modification named that attnbench does not know). `score_modification_names` is the string the
// plugin exports as attnbench_score_modifications, or null where it exports none.
PluginInfo read_plugin_info(const attnbench_plugin_v2& plugin, const std::string& path, const char* score_modification_names = nullptr);
// The score modifications a space-separated list names (attnbench_score_modifications;
// NULL or "" for none), in score_modification_rows order, each once; throws std::runtime_error
// naming an unknown name and listing the known ones.
std::vector<ScoreModification> parse_score_modifications(const char* names);
void to_json(nlohmann::json& j, const PluginInfo& info);
void from_json(const nlohmann::json& j, PluginInfo& info);

// The score modifications a plugin computes: those it names and those of its feature bits
// (SOFTCAP, SINK, DROPOUT), in score_modification_rows order, each once.
std::vector<ScoreModification> declared_score_modifications(const PluginInfo& info);
Capabilities to_capabilities(const PluginInfo& info);
// Lines describing the capabilities for `attnbench validate` ("dtypes: f32, f64", ...).
std::vector<std::string> describe_capabilities(const PluginInfo& info);
// Whether the declared capabilities cover the problem (operation, dtype, masks, head dims,
// d_k != d_v, GQA, a layout attnbench can pass); the reason names the first thing missing.
Support check_capabilities(const PluginInfo& info, const Problem& problem);

// DLPack's codes of attnbench's dtypes (f16 {FLOAT,16}, bf16 {BFLOAT,16}, ...).
DlType to_dl(DType dtype);
inline constexpr DlType dl_bool{ATTNBENCH_DL_BOOL, 8, 1};
std::optional<DType> dtype_from_dl(DlType dtype);
// "f32", "bf16", "fp8_e4m3fn", "bool", "int32", or "code 99 bits 8" for what has no name.
std::string dl_name(DlType dtype);
std::size_t dl_bytes(DlType dtype);  // of one element (lanes included), rounded up to bytes
// The one mapping between the ABI's ATTNBENCH_ROLE_* constants and the harness's roles
// (core/tensor_role.hpp): every constant has its role; weights alone has no constant (the ABI
// does not carry it). nullopt for anything else, ATTNBENCH_ROLE_DATA included.
std::optional<Role> to_role(std::int32_t abi_role);
std::optional<std::int32_t> to_abi_role(Role role);
// "q", "d_o", "block_table" (the role's to_string); "data" for ATTNBENCH_ROLE_DATA.
std::string role_name(std::int32_t role);

// The layouts a plugin's ATTNBENCH_ACCEPTS_* bits declare, in all_layouts() order (BHSD first).
std::vector<Layout> declared_layouts(std::uint32_t layouts);
// The layout a problem is handed over in: its own where declared (verify hands each declared
// layout out in turn), else the first declared (a problem in the default BHSD, or made elsewhere).
std::optional<Layout> handover_layout(const PluginInfo& info, const Problem& problem);
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

// "SIGSEGV (segmentation fault)" for a signal number.
std::string signal_description(int signal);

}  // namespace attn::plugin

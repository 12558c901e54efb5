#pragma once
// The problem as it crosses to the worker: plain data filled from a Problem on the harness's
// side (describe_call, plan_tensors), sent as JSON, and turned into the ABI's attnbench_call on
// the worker's side (AbiCall) without the worker ever parsing a Problem back. Every mapping from
// Problem fields to ABI fields is in describe_call and plan_tensors.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/problem.hpp"
#include "core/score_pipeline.hpp"
#include "impls/plugin/attnbench_plugin.h"
#include "impls/plugin/plugin_abi.hpp"

namespace attn::plugin {

// attnbench_call's scalar fields and the padding lengths, as values.
struct CallDescription {
  std::int32_t operation = ATTNBENCH_OP_FORWARD;
  std::int64_t batch = 0, h_q = 0, h_kv = 0, n_q = 0, n_k = 0, d_k = 0, d_v = 0;
  double scale = 0;
  attnbench_window window{ATTNBENCH_WINDOW_UNBOUNDED, ATTNBENCH_WINDOW_UNBOUNDED, ATTNBENCH_ALIGN_TOP_LEFT, 0};
  std::int32_t key_padding = ATTNBENCH_KEY_PADDING_NONE;
  std::vector<std::int64_t> valid_len;
  double softcap = 0, dropout_p = 0;
  std::uint64_t dropout_seed = 0;
  // Every setting of every score modification the problem uses (score_settings_of), in
  // score_modification_rows order: attnbench_call.settings. Nothing here names a modification, so
  // one added to core/score_pipeline.hpp crosses with no change; the named fields above stay for
  // the plugins built with them.
  std::vector<NamedSetting> settings;
  std::int64_t max_seqlen_q = 0, max_seqlen_k = 0, page_size = 0;
  DlType accumulation{ATTNBENCH_DL_FLOAT, 32, 1};
};

// The problem's visibility rule as the ABI's window: none {-1, -1}, causal {-1, 0} with its
// alignment. The one place the harness's causal model meets the ABI's.
attnbench_window abi_window(const Problem& problem);
CallDescription describe_call(const Problem& problem);
void to_json(nlohmann::json& j, const CallDescription& d);
void from_json(const nlohmann::json& j, CallDescription& d);

// One tensor of a call: its name in messages ("out" for the forward's output o, else the role's
// name: "d_o", "dk"), role, whether the plugin writes it, dtype, logical shape (ndim entries used)
// and strides in elements.
struct TensorSpec {
  std::string name;
  std::int32_t role = 0;
  bool output = false;
  DlType dtype{};
  std::int32_t ndim = 4;
  std::array<std::int64_t, 4> shape{};
  Strides strides{};
};
void to_json(nlohmann::json& j, const TensorSpec& t);
void from_json(const nlohmann::json& j, TensorSpec& t);

// A role a call hands over, and whether the plugin writes it.
struct CallRole {
  Role role;
  bool output = false;
};
// The roles a call of this problem's operation hands over, in arena order. Forward: q k v in, o
// out (and the lse when wanted). Backward: q k v o (the lse when given) d_o in, dq dk dv out. Both:
// the mask, bias and sink in where the problem has them; dropout's keep mask out in a forward pass
// with dropout only (a backward redraws it from the plugin's own stream, seeded alike).
std::vector<CallRole> call_roles(const Problem& problem, bool with_lse);
// One role's tensor handed over in `layout`: the data roles (q k v o d_o dq dk dv) in the layout's
// strides, the lse 3-D and dense, the mask and bias with stride 0 where they broadcast, the sink
// [h_q], the keep mask bytes, dense.
TensorSpec plan_tensor(const Problem& problem, CallRole role, Layout layout);
// Every tensor of a call of this problem (call_roles, each planned by plan_tensor).
std::vector<TensorSpec> plan_tensors(const Problem& problem, Layout layout, bool with_lse);

// The worker's attnbench_call: owns the views' shapes, strides, padding lengths and settings it
// points to (the settings' names are the score pipeline's literals), so it is neither copied nor moved. Tensor data starts NULL (as
// supports() sees it).
class AbiCall {
 public:
  AbiCall(const CallDescription& description, const std::vector<TensorSpec>& tensors, void* context);
  AbiCall(const AbiCall&) = delete;
  AbiCall& operator=(const AbiCall&) = delete;

  attnbench_call& call() { return call_; }
  const attnbench_call& call() const { return call_; }
  attnbench_dl_tensor* tensor(std::int32_t role) { return present_[std::size_t(role)] ? &tensors_[std::size_t(role)] : nullptr; }

 private:
  attnbench_call call_{};
  std::vector<std::int64_t> valid_len_;
  std::vector<attnbench_setting> settings_;
  std::array<attnbench_dl_tensor, ATTNBENCH_ROLE_COUNT> tensors_{};
  std::array<std::array<std::int64_t, 4>, ATTNBENCH_ROLE_COUNT> shapes_{}, strides_{};
  std::array<const attnbench_dl_tensor*, ATTNBENCH_ROLE_COUNT> pointers_{};
  std::array<bool, ATTNBENCH_ROLE_COUNT> present_{};
};

}  // namespace attn::plugin

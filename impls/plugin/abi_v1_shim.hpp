#pragma once
// A version 1 plugin (abi_v1/attnbench_plugin.h, the header as it was before version 2) seen as a
// version 2 one: its capabilities translated once, and its supports() and run() behind version 2
// entry points that turn each attnbench_call back into the version 1 problem and tensors. The
// worker then speaks version 2 alone. A call version 1 cannot express (an operation other than
// forward, a window other than none or causal, a reserved variant) is refused with a message
// rather than passed on wrong; the capabilities a version 1 plugin can declare never lead there.
#include <vector>

#include "impls/plugin/abi_v1/attnbench_plugin.h"
#undef ATTNBENCH_PLUGIN_ABI_VERSION  // version 1's, kept under its own name below
#ifndef ATTNBENCH_NO_ENTRY_POINT_DECLARATION
#define ATTNBENCH_NO_ENTRY_POINT_DECLARATION
#endif
#include "impls/plugin/attnbench_plugin.h"

namespace attn::plugin {

inline constexpr unsigned abi_version_1 = 1u;

class V1Shim {
 public:
  // `v1` must stay alive (the plugin's static description); its abi_version is not checked here.
  explicit V1Shim(const attnbench_plugin_v1& v1);
  V1Shim(const V1Shim&) = delete;
  V1Shim& operator=(const V1Shim&) = delete;

  const attnbench_plugin_v2& plugin() const { return v2_; }

 private:
  attnbench_plugin_v2 v2_{};
  std::vector<attnbench_role_dtype> dtypes_;
};

}  // namespace attn::plugin

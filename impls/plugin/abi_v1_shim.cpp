#include "impls/plugin/abi_v1_shim.hpp"

#include <cstdio>

namespace attn::plugin {
namespace {

// The version 1 dtype code of a DLPack dtype, or -1.
int32_t v1_dtype(const attnbench_dl_datatype& t) {
  if (t.lanes != 1) return -1;
  if (t.code == ATTNBENCH_DL_FLOAT && t.bits == 64) return ATTNBENCH_DTYPE_F64;
  if (t.code == ATTNBENCH_DL_FLOAT && t.bits == 32) return ATTNBENCH_DTYPE_F32;
  if (t.code == ATTNBENCH_DL_FLOAT && t.bits == 16) return ATTNBENCH_DTYPE_F16;
  if (t.code == ATTNBENCH_DL_BFLOAT && t.bits == 16) return ATTNBENCH_DTYPE_BF16;
  if (t.code == ATTNBENCH_DL_BOOL && t.bits == 8) return ATTNBENCH_DTYPE_BOOL;
  return -1;
}

// The version 1 problem of a call, or false with why it has none.
bool to_v1_problem(const attnbench_call& c, attnbench_problem& p, char* why, size_t why_len) {
  auto refuse = [&](const char* what) {
    std::snprintf(why, why_len, "ABI version 1 cannot express %s (the plugin speaks version 1)", what);
    return false;
  };
  if (c.operation != ATTNBENCH_OP_FORWARD) return refuse("an operation other than forward");
  if (c.softcap != 0 || c.dropout_p != 0 || c.page_size != 0 || c.max_seqlen_q != 0 || c.max_seqlen_k != 0)
    return refuse("soft-capping, dropout, packed or paged sequences");
  // Any score modification's settings, by name: one added later has no field above.
  if (c.setting_count > 0) return refuse("the settings of a score modification");
  p = attnbench_problem{};
  p.struct_size = sizeof(attnbench_problem);
  const attnbench_dl_tensor* q = attnbench_call_tensor(&c, ATTNBENCH_ROLE_Q);
  p.dtype = q != nullptr ? v1_dtype(q->dtype) : -1;
  if (p.dtype < 0 || p.dtype == ATTNBENCH_DTYPE_BOOL) return refuse("the dtype of q");
  p.batch = c.batch;
  p.h_q = c.h_q;
  p.h_kv = c.h_kv;
  p.n_q = c.n_q;
  p.n_k = c.n_k;
  p.d_k = c.d_k;
  p.d_v = c.d_v;
  p.scale = c.scale;
  const attnbench_window& w = c.window;
  if (w.left != ATTNBENCH_WINDOW_UNBOUNDED || (w.right != ATTNBENCH_WINDOW_UNBOUNDED && w.right != 0)) return refuse("a sliding window");
  p.causal = w.right == ATTNBENCH_WINDOW_UNBOUNDED              ? ATTNBENCH_CAUSAL_NONE
             : w.align == ATTNBENCH_ALIGN_BOTTOM_RIGHT ? ATTNBENCH_CAUSAL_BOTTOM_RIGHT
                                                       : ATTNBENCH_CAUSAL_TOP_LEFT;
  // The two versions number the padding kinds alike.
  p.padding = c.key_padding;
  p.valid_len = c.valid_len;
  p.valid_len_count = c.valid_len_count;
  p.has_bool_mask = attnbench_call_tensor(&c, ATTNBENCH_ROLE_MASK) != nullptr;
  p.has_bias = attnbench_call_tensor(&c, ATTNBENCH_ROLE_BIAS) != nullptr;
  if (attnbench_call_tensor(&c, ATTNBENCH_ROLE_SINK) != nullptr) return refuse("attention sinks");
  p.cuda_stream = c.cuda_stream;
  return true;
}

// Version 1 views are 4-D; the 3-D LSE gets a trailing dimension of 1.
attnbench_tensor to_v1_tensor(const attnbench_dl_tensor& t) {
  attnbench_tensor v{};
  v.data = t.data;
  v.dtype = v1_dtype(t.dtype);
  v.device_type = t.device.device_type;  // DLPack's codes in both: CPU/HOST 1, CUDA 2
  v.device_id = t.device.device_id;
  v.ndim = ATTNBENCH_MAX_DIMS;
  for (int i = 0; i < ATTNBENCH_MAX_DIMS; ++i) {
    v.shape[i] = i < t.ndim ? t.shape[i] : 1;
    v.strides[i] = i < t.ndim ? t.strides[i] : 1;
  }
  return v;
}

const attnbench_plugin_v1& v1_of(const attnbench_call* c) { return *static_cast<const attnbench_plugin_v1*>(c->context); }

int shim_supports(const attnbench_call* c, char* why, size_t why_len) {
  attnbench_problem p;
  if (!to_v1_problem(*c, p, why, why_len)) return 0;
  return v1_of(c).supports(&p, why, why_len);
}

int shim_run(const attnbench_call* c, char* error, size_t error_len) {
  attnbench_problem p;
  if (!to_v1_problem(*c, p, error, error_len)) return -1;
  attnbench_tensor views[7];
  const attnbench_tensor* pointers[7] = {};
  const int roles[7] = {ATTNBENCH_ROLE_Q, ATTNBENCH_ROLE_K,   ATTNBENCH_ROLE_V,   ATTNBENCH_ROLE_O,
                        ATTNBENCH_ROLE_LSE, ATTNBENCH_ROLE_MASK, ATTNBENCH_ROLE_BIAS};
  for (int i = 0; i < 7; ++i)
    if (const attnbench_dl_tensor* t = attnbench_call_tensor(c, roles[i])) {
      views[i] = to_v1_tensor(*t);
      pointers[i] = &views[i];
    }
  return v1_of(c).run(&p, pointers[0], pointers[1], pointers[2], pointers[3], pointers[4], pointers[5], pointers[6], error, error_len);
}

}  // namespace

V1Shim::V1Shim(const attnbench_plugin_v1& v1) {
  const attnbench_capabilities& c = v1.capabilities;
  for (int32_t code : {ATTNBENCH_DTYPE_F64, ATTNBENCH_DTYPE_F32, ATTNBENCH_DTYPE_F16, ATTNBENCH_DTYPE_BF16}) {
    if ((c.dtypes & ATTNBENCH_DTYPE_BIT(code)) == 0) continue;
    const attnbench_dl_datatype dl = code == ATTNBENCH_DTYPE_F64   ? attnbench_dl_datatype{ATTNBENCH_DL_FLOAT, 64, 1}
                                     : code == ATTNBENCH_DTYPE_F32 ? attnbench_dl_datatype{ATTNBENCH_DL_FLOAT, 32, 1}
                                     : code == ATTNBENCH_DTYPE_F16 ? attnbench_dl_datatype{ATTNBENCH_DL_FLOAT, 16, 1}
                                                                   : attnbench_dl_datatype{ATTNBENCH_DL_BFLOAT, 16, 1};
    dtypes_.push_back({ATTNBENCH_ROLE_DATA, dl});
  }
  v2_.abi_version = abi_version_1;  // what the plugin speaks, for the reports
  v2_.struct_size = sizeof(attnbench_plugin_v2);
  v2_.name = v1.name;
  v2_.version = v1.version;
  v2_.description = v1.description;
  attnbench_plugin_caps& caps = v2_.capabilities;
  caps.operations = ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD);
  // Version 1's mask bits are version 2's first six feature bits, and its layout bits the same.
  caps.features = c.masks & 0x3Fu;
  if (c.gqa) caps.features |= ATTNBENCH_FEATURE_GQA;
  if (c.different_dk_dv) caps.features |= ATTNBENCH_FEATURE_DIFFERENT_DK_DV;
  if (c.returns_lse) caps.features |= ATTNBENCH_FEATURE_LSE;
  if (c.deterministic) caps.features |= ATTNBENCH_FEATURE_DETERMINISTIC;
  caps.layouts = c.layouts;
  caps.fully_masked_policy = c.fully_masked_policy;
  caps.dtypes = dtypes_.data();
  caps.dtype_count = static_cast<int32_t>(dtypes_.size());
  caps.min_head_dim = c.min_head_dim;
  caps.max_head_dim = c.max_head_dim;
  caps.head_dim_count = c.head_dim_count;
  caps.head_dims = c.head_dims;
  caps.device_type = c.device_type;  // HOST and CUDA are DLPack's CPU and CUDA codes
  caps.matmul_unit_roundoff = 0;  // v1 has no field: validate --matmul-unit-roundoff declares it
  v2_.supports = v1.supports != nullptr ? shim_supports : nullptr;
  v2_.run = v1.run != nullptr ? shim_run : nullptr;
  v2_.context = const_cast<attnbench_plugin_v1*>(&v1);
}

}  // namespace attn::plugin

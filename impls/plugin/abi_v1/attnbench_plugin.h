/* attnbench plugin ABI, version 1: how a third-party attention kernel is handed to attnbench.
 *
 * A plugin is a shared library exporting one C function,
 *
 *     const attnbench_plugin_v1* attnbench_plugin_get(uint32_t abi_version);
 *
 * attnbench calls it once with the ABI version it speaks (ATTNBENCH_PLUGIN_ABI_VERSION). The plugin
 * returns a pointer to a static description of itself whose abi_version equals the argument, or
 * NULL when it does not speak that version; attnbench refuses a plugin whose answer carries another
 * version. Only C types cross this boundary: no C++ types, no exceptions, no allocation that one
 * side must free on the other. Plain C99; the header is usable from C and C++ (and nvcc).
 *
 * Ownership, in one sentence: attnbench owns every tensor, every string buffer and the problem;
 * the plugin owns its description (static storage, alive until the library is unloaded) and any
 * scratch memory it allocates and frees within one call.
 *
 * Isolation: attnbench never calls a plugin in its own process. A worker process
 * (attnbench-plugin-host) loads it and makes each call; a crash, an abort, a hang past the
 * timeout, a CUDA error, a write outside an output or into an input becomes that case's failure.
 *
 * Semantics (attnbench's DESIGN.md): O = softmax(Q K^T * scale + bias, masked) V, per (batch,
 * query head); query head h reads key/value head h / (h_q / h_kv). A masked key is excluded
 * exactly, as if it did not exist. A row with no visible key is "fully masked": the plugin writes
 * what its fully_masked_policy declares (zeros and an LSE of -inf, or NaN).
 */
#ifndef ATTNBENCH_PLUGIN_H
#define ATTNBENCH_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNBENCH_PLUGIN_ABI_VERSION 1u
/* The exported entry point's name, for dlsym. */
#define ATTNBENCH_PLUGIN_ENTRY_POINT "attnbench_plugin_get"

/* Element types (attnbench_tensor.dtype). f16 is IEEE binary16, bf16 the upper half of a binary32;
 * both are stored as their 16-bit patterns. bool is one byte per element, 0 (masked) or 1. */
typedef enum {
  ATTNBENCH_DTYPE_F64 = 0,
  ATTNBENCH_DTYPE_F32 = 1,
  ATTNBENCH_DTYPE_F16 = 2,
  ATTNBENCH_DTYPE_BF16 = 3,
  ATTNBENCH_DTYPE_BOOL = 4
} attnbench_dtype;
/* Capability bit of a dtype (attnbench_capabilities.dtypes). */
#define ATTNBENCH_DTYPE_BIT(dtype) (1u << (unsigned)(dtype))

/* Where a tensor's memory is (DLPack's codes). */
typedef enum { ATTNBENCH_DEVICE_HOST = 1, ATTNBENCH_DEVICE_CUDA = 2 } attnbench_device;

/* Memory layouts a plugin accepts (attnbench_capabilities.layouts). Shapes are always the logical
 * [batch, heads, sequence, head dim]; strides say where elements are:
 *   BHSD:    dense row-major in that order (attnbench's own layout),
 *   BSHD:    dense with sequence before heads (FlashAttention's, PyTorch's [b, s, h, d]),
 *   STRIDED: any strides, read from the tensor (then attnbench may pass either of the above). */
#define ATTNBENCH_LAYOUT_BHSD (1u << 0)
#define ATTNBENCH_LAYOUT_BSHD (1u << 1)
#define ATTNBENCH_LAYOUT_STRIDED (1u << 2)

/* Mask kinds a plugin implements (attnbench_capabilities.masks). Every kind composes with every
 * other by intersection; a bias is added to the scaled scores of the visible keys. */
#define ATTNBENCH_MASK_CAUSAL_TOP_LEFT (1u << 0)     /* query i sees key j iff j <= i */
#define ATTNBENCH_MASK_CAUSAL_BOTTOM_RIGHT (1u << 1) /* query i sees key j iff j <= i + n_k - n_q */
#define ATTNBENCH_MASK_PADDING_PER_BATCH (1u << 2)   /* key j visible iff j < valid_len[b] */
#define ATTNBENCH_MASK_PADDING_PER_QUERY (1u << 3)   /* key j visible iff j < valid_len[b * n_q + i] */
#define ATTNBENCH_MASK_BOOL (1u << 4)                /* the mask tensor: key visible iff mask != 0 */
#define ATTNBENCH_MASK_BIAS (1u << 5)                /* the bias tensor, added to the scaled scores */

typedef enum { ATTNBENCH_CAUSAL_NONE = 0, ATTNBENCH_CAUSAL_TOP_LEFT = 1, ATTNBENCH_CAUSAL_BOTTOM_RIGHT = 2 } attnbench_causal;
typedef enum { ATTNBENCH_PADDING_NONE = 0, ATTNBENCH_PADDING_PER_BATCH = 1, ATTNBENCH_PADDING_PER_QUERY = 2 } attnbench_padding;
/* What a fully masked row's output is: zeros (LSE -inf), or NaN (LSE NaN or -inf). */
typedef enum { ATTNBENCH_FULLY_MASKED_ZEROS = 0, ATTNBENCH_FULLY_MASKED_NAN = 1 } attnbench_fully_masked_policy;

/* A tensor view in the spirit of DLPack: attnbench owns the memory. ndim is 4 for every tensor
 * attnbench passes; shape and strides are in ELEMENTS (not bytes), stride 0 broadcasts (the mask
 * and bias over batch or heads). data is a host pointer (device_type HOST) or a CUDA device
 * pointer on device device_id (device_type CUDA). Outputs arrive filled with a NaN pattern no
 * arithmetic produces, so an element the plugin does not write is detected; they end exactly
 * at a guard page (host) or a canary region (CUDA). data is aligned to the element size only. */
#define ATTNBENCH_MAX_DIMS 4
typedef struct {
  void* data;
  int32_t dtype;       /* attnbench_dtype */
  int32_t device_type; /* attnbench_device */
  int32_t device_id;
  int32_t ndim;
  int64_t shape[ATTNBENCH_MAX_DIMS];
  int64_t strides[ATTNBENCH_MAX_DIMS];
} attnbench_tensor;

/* The problem of one call; attnbench owns it, valid for the duration of the call. */
typedef struct {
  uint32_t struct_size; /* sizeof(attnbench_problem) of attnbench's build: fields may be appended */
  int32_t dtype;        /* of q, k, v, out and bias (attnbench_dtype) */
  int64_t batch, h_q, h_kv, n_q, n_k, d_k, d_v;
  double scale;         /* multiply Q K^T by this (1/sqrt(d_k) unless the case sets another) */
  int32_t causal;       /* attnbench_causal */
  int32_t padding;      /* attnbench_padding */
  /* PER_BATCH: batch entries; PER_QUERY: batch * n_q entries (b * n_q + i); else NULL and 0.
   * Host memory even for a CUDA plugin (it is also in the mask tensor's terms, see run). */
  const int64_t* valid_len;
  int64_t valid_len_count;
  int32_t has_bool_mask; /* run's mask tensor is non-NULL */
  int32_t has_bias;      /* run's bias tensor is non-NULL */
  /* CUDA plugins: the cudaStream_t to enqueue on (attnbench synchronises it after run returns,
   * and checks for CUDA errors); NULL for host plugins. */
  void* cuda_stream;
} attnbench_problem;

/* What a plugin supports. attnbench skips (with the reason) any case outside it, so declare only
 * what the kernel implements: a declared capability that is wrong is a failure, not a skip. */
typedef struct {
  uint32_t dtypes;   /* ATTNBENCH_DTYPE_BIT(...) of the input/output types */
  uint32_t layouts;  /* ATTNBENCH_LAYOUT_* */
  uint32_t masks;    /* ATTNBENCH_MASK_* */
  int32_t fully_masked_policy; /* attnbench_fully_masked_policy */
  /* Head dimensions (d_k and d_v): the listed ones when head_dim_count > 0, else every value in
   * [min_head_dim, max_head_dim]. */
  int32_t min_head_dim, max_head_dim;
  const int32_t* head_dims;
  int32_t head_dim_count;
  int32_t different_dk_dv; /* d_k != d_v allowed */
  int32_t gqa;             /* h_kv < h_q allowed (GQA, MQA) */
  int32_t returns_lse;     /* run fills lse (else attnbench passes NULL) */
  int32_t deterministic;   /* bitwise identical results on repeated calls */
  int32_t device_type;     /* attnbench_device: where run's tensors live */
} attnbench_capabilities;

typedef struct attnbench_plugin_v1 {
  uint32_t abi_version; /* ATTNBENCH_PLUGIN_ABI_VERSION */
  const char* name;     /* short identifier, [A-Za-z0-9_.-], e.g. "c_cpu_reference" */
  const char* version;  /* the plugin's own version, free text */
  const char* description; /* one line: the algorithm and its precision */
  attnbench_capabilities capabilities;
  /* Optional (may be NULL): finer support than the capabilities say. Returns nonzero when the
   * problem is supported; else writes why (NUL-terminated, at most why_len bytes) and returns 0. */
  int (*supports)(const attnbench_problem* problem, char* why, size_t why_len);
  /* One forward pass; every view is 4-D:
   *   q    [batch, h_q,  n_q, d_k]    k [batch, h_kv, n_k, d_k]    v [batch, h_kv, n_k, d_v]
   *   out  [batch, h_q,  n_q, d_v]    written completely, in problem->dtype
   *   lse  [batch, h_q,  n_q, 1]      f64 for f64 problems, else f32 (natural log); NULL unless
   *                                   capabilities.returns_lse
   *   mask [batch, h_q,  n_q, n_k]    bool, strides 0 where broadcast; NULL unless has_bool_mask.
   *                                   Causality and padding are NOT folded into it: they come as
   *                                   problem->causal and problem->valid_len.
   *   bias [batch, h_q,  n_q, n_k]    problem->dtype, strides 0 where broadcast; NULL unless has_bias
   * q, k, v, mask and bias are inputs: the plugin must not write them. Returns 0 on success; else
   * nonzero with a NUL-terminated message of at most error_len bytes in error, and that case fails
   * with it. A CUDA plugin enqueues on problem->cuda_stream and may return before the work ends. */
  int (*run)(const attnbench_problem* problem, const attnbench_tensor* q, const attnbench_tensor* k,
             const attnbench_tensor* v, const attnbench_tensor* out, const attnbench_tensor* lse,
             const attnbench_tensor* mask, const attnbench_tensor* bias, char* error, size_t error_len);
} attnbench_plugin_v1;

/* The entry point a plugin exports (declared here so a plugin's definition is checked). */
#if defined(_WIN32)
#define ATTNBENCH_PLUGIN_EXPORT __declspec(dllexport)
#else
#define ATTNBENCH_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif
ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v1* attnbench_plugin_get(uint32_t abi_version);

#ifdef __cplusplus
}
#endif

#endif /* ATTNBENCH_PLUGIN_H */

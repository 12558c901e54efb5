/* attnbench plugin ABI, version 2: how a third-party attention kernel is handed to attnbench.
 *
 * A plugin is a shared library exporting one C function,
 *
 *     const attnbench_plugin_v2* attnbench_plugin_get(uint32_t abi_version);
 *
 * attnbench calls it with the newest ABI version it speaks (ATTNBENCH_ABI_VERSION, 2), then, if
 * the answer is NULL, with older ones (1). The plugin returns a pointer to a static description of
 * itself whose abi_version equals the argument, or NULL when it does not speak that version.
 * Version 1 plugins (abi_v1/attnbench_plugin.h) keep working unchanged. Only C types cross this
 * boundary: no C++ types, no exceptions, no allocation that one side must free on the other.
 * Plain C99; usable from C, C++ and nvcc. This header is the only file a plugin needs.
 *
 * Ownership: attnbench owns every tensor, every string buffer and the call; the plugin owns its
 * description (static storage, alive until the library is unloaded) and any scratch memory it
 * allocates and frees within one call.
 *
 * Isolation: attnbench never calls a plugin in its own process. A worker process
 * (attnbench-plugin-host) loads it and makes each call; a crash, an abort, a hang past the
 * timeout, a CUDA error, a write outside an output or into an input becomes that case's failure.
 *
 * Semantics (attnbench's DESIGN.md), forward: O = softmax(Q K^T * scale + bias, masked) V, per
 * (batch, query head); query head h reads key/value head h / (h_q / h_kv). A masked key is
 * excluded exactly, as if it did not exist. A row with no visible key is "fully masked": the
 * plugin writes what its fully_masked_policy declares. Backward (ATTNBENCH_OP_BACKWARD): from Q,
 * K, V, O, LSE and dO, the gradients dQ, dK, dV of that forward pass (through every mask, score
 * modification and the same dropout keep mask), dK and dV summed over the query heads of a group.
 *
 * Score modifications (core/README.md, "The score pipeline": soft-capping "softcap", attention
 * sinks "sink", dropout "dropout", and whatever attnbench adds later) are named, not numbered: a
 * plugin declares those it computes by name in the string it exports as
 * attnbench_score_modifications ("softcap dropout", see below), and reads a modification's scalar settings by name with attnbench_call_setting(call,
 * "softcap") (NULL when the problem does not use it). attnbench hands a plugin only problems whose
 * modifications it declared. A modification added to attnbench later needs no new field, feature
 * bit or ABI version: its name and its settings' names are all a plugin needs. (The three first
 * also have feature bits and named call fields, kept for the plugins built with them.)
 *
 * Tensors are DLPack's: attnbench_dl_tensor, attnbench_dl_datatype and attnbench_dl_device have
 * the layout and codes of DLPack 1.x's DLTensor, DLDataType and DLDevice (a pointer to one may be
 * cast to the other; tests/plugin_dlpack_test checks the layout against dlpack.h). They carry our
 * prefix so that this header and dlpack.h can be included together.
 */
#ifndef ATTNBENCH_PLUGIN_V2_H
#define ATTNBENCH_PLUGIN_V2_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNBENCH_ABI_VERSION 2u
#ifndef ATTNBENCH_PLUGIN_ENTRY_POINT
/* The exported entry point's name, for dlsym (the same in every version). */
#define ATTNBENCH_PLUGIN_ENTRY_POINT "attnbench_plugin_get"
#endif

/* --- DLPack's vocabulary --------------------------------------------------------------------- */

/* DLDataTypeCode: attnbench_dl_datatype.code. f16 is {FLOAT, 16, 1}, bf16 {BFLOAT, 16, 1}, f32
 * {FLOAT, 32, 1}, f64 {FLOAT, 64, 1}; a boolean mask {BOOL, 8, 1} (one byte, 0 masked, 1 visible),
 * dropout's keep mask too (1 kept, 0 dropped); an index array (cu_seqlens, block table)
 * {INT, 32, 1}. The fp8, fp6 and fp4 codes are DLPack's. */
#define ATTNBENCH_DL_INT 0
#define ATTNBENCH_DL_UINT 1
#define ATTNBENCH_DL_FLOAT 2
#define ATTNBENCH_DL_OPAQUE_HANDLE 3
#define ATTNBENCH_DL_BFLOAT 4
#define ATTNBENCH_DL_COMPLEX 5
#define ATTNBENCH_DL_BOOL 6
#define ATTNBENCH_DL_FLOAT8_E3M4 7
#define ATTNBENCH_DL_FLOAT8_E4M3 8
#define ATTNBENCH_DL_FLOAT8_E4M3B11FNUZ 9
#define ATTNBENCH_DL_FLOAT8_E4M3FN 10
#define ATTNBENCH_DL_FLOAT8_E4M3FNUZ 11
#define ATTNBENCH_DL_FLOAT8_E5M2 12
#define ATTNBENCH_DL_FLOAT8_E5M2FNUZ 13
#define ATTNBENCH_DL_FLOAT8_E8M0FNU 14
#define ATTNBENCH_DL_FLOAT6_E2M3FN 15
#define ATTNBENCH_DL_FLOAT6_E3M2FN 16
#define ATTNBENCH_DL_FLOAT4_E2M1FN 17

/* DLDeviceType: attnbench_dl_device.device_type (attnbench passes CPU or CUDA). */
#define ATTNBENCH_DL_CPU 1
#define ATTNBENCH_DL_CUDA 2

typedef struct {
  uint8_t code;   /* ATTNBENCH_DL_* */
  uint8_t bits;   /* of one lane */
  uint16_t lanes; /* 1 */
} attnbench_dl_datatype;

typedef struct {
  int32_t device_type; /* ATTNBENCH_DL_CPU or ATTNBENCH_DL_CUDA */
  int32_t device_id;
} attnbench_dl_device;

/* A tensor view; attnbench owns the memory. shape and strides have ndim entries, strides are in
 * ELEMENTS (as DLPack's) and never NULL; stride 0 broadcasts (the mask and bias over batch or
 * heads). data is a host pointer (CPU) or a CUDA device pointer (CUDA, device_id); byte_offset is
 * 0. Outputs arrive filled with a NaN pattern no arithmetic produces (KEEP: bytes 0xFF), so an
 * element the plugin does not write is detected; they end exactly at a guard page (host) or a
 * canary region (CUDA). data is aligned to the element size only. */
typedef struct {
  void* data;
  attnbench_dl_device device;
  int32_t ndim;
  attnbench_dl_datatype dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} attnbench_dl_tensor;

/* --- roles: which tensor is which --------------------------------------------------------------- */

/* attnbench_call.tensors is indexed by role; an absent role's entry is NULL. Shapes (strides in
 * the tensor; the layout capability says which strides a plugin accepts for q k v o d_o dq dk dv):
 *   Q, DQ    [batch, h_q,  n_q, d_k]      K, DK  [batch, h_kv, n_k, d_k]
 *   V, DV    [batch, h_kv, n_k, d_v]      O, D_O [batch, h_q,  n_q, d_v]
 *   LSE      [batch, h_q, n_q]            natural-log sum of exp of the scaled, masked scores;
 *                                         f64 for f64 problems, else f32
 *   BIAS     [batch, h_q, n_q, n_k]       added to the scaled scores; stride 0 where broadcast
 *   MASK     [batch, h_q, n_q, n_k]       BOOL, nonzero = visible; stride 0 where broadcast. The
 *                                         window and the padding are NOT folded into it.
 *   SINK     [h_q] FLOAT 32               the attention sink's logit of each query head (FEATURE_SINK):
 *                                         one more term exp(sink - m) in every row's softmax
 *                                         denominator, with no value (m: the max of the row's
 *                                         scores and the sink); a row that sees no key stays
 *                                         fully masked
 *   KEEP     [batch, h_q, n_q, n_k] BOOL  dropout's keep mask Z, an output (FEATURE_DROPOUT): 8
 *                                         bits, 1 kept, 0 dropped, dense; passed to every forward
 *                                         call with call.dropout_p > 0, and then written: attnbench
 *                                         judges O given the Z reported (the stream is the plugin's
 *                                         own) and Z's rate. A masked pair's entry does not matter.
 *                                         Not passed to a backward call: it redraws the same Z from
 *                                         dropout_seed, and its gradients are judged given the Z its
 *                                         forward reported
 *   CU_SEQLENS_Q/K  [batch + 1] INT32     reserved: packed sequences (prefix sums of lengths)
 *   SEQLENS_K       [batch] INT32         reserved: per-sequence key lengths (paged caches)
 *   BLOCK_TABLE     [batch, blocks] INT32 reserved: paged K/V (page_size keys per block)
 * Forward: Q K V (BIAS MASK SINK) in, O (LSE KEEP) out. Backward: Q K V O (LSE) D_O (BIAS MASK
 * SINK) in, DQ DK DV out, O and LSE those of the plugin's own forward on the same inputs (the LSE
 * only for a plugin that sets FEATURE_LSE). Inputs must not be written; every element of every
 * output must be (a key no query sees has dK = dV = 0, a fully masked row dQ = 0). */
#define ATTNBENCH_ROLE_Q 0
#define ATTNBENCH_ROLE_K 1
#define ATTNBENCH_ROLE_V 2
#define ATTNBENCH_ROLE_O 3
#define ATTNBENCH_ROLE_LSE 4
#define ATTNBENCH_ROLE_D_O 5
#define ATTNBENCH_ROLE_DQ 6
#define ATTNBENCH_ROLE_DK 7
#define ATTNBENCH_ROLE_DV 8
#define ATTNBENCH_ROLE_BIAS 9
#define ATTNBENCH_ROLE_MASK 10
#define ATTNBENCH_ROLE_SINK 11
#define ATTNBENCH_ROLE_CU_SEQLENS_Q 12
#define ATTNBENCH_ROLE_CU_SEQLENS_K 13
#define ATTNBENCH_ROLE_SEQLENS_K 14
#define ATTNBENCH_ROLE_BLOCK_TABLE 15
#define ATTNBENCH_ROLE_KEEP 16
#define ATTNBENCH_ROLE_COUNT 17
/* In attnbench_role_dtype.role only: every role holding the problem's data (q k v o bias d_o dq
 * dk dv), so a plugin of one dtype declares it once. */
#define ATTNBENCH_ROLE_DATA (-1)

/* --- the call ----------------------------------------------------------------------------------- */

#define ATTNBENCH_OP_FORWARD 0
#define ATTNBENCH_OP_BACKWARD 1
#define ATTNBENCH_OP_BIT(op) (1u << (unsigned)(op))

/* Which keys a query sees, as a window around its diagonal. With delta = 0 (ALIGN_TOP_LEFT) or
 * n_k - n_q (ALIGN_BOTTOM_RIGHT), query i sees key j iff
 *     (left  < 0 || j >= i + delta - left) && (right < 0 || j <= i + delta + right);
 * ATTNBENCH_WINDOW_UNBOUNDED (-1) leaves a side open. No window: {-1, -1}; causal: {-1, 0}. */
#define ATTNBENCH_WINDOW_UNBOUNDED (-1)
#define ATTNBENCH_ALIGN_TOP_LEFT 0
#define ATTNBENCH_ALIGN_BOTTOM_RIGHT 1
typedef struct {
  int64_t left, right;
  int32_t align;
  int32_t reserved; /* 0 */
} attnbench_window;

/* Key padding: key j of batch b (query i) visible iff j < valid_len[b] (PER_BATCH) or
 * j < valid_len[b * n_q + i] (PER_QUERY). */
#define ATTNBENCH_KEY_PADDING_NONE 0
#define ATTNBENCH_KEY_PADDING_PER_BATCH 1
#define ATTNBENCH_KEY_PADDING_PER_QUERY 2

/* One scalar setting of a score modification the call's problem uses (attnbench_call.settings),
 * by its name: "softcap" (soft-capping's c), "dropout_p", "dropout_seed" (core/README.md, "The
 * score pipeline"; `attnbench list` names the modifications). value is its value (an integer
 * setting's too, as the nearest double); integer is an integer setting's exact value (a seed, all
 * 64 bits), 0 for a real one. */
typedef struct {
  const char* name;
  double value;
  uint64_t integer;
} attnbench_setting;

/* One call (run) or one question (supports); attnbench owns it, valid for the call's duration. */
typedef struct {
  uint32_t struct_size; /* sizeof(attnbench_call) of attnbench's build: fields may be appended */
  int32_t operation;    /* ATTNBENCH_OP_* */
  int64_t batch, h_q, h_kv, n_q, n_k, d_k, d_v;
  double scale; /* multiply Q K^T by this (1/sqrt(d_k) unless the case sets another) */
  attnbench_window window;
  int32_t key_padding; /* ATTNBENCH_KEY_PADDING_* */
  int32_t reserved0;
  const int64_t* valid_len; /* host memory; batch or batch * n_q entries; NULL when NONE */
  int64_t valid_len_count;
  /* Soft-capping (ATTNBENCH_FEATURE_SOFTCAP; 0: none): each scaled score s becomes
   * softcap * tanh(s / softcap), before the bias is added. */
  double softcap;
  /* Dropout (ATTNBENCH_FEATURE_DROPOUT; dropout_p 0: none): after the softmax each weight P_ij is
   * kept (Z_ij = 1) with probability 1 - dropout_p or dropped (Z_ij = 0), and
   * O_i = sum_j P_ij Z_ij / (1 - dropout_p) V_j; the LSE is the softmax's, before dropout. Z comes
   * from the plugin's own random stream seeded by dropout_seed (the same seed must give the same
   * Z, another seed another); the plugin reports it in the KEEP tensor. */
  double dropout_p;
  uint64_t dropout_seed;
  /* Reserved for the variants later versions of attnbench request (each has a feature bit; 0
   * means off): packed sequences' longest lengths, the paged caches' page size. */
  int64_t max_seqlen_q, max_seqlen_k;
  int64_t page_size;
  /* The precision attnbench's reference accumulates in: {FLOAT, 64} for f64 data, else {FLOAT,
   * 32}. Informational: the pass rule is attnbench's (DESIGN.md). */
  attnbench_dl_datatype accumulation;
  int32_t reserved1;
  /* CUDA plugins: the cudaStream_t to enqueue on (attnbench synchronises it after run returns and
   * checks for CUDA errors); NULL for host plugins. */
  void* cuda_stream;
  void* context; /* the description's context, as given */
  /* Indexed by ATTNBENCH_ROLE_*, tensor_count entries (ATTNBENCH_ROLE_COUNT of attnbench's build;
   * read through attnbench_call_tensor). In supports() every tensor is described (dtype, shape,
   * strides) with data NULL. */
  int32_t tensor_count;
  int32_t reserved2;
  const attnbench_dl_tensor* const* tensors;
  /* Appended (absent from a call of an older attnbench: struct_size says; read them through
   * attnbench_call_setting, which checks). Every scalar setting of every score modification the
   * problem uses, by name, as `attnbench list` and core/README.md "The score pipeline" name them
   * ("softcap"; "dropout_p", "dropout_seed"); a modification the problem does not use has no
   * entry, so a setting present means its modification is on. setting_count entries; settings and
   * their names are attnbench's, valid for the call's duration. The named fields above (softcap,
   * dropout_p, dropout_seed) still carry the same values; a modification added later has its
   * settings here only, and needs no new field or feature bit. */
  int32_t setting_count;
  int32_t reserved3;
  const attnbench_setting* settings;
} attnbench_call;

/* The tensor of a role, or NULL when the call has none. */
static inline const attnbench_dl_tensor* attnbench_call_tensor(const attnbench_call* call, int role) {
  return role >= 0 && role < call->tensor_count ? call->tensors[role] : NULL;
}

/* The call's setting of that name (attnbench_call.settings), or NULL: when the problem does not
 * use its modification, and when the call comes from an attnbench older than the settings (its
 * struct_size does not cover them). */
static inline const attnbench_setting* attnbench_call_setting(const attnbench_call* call, const char* name) {
  int32_t i;
  if (call->struct_size < offsetof(attnbench_call, settings) + sizeof(call->settings) || call->settings == NULL) return NULL;
  for (i = 0; i < call->setting_count; ++i)
    if (call->settings[i].name != NULL && strcmp(call->settings[i].name, name) == 0) return &call->settings[i];
  return NULL;
}

/* --- capabilities -------------------------------------------------------------------------------- */

/* Features a plugin implements (attnbench_plugin_caps.features). Every mask composes with every
 * other by intersection; a bias is added to the scaled scores of the visible keys. attnbench
 * skips (with the reason) any case outside them, so declare only what the kernel implements: a
 * declared capability that is wrong is a failure, not a skip. */
#define ATTNBENCH_FEATURE_CAUSAL_TOP_LEFT (1u << 0)     /* window {-1, 0} aligned top-left */
#define ATTNBENCH_FEATURE_CAUSAL_BOTTOM_RIGHT (1u << 1) /* window {-1, 0} aligned bottom-right */
#define ATTNBENCH_FEATURE_PADDING_PER_BATCH (1u << 2)
#define ATTNBENCH_FEATURE_PADDING_PER_QUERY (1u << 3)
#define ATTNBENCH_FEATURE_BOOL_MASK (1u << 4)
#define ATTNBENCH_FEATURE_BIAS (1u << 5)
#define ATTNBENCH_FEATURE_SLIDING_WINDOW (1u << 6) /* any window with a bounded side */
#define ATTNBENCH_FEATURE_GQA (1u << 8)            /* h_kv < h_q (GQA, MQA) */
#define ATTNBENCH_FEATURE_DIFFERENT_DK_DV (1u << 9)
#define ATTNBENCH_FEATURE_LSE (1u << 10)           /* fills the LSE (else attnbench passes none) */
#define ATTNBENCH_FEATURE_DETERMINISTIC (1u << 11) /* bitwise identical results on repeated calls */
/* Masked keys are kept out entirely: NaN or Inf in a masked K/V row never reaches an output. */
#define ATTNBENCH_FEATURE_MASKED_NONFINITE_SAFE (1u << 12)
/* Restrictions (a set bit narrows what the plugin computes; an older plugin sets neither):
 * the scale is 1/sqrt(d_k) and built in (cases with another scale run as their projection onto
 * the default); every problem has a causal window (cases without one run with one added,
 * bottom-right where declared, else top-left; declare at least one causal feature). */
#define ATTNBENCH_FEATURE_DEFAULT_SCALE_ONLY (1u << 13)
#define ATTNBENCH_FEATURE_CAUSAL_ONLY (1u << 14)
/* The score modifications with a bit of their own; attnbench_score_modifications declares the same
 * by name ("softcap", "sink", "dropout"), and any later one only so. */
#define ATTNBENCH_FEATURE_SOFTCAP (1u << 16)   /* softcap * tanh(s / softcap) of the scaled scores (call.softcap) */
#define ATTNBENCH_FEATURE_SINK (1u << 17)      /* attention sinks: the SINK tensor, one logit per query head */
#define ATTNBENCH_FEATURE_DROPOUT (1u << 18)   /* dropout (call.dropout_p, dropout_seed): O = P Z / (1 - p) V, the
                                                  LSE before dropout; the plugin reports Z (KEEP) */
#define ATTNBENCH_FEATURE_PACKED (1u << 19)    /* reserved: CU_SEQLENS_Q/K */
#define ATTNBENCH_FEATURE_PAGED (1u << 20)     /* reserved: BLOCK_TABLE, page_size */

/* Memory layouts a plugin accepts (attnbench_plugin_caps.layouts). Shapes are always logical;
 * strides say where elements are:
 *   BHSD:    dense row-major in shape order (attnbench's own layout),
 *   BSHD:    dense with sequence before heads (FlashAttention's, PyTorch's [b, s, h, d]),
 *   STRIDED: any strides, read from the tensor (then attnbench may pass either of the above). */
#define ATTNBENCH_ACCEPTS_BHSD (1u << 0)
#define ATTNBENCH_ACCEPTS_BSHD (1u << 1)
#define ATTNBENCH_ACCEPTS_STRIDED (1u << 2)

/* What a fully masked row's output is: zeros (LSE -inf), or NaN (LSE NaN or -inf). */
#define ATTNBENCH_FULLY_MASKED_AS_ZEROS 0
#define ATTNBENCH_FULLY_MASKED_AS_NAN 1

/* One dtype a role accepts; a role accepts every dtype listed for it or for ATTNBENCH_ROLE_DATA.
 * attnbench runs a case of data dtype D when q, k, v and o (and bias) all accept D. A role's own
 * entries say that role may be in that dtype whatever the others are in: attnbench then also runs
 * mixed-precision cases (repro token dtypes=o:f32: f16 inputs, an f32 output) in which every role
 * whose dtype differs from the case's lists it for itself. ATTNBENCH_ROLE_DATA entries alone declare
 * one-dtype cases only. Each tensor's dtype field says which it is; supports() may still refuse. */
typedef struct {
  int32_t role; /* ATTNBENCH_ROLE_* or ATTNBENCH_ROLE_DATA */
  attnbench_dl_datatype dtype;
} attnbench_role_dtype;

typedef struct {
  uint32_t operations; /* ATTNBENCH_OP_BIT(...) */
  uint32_t features;   /* ATTNBENCH_FEATURE_* */
  uint32_t layouts;    /* ATTNBENCH_ACCEPTS_* */
  int32_t fully_masked_policy; /* ATTNBENCH_FULLY_MASKED_AS_* */
  const attnbench_role_dtype* dtypes;
  int32_t dtype_count;
  /* Head dimensions (d_k and d_v): the listed ones when head_dim_count > 0, else every value in
   * [min_head_dim, max_head_dim]. */
  int32_t min_head_dim, max_head_dim;
  int32_t head_dim_count;
  const int32_t* head_dims;
  int32_t device_type; /* ATTNBENCH_DL_CPU or ATTNBENCH_DL_CUDA: where run's tensors live */
  /* Its accumulators' precision when coarser than the working precision's (f32 for f16/bf16/f32
   * data, f64 for f64), as significand bits with the implicit one: 11 (an f16 accumulator) or 8
   * (bf16); 0: the working precision's. The pass rule scales by the coarser of this and
   * matmul_unit_roundoff. (This field was `reserved`, always 0, before: same layout.) */
  int32_t accumulation_bits;
  /* The unit roundoff its matrix products round to when coarser than the dtype's (2^-11 for
   * TF32); 0: the dtype's own. The pass rule and the properties' tolerances scale by it. */
  double matmul_unit_roundoff;
} attnbench_plugin_caps;

typedef struct attnbench_plugin_v2 {
  uint32_t abi_version; /* ATTNBENCH_ABI_VERSION */
  uint32_t struct_size; /* sizeof(attnbench_plugin_v2) */
  const char* name;     /* short identifier, [A-Za-z0-9_.-], at most 64, e.g. "c_cpu_reference" */
  const char* version;  /* the plugin's own version, free text */
  const char* description; /* one line: the algorithm and its precision */
  attnbench_plugin_caps capabilities;
  /* Optional (may be NULL): finer support than the capabilities say. Returns nonzero when the
   * call is supported; else writes why (NUL-terminated, at most why_len bytes) and returns 0. */
  int (*supports)(const attnbench_call* call, char* why, size_t why_len);
  /* One call of call->operation. Returns 0 on success; else nonzero with a NUL-terminated
   * message of at most error_len bytes in error, and that case fails with it. A CUDA plugin
   * enqueues on call->cuda_stream and may return before the work ends. */
  int (*run)(const attnbench_call* call, char* error, size_t error_len);
  void* context; /* handed back as call->context; may be NULL */
} attnbench_plugin_v2;

#ifndef ATTNBENCH_PLUGIN_EXPORT
#if defined(_WIN32)
#define ATTNBENCH_PLUGIN_EXPORT __declspec(dllexport)
#else
#define ATTNBENCH_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif
#endif
/* The entry point a plugin exports, declared so that a plugin's definition is checked. A program
 * that includes the headers of two versions (attnbench itself) defines
 * ATTNBENCH_NO_ENTRY_POINT_DECLARATION: each version declares another return type. */
#ifndef ATTNBENCH_NO_ENTRY_POINT_DECLARATION
ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v2* attnbench_plugin_get(uint32_t abi_version);
#endif

/* Optional: the score modifications the plugin computes, by name, space-separated, as attnbench
 * list and core/README.md "The score pipeline" name them; the plugin defines and exports it:
 *     ATTNBENCH_PLUGIN_EXPORT const char attnbench_score_modifications[] = "softcap sink";
 * The same as the feature bits for the three that have one (SOFTCAP, SINK, DROPOUT: either declares
 * it, both may), and the only way to declare a modification added later, which has no bit. A name
 * attnbench does not know refuses the plugin at load, naming it. Read a modification's settings
 * with attnbench_call_setting. A symbol of its own rather than a field of attnbench_plugin_v2, so
 * that no plugin's initializer of that struct changes. (The declaration gives it C linkage and,
 * in C++, external linkage, which a const object would otherwise lack.) */
#define ATTNBENCH_SCORE_MODIFICATIONS_SYMBOL "attnbench_score_modifications"
#ifndef ATTNBENCH_NO_ENTRY_POINT_DECLARATION
extern ATTNBENCH_PLUGIN_EXPORT const char attnbench_score_modifications[];
#endif

#ifdef __cplusplus
}
#endif

#endif /* ATTNBENCH_PLUGIN_V2_H */

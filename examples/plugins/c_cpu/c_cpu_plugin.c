/* A correct attention plugin for attnbench in plain C11, on ABI version 2: the textbook algorithm
 * (scores, row maximum subtracted, exponentials, normalised, times V), every row in 80-bit long
 * double and rounded once to the output type. It implements the forward pass with everything
 * attnbench asks of it today: f64, f32, f16 and bf16; any strides (so BHSD and BSHD); any window
 * (causal top-left and bottom-right among them), key padding per batch and per query, a boolean
 * mask and an additive bias (ALiBi arrives as one), in any combination; soft-capping of the scaled
 * scores; attention sinks (a per-head logit in each row's denominator); dropout on its own
 * counter-based random stream, with the keep mask reported; GQA/MQA; d_k != d_v; the row
 * log-sum-exp; fully masked rows written as zeros with an LSE of -inf.
 * Single-threaded and O(n_k) scratch per row: a yardstick, not a fast kernel.
 *
 * Build: cc -std=c11 -O2 -shared -fPIC -I impls/plugin examples/plugins/c_cpu/c_cpu_plugin.c -lm -o c_cpu_plugin.so
 * Check: attnbench validate --plugin ./c_cpu_plugin.so */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnbench_plugin.h"

/* --- element access through strides, in every dtype ---------------------------------------- */

static double f16_to_double(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * ldexp((double)mantissa, -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * ldexp((double)(mantissa + 1024), exponent - 25);
}

static double bf16_to_double(uint16_t b) {
  const uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return (double)f;
}

/* Rounds once, to nearest with ties to even (nearbyint in the default rounding mode), to a
 * binary format with `significand` bits (implicit one included) and exponents down to
 * min_exponent, overflowing to infinity above max_exponent. */
static uint16_t round_to_half(double x, int significand, int min_exponent, int max_exponent, int exponent_bits) {
  const int fraction_bits = significand - 1;
  const uint16_t sign = signbit(x) ? (uint16_t)0x8000 : 0;
  const uint16_t inf = (uint16_t)(((1u << exponent_bits) - 1u) << fraction_bits);
  if (isnan(x)) return (uint16_t)(inf | (1u << (fraction_bits - 1)));
  const double a = fabs(x);
  if (a < ldexp(1.0, min_exponent)) /* subnormal (or zero): whole units of the smallest step */
    return (uint16_t)(sign | (uint16_t)nearbyint(ldexp(a, fraction_bits - min_exponent)));
  int e;
  frexp(a, &e); /* a = m * 2^e with m in [0.5, 1): the leading bit is worth 2^(e-1) */
  double q = nearbyint(ldexp(a, significand - e));
  int exponent = e - 1;
  if (q == ldexp(1.0, significand)) { q /= 2; exponent += 1; }
  if (exponent > max_exponent) return (uint16_t)(sign | inf);
  const int bias = max_exponent;
  return (uint16_t)(sign | (uint16_t)((exponent + bias) << fraction_bits) | (uint16_t)((uint32_t)q - (1u << fraction_bits)));
}

/* Up to 4 indices; a tensor of fewer dimensions (the 3-D LSE) ignores the ones past its ndim. */
static int64_t offset_of(const attnbench_dl_tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const int64_t index[4] = {i0, i1, i2, i3};
  int64_t at = 0;
  for (int32_t d = 0; d < t->ndim && d < 4; ++d) at += index[d] * t->strides[d];
  return at;
}

/* The element kinds this plugin reads and writes, from DLPack's (code, bits). */
enum { ELEM_F64, ELEM_F32, ELEM_F16, ELEM_BF16, ELEM_BOOL, ELEM_OTHER };
static int element_kind(attnbench_dl_datatype d) {
  if (d.code == ATTNBENCH_DL_FLOAT) return d.bits == 64 ? ELEM_F64 : d.bits == 32 ? ELEM_F32 : d.bits == 16 ? ELEM_F16 : ELEM_OTHER;
  if (d.code == ATTNBENCH_DL_BFLOAT && d.bits == 16) return ELEM_BF16;
  if (d.code == ATTNBENCH_DL_BOOL && d.bits == 8) return ELEM_BOOL;
  return ELEM_OTHER;
}

static double load(const attnbench_dl_tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const int64_t at = offset_of(t, i0, i1, i2, i3);
  switch (element_kind(t->dtype)) {
    case ELEM_F64: return ((const double*)t->data)[at];
    case ELEM_F32: return (double)((const float*)t->data)[at];
    case ELEM_F16: return f16_to_double(((const uint16_t*)t->data)[at]);
    case ELEM_BF16: return bf16_to_double(((const uint16_t*)t->data)[at]);
    case ELEM_BOOL: return (double)((const uint8_t*)t->data)[at];
    default: return NAN;
  }
}

static void store(const attnbench_dl_tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, long double value) {
  const int64_t at = offset_of(t, i0, i1, i2, i3);
  switch (element_kind(t->dtype)) {
    case ELEM_F64: ((double*)t->data)[at] = (double)value; break;
    case ELEM_F32: ((float*)t->data)[at] = (float)value; break;
    case ELEM_F16: ((uint16_t*)t->data)[at] = round_to_half((double)value, 11, -14, 15, 5); break;
    case ELEM_BF16: ((uint16_t*)t->data)[at] = round_to_half((double)value, 8, -126, 127, 8); break;
    default: break;
  }
}

/* --- one output row ---------------------------------------------------------------------------- */

typedef struct {
  const attnbench_call* p;
  const attnbench_dl_tensor *q, *k, *v, *out, *lse, *mask, *bias, *sink, *keep;
  long double* scores; /* n_k entries */
  unsigned char* visible; /* n_k entries */
} row_context;

/* Keys outside [first, limit) are hidden by the window or the padding (the boolean mask may hide
 * more). */
static void key_range(const attnbench_call* p, int64_t b, int64_t i, int64_t* first, int64_t* limit) {
  const int64_t diagonal = i + (p->window.align == ATTNBENCH_ALIGN_BOTTOM_RIGHT ? p->n_k - p->n_q : 0);
  int64_t lo = 0, hi = p->n_k;
  if (p->window.left >= 0 && diagonal - p->window.left > lo) lo = diagonal - p->window.left;
  if (p->window.right >= 0 && diagonal + p->window.right + 1 < hi) hi = diagonal + p->window.right + 1;
  if (p->key_padding == ATTNBENCH_KEY_PADDING_PER_BATCH && p->valid_len[b] < hi) hi = p->valid_len[b];
  if (p->key_padding == ATTNBENCH_KEY_PADDING_PER_QUERY && p->valid_len[b * p->n_q + i] < hi) hi = p->valid_len[b * p->n_q + i];
  *first = lo;
  *limit = hi < lo ? lo : hi;
}

/* Dropout's random stream: a counter-based hash of the seed and the weight's flat index
 * ((b h_q + h) n_q + i) n_k + j, so each draw is independent of the order rows are computed in
 * (as Philox gives GPU kernels); the weight is kept iff its uniform in [0, 1) is >= p. The mix is
 * MurmurHash3's 64-bit finaliser, applied to the seed and then to the index folded in. */
static uint64_t fmix64(uint64_t z) {
  z ^= z >> 33;
  z *= 0xff51afd7ed558ccdULL;
  z ^= z >> 33;
  z *= 0xc4ceb9fe1a85ec53ULL;
  return z ^ (z >> 33);
}

static int dropout_keeps(uint64_t seed, double p, uint64_t index) {
  const uint64_t bits = fmix64(fmix64(seed ^ 0x5851f42d4c957f2dULL) + index * 0x9e3779b97f4a7c15ULL);
  return (double)(bits >> 11) * 0x1p-53 >= p;
}

static void attend_row(const row_context* c, int64_t b, int64_t h, int64_t i) {
  const attnbench_call* p = c->p;
  const int64_t g = h / (p->h_q / p->h_kv); /* the kv head this query head reads */
  int64_t first, limit;
  key_range(p, b, i, &first, &limit);
  /* Dropout: this row's keep mask, every key's draw (a masked key's entry does not matter). */
  if (c->keep != NULL) {
    const uint64_t row = (uint64_t)(((b * p->h_q + h) * p->n_q + i) * p->n_k);
    for (int64_t j = 0; j < p->n_k; ++j)
      ((uint8_t*)c->keep->data)[offset_of(c->keep, b, h, i, j)] = (uint8_t)dropout_keeps(p->dropout_seed, p->dropout_p, row + (uint64_t)j);
  }
  long double max = -INFINITY;
  int any = 0;
  for (int64_t j = first; j < limit; ++j) {
    c->visible[j] = c->mask == NULL || load(c->mask, b, h, i, j) != 0.0;
    if (!c->visible[j]) continue;
    long double dot = 0;
    for (int64_t x = 0; x < p->d_k; ++x) dot += (long double)load(c->q, b, h, i, x) * (long double)load(c->k, b, g, j, x);
    long double s = dot * (long double)p->scale;
    if (p->softcap > 0) s = (long double)p->softcap * tanhl(s / (long double)p->softcap);
    if (c->bias != NULL) s += (long double)load(c->bias, b, h, i, j);
    c->scores[j] = s;
    if (!any || s > max) max = s;
    any = 1;
  }
  if (!any) { /* fully masked: zeros, LSE -inf (the policy this plugin declares), sink or not */
    for (int64_t x = 0; x < p->d_v; ++x) store(c->out, b, h, i, x, 0.0L);
    if (c->lse != NULL) store(c->lse, b, h, i, 0, -INFINITY);
    return;
  }
  /* An attention sink: head h's logit joins the max and the denominator, and carries no value. */
  const long double sink =
      c->sink != NULL ? (long double)((const float*)((const char*)c->sink->data + c->sink->byte_offset))[h * c->sink->strides[0]] : 0.0L;
  if (c->sink != NULL && sink > max) max = sink;
  long double sum = c->sink != NULL ? expl(sink - max) : 0.0L;
  for (int64_t j = first; j < limit; ++j)
    if (c->visible[j]) sum += (c->scores[j] = expl(c->scores[j] - max));
  /* Dropout drops the weights the keep mask says and rescales the rest by 1 / (1 - p); the
   * denominator (and so the LSE) is the softmax's, before dropout. */
  const long double rescale = c->keep != NULL ? 1.0L / (1.0L - (long double)p->dropout_p) : 1.0L;
  for (int64_t x = 0; x < p->d_v; ++x) {
    long double acc = 0;
    for (int64_t j = first; j < limit; ++j)
      if (c->visible[j] && (c->keep == NULL || ((const uint8_t*)c->keep->data)[offset_of(c->keep, b, h, i, j)]))
        acc += c->scores[j] * (long double)load(c->v, b, g, j, x);
    store(c->out, b, h, i, x, acc / sum * rescale);
  }
  if (c->lse != NULL) store(c->lse, b, h, i, 0, max + logl(sum));
}

/* --- the ABI ------------------------------------------------------------------------------------ */

static int c_cpu_run(const attnbench_call* p, char* error, size_t error_len) {
  if (p->operation != ATTNBENCH_OP_FORWARD) {
    snprintf(error, error_len, "operation %d: only the forward pass is implemented", (int)p->operation);
    return 1;
  }
  if (p->h_kv <= 0 || p->h_q % p->h_kv != 0) {
    snprintf(error, error_len, "h_q=%lld is not a multiple of h_kv=%lld", (long long)p->h_q, (long long)p->h_kv);
    return 1;
  }
  row_context c = {p,
                   attnbench_call_tensor(p, ATTNBENCH_ROLE_Q),
                   attnbench_call_tensor(p, ATTNBENCH_ROLE_K),
                   attnbench_call_tensor(p, ATTNBENCH_ROLE_V),
                   attnbench_call_tensor(p, ATTNBENCH_ROLE_O),
                   attnbench_call_tensor(p, ATTNBENCH_ROLE_LSE),
                   attnbench_call_tensor(p, ATTNBENCH_ROLE_MASK),
                   attnbench_call_tensor(p, ATTNBENCH_ROLE_BIAS),
                   attnbench_call_tensor(p, ATTNBENCH_ROLE_SINK),
                   p->dropout_p > 0 ? attnbench_call_tensor(p, ATTNBENCH_ROLE_KEEP) : NULL,
                   NULL,
                   NULL};
  if (p->dropout_p > 0 && (c.keep == NULL || element_kind(c.keep->dtype) != ELEM_BOOL)) {
    snprintf(error, error_len, "dropout_p=%g without a BOOL 8-bit KEEP tensor to report the keep mask in", p->dropout_p);
    return 1;
  }
  c.scores = malloc(sizeof(long double) * (size_t)(p->n_k > 0 ? p->n_k : 1));
  c.visible = malloc((size_t)(p->n_k > 0 ? p->n_k : 1));
  if (c.scores == NULL || c.visible == NULL) {
    free(c.scores);
    free(c.visible);
    snprintf(error, error_len, "out of memory for %lld scores", (long long)p->n_k);
    return 2;
  }
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->h_q; ++h)
      for (int64_t i = 0; i < p->n_q; ++i) attend_row(&c, b, h, i);
  free(c.scores);
  free(c.visible);
  return 0;
}

/* Every data role (q k v o bias) in any of the four types; the LSE is attnbench's choice. Each
 * tensor is read and written in its own type (load, store), so the output, the keys and the values
 * may also each be in a type of their own: mixed-precision cases (f16 inputs, an f32 output). */
#define C_CPU_EVERY_TYPE(role)                                                                    \
  {role, {ATTNBENCH_DL_FLOAT, 64, 1}}, {role, {ATTNBENCH_DL_FLOAT, 32, 1}}, {role, {ATTNBENCH_DL_FLOAT, 16, 1}}, \
      {role, {ATTNBENCH_DL_BFLOAT, 16, 1}}
static const attnbench_role_dtype c_cpu_dtypes[] = {
    C_CPU_EVERY_TYPE(ATTNBENCH_ROLE_DATA),
    C_CPU_EVERY_TYPE(ATTNBENCH_ROLE_O),
    C_CPU_EVERY_TYPE(ATTNBENCH_ROLE_K),
    C_CPU_EVERY_TYPE(ATTNBENCH_ROLE_V),
};

static const attnbench_plugin_v2 c_cpu_plugin = {
    ATTNBENCH_ABI_VERSION,
    sizeof(attnbench_plugin_v2),
    "c_cpu_reference",
    "2.0",
    "textbook softmax(QK^T*scale+mask)V in C11, long double accumulation, rounded once",
    {
        ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD),
        ATTNBENCH_FEATURE_CAUSAL_TOP_LEFT | ATTNBENCH_FEATURE_CAUSAL_BOTTOM_RIGHT |
            ATTNBENCH_FEATURE_PADDING_PER_BATCH | ATTNBENCH_FEATURE_PADDING_PER_QUERY | ATTNBENCH_FEATURE_BOOL_MASK |
            ATTNBENCH_FEATURE_BIAS | ATTNBENCH_FEATURE_GQA | ATTNBENCH_FEATURE_DIFFERENT_DK_DV | ATTNBENCH_FEATURE_LSE |
            ATTNBENCH_FEATURE_DETERMINISTIC | ATTNBENCH_FEATURE_SLIDING_WINDOW | ATTNBENCH_FEATURE_SOFTCAP |
            ATTNBENCH_FEATURE_SINK | ATTNBENCH_FEATURE_DROPOUT,
        ATTNBENCH_ACCEPTS_BHSD | ATTNBENCH_ACCEPTS_BSHD | ATTNBENCH_ACCEPTS_STRIDED,
        ATTNBENCH_FULLY_MASKED_AS_ZEROS,
        c_cpu_dtypes,
        (int32_t)(sizeof c_cpu_dtypes / sizeof c_cpu_dtypes[0]),
        1, 4096, 0, NULL, /* any head dim from 1 to 4096 */
        ATTNBENCH_DL_CPU,
        0,
        0.0, /* its products round as the dtype's own arithmetic */
    },
    NULL, /* no supports(): the capabilities say it all */
    c_cpu_run,
    NULL,
};

/* The score modifications by name (the same as the feature bits above for these three): a
 * modification added to attnbench later is declared here, "softcap sink dropout NAME", and its
 * settings read with attnbench_call_setting(call, "SETTING"). */
ATTNBENCH_PLUGIN_EXPORT const char attnbench_score_modifications[] = "softcap sink dropout";

ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v2* attnbench_plugin_get(uint32_t abi_version) {
  return abi_version == ATTNBENCH_ABI_VERSION ? &c_cpu_plugin : NULL;
}

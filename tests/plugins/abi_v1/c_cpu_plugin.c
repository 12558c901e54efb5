/* A correct attention plugin for attnbench in plain C11: the textbook algorithm (scores, row
 * maximum subtracted, exponentials, normalised, times V), every row in 80-bit long double and
 * rounded once to the output type. It implements everything the ABI carries: f64, f32, f16 and
 * bf16; any strides (so BHSD and BSHD); causal top-left and bottom-right, key padding per batch
 * and per query, a boolean mask and an additive bias, in any combination; GQA/MQA; d_k != d_v;
 * the row log-sum-exp; fully masked rows written as zeros with an LSE of -inf.
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

static int64_t offset_of(const attnbench_tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2] + i3 * t->strides[3];
}

static double load(const attnbench_tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const int64_t at = offset_of(t, i0, i1, i2, i3);
  switch (t->dtype) {
    case ATTNBENCH_DTYPE_F64: return ((const double*)t->data)[at];
    case ATTNBENCH_DTYPE_F32: return (double)((const float*)t->data)[at];
    case ATTNBENCH_DTYPE_F16: return f16_to_double(((const uint16_t*)t->data)[at]);
    case ATTNBENCH_DTYPE_BF16: return bf16_to_double(((const uint16_t*)t->data)[at]);
    case ATTNBENCH_DTYPE_BOOL: return (double)((const uint8_t*)t->data)[at];
    default: return NAN;
  }
}

static void store(const attnbench_tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, long double value) {
  const int64_t at = offset_of(t, i0, i1, i2, i3);
  switch (t->dtype) {
    case ATTNBENCH_DTYPE_F64: ((double*)t->data)[at] = (double)value; break;
    case ATTNBENCH_DTYPE_F32: ((float*)t->data)[at] = (float)value; break;
    case ATTNBENCH_DTYPE_F16: ((uint16_t*)t->data)[at] = round_to_half((double)value, 11, -14, 15, 5); break;
    case ATTNBENCH_DTYPE_BF16: ((uint16_t*)t->data)[at] = round_to_half((double)value, 8, -126, 127, 8); break;
    default: break;
  }
}

/* --- one output row ---------------------------------------------------------------------------- */

typedef struct {
  const attnbench_problem* p;
  const attnbench_tensor *q, *k, *v, *out, *lse, *mask, *bias;
  long double* scores; /* n_k entries */
  unsigned char* visible; /* n_k entries */
} row_context;

/* Keys j >= the limit are hidden by causality or padding (the boolean mask may hide more). */
static int64_t key_limit(const attnbench_problem* p, int64_t b, int64_t i) {
  int64_t limit = p->n_k;
  if (p->causal == ATTNBENCH_CAUSAL_TOP_LEFT && i + 1 < limit) limit = i + 1;
  if (p->causal == ATTNBENCH_CAUSAL_BOTTOM_RIGHT && i + 1 + p->n_k - p->n_q < limit) limit = i + 1 + p->n_k - p->n_q;
  if (p->padding == ATTNBENCH_PADDING_PER_BATCH && p->valid_len[b] < limit) limit = p->valid_len[b];
  if (p->padding == ATTNBENCH_PADDING_PER_QUERY && p->valid_len[b * p->n_q + i] < limit) limit = p->valid_len[b * p->n_q + i];
  return limit < 0 ? 0 : limit;
}

static void attend_row(const row_context* c, int64_t b, int64_t h, int64_t i) {
  const attnbench_problem* p = c->p;
  const int64_t g = h / (p->h_q / p->h_kv); /* the kv head this query head reads */
  const int64_t limit = key_limit(p, b, i);
  long double max = -INFINITY;
  int any = 0;
  for (int64_t j = 0; j < limit; ++j) {
    c->visible[j] = c->mask == NULL || load(c->mask, b, h, i, j) != 0.0;
    if (!c->visible[j]) continue;
    long double dot = 0;
    for (int64_t x = 0; x < p->d_k; ++x) dot += (long double)load(c->q, b, h, i, x) * (long double)load(c->k, b, g, j, x);
    long double s = dot * (long double)p->scale;
    if (c->bias != NULL) s += (long double)load(c->bias, b, h, i, j);
    c->scores[j] = s;
    if (!any || s > max) max = s;
    any = 1;
  }
  if (!any) { /* fully masked: zeros, LSE -inf (the policy this plugin declares) */
    for (int64_t x = 0; x < p->d_v; ++x) store(c->out, b, h, i, x, 0.0L);
    if (c->lse != NULL) store(c->lse, b, h, i, 0, -INFINITY);
    return;
  }
  long double sum = 0;
  for (int64_t j = 0; j < limit; ++j)
    if (c->visible[j]) sum += (c->scores[j] = expl(c->scores[j] - max));
  for (int64_t x = 0; x < p->d_v; ++x) {
    long double acc = 0;
    for (int64_t j = 0; j < limit; ++j)
      if (c->visible[j]) acc += c->scores[j] * (long double)load(c->v, b, g, j, x);
    store(c->out, b, h, i, x, acc / sum);
  }
  if (c->lse != NULL) store(c->lse, b, h, i, 0, max + logl(sum));
}

/* --- the ABI ------------------------------------------------------------------------------------ */

static int c_cpu_run(const attnbench_problem* p, const attnbench_tensor* q, const attnbench_tensor* k, const attnbench_tensor* v,
                     const attnbench_tensor* out, const attnbench_tensor* lse, const attnbench_tensor* mask,
                     const attnbench_tensor* bias, char* error, size_t error_len) {
  if (p->h_kv <= 0 || p->h_q % p->h_kv != 0) {
    snprintf(error, error_len, "h_q=%lld is not a multiple of h_kv=%lld", (long long)p->h_q, (long long)p->h_kv);
    return 1;
  }
  row_context c = {p, q, k, v, out, lse, mask, bias, NULL, NULL};
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

static const attnbench_plugin_v1 c_cpu_plugin = {
    ATTNBENCH_PLUGIN_ABI_VERSION,
    "c_cpu_reference",
    "1.0",
    "textbook softmax(QK^T*scale+mask)V in C11, long double accumulation, rounded once",
    {
        ATTNBENCH_DTYPE_BIT(ATTNBENCH_DTYPE_F64) | ATTNBENCH_DTYPE_BIT(ATTNBENCH_DTYPE_F32) | ATTNBENCH_DTYPE_BIT(ATTNBENCH_DTYPE_F16) |
            ATTNBENCH_DTYPE_BIT(ATTNBENCH_DTYPE_BF16),
        ATTNBENCH_LAYOUT_BHSD | ATTNBENCH_LAYOUT_BSHD | ATTNBENCH_LAYOUT_STRIDED,
        ATTNBENCH_MASK_CAUSAL_TOP_LEFT | ATTNBENCH_MASK_CAUSAL_BOTTOM_RIGHT | ATTNBENCH_MASK_PADDING_PER_BATCH |
            ATTNBENCH_MASK_PADDING_PER_QUERY | ATTNBENCH_MASK_BOOL | ATTNBENCH_MASK_BIAS,
        ATTNBENCH_FULLY_MASKED_ZEROS,
        1, 4096, NULL, 0, /* any head dim from 1 to 4096 */
        1,                /* d_k != d_v */
        1,                /* GQA */
        1,                /* returns LSE */
        1,                /* deterministic */
        ATTNBENCH_DEVICE_HOST,
    },
    NULL, /* no supports(): the capabilities say it all */
    c_cpu_run,
};

ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v1* attnbench_plugin_get(uint32_t abi_version) {
  return abi_version == ATTNBENCH_PLUGIN_ABI_VERSION ? &c_cpu_plugin : NULL;
}

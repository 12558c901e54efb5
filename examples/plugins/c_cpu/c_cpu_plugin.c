/* A correct attention plugin for attnbench in plain C11, on ABI version 2: the textbook algorithm
 * (scores, row maximum subtracted, exponentials, normalised, times V), every row in 80-bit long
 * double and rounded once to the output type. It implements the forward pass with everything
 * attnbench asks of it today: f64, f32, f16 and bf16; any strides (so BHSD and BSHD); any window
 * (causal top-left and bottom-right among them), key padding per batch and per query, a boolean
 * mask and an additive bias (ALiBi arrives as one), in any combination; soft-capping of the scaled
 * scores; attention sinks (a per-head logit in each row's denominator); dropout on its own
 * counter-based random stream, with the keep mask reported; GQA/MQA; d_k != d_v; the row
 * log-sum-exp; fully masked rows written as zeros with an LSE of -inf. And the backward pass
 * (dQ, dK, dV from Q, K, V and dO) under all of the same, its weights recomputed row by row and
 * dropout's keep mask redrawn from the same seed.
 * Single-threaded, O(n_k) scratch per row (the backward: one kv head's K, V, dK and dV too): a
 * yardstick, not a fast kernel.
 *
 * Build: cc -std=c11 -O2 -shared -fPIC -I impls/plugin examples/plugins/c_cpu/c_cpu_plugin.c -lm -o c_cpu_plugin.so
 * Check: attnbench validate --plugin ./c_cpu_plugin.so (the backward: --backward) */
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

/* --- one row of weights, shared by both passes ------------------------------------------------ */

typedef struct {
  const attnbench_call* p;
  const attnbench_dl_tensor *q, *k, *v, *mask, *bias, *sink;
  const attnbench_dl_tensor *out, *lse, *keep;    /* the forward's outputs */
  const attnbench_dl_tensor *d_o, *dq, *dk, *dv;  /* the backward's dO, and its outputs */
  long double* qi;        /* d_k entries: the row's query, widened */
  long double* x;         /* n_k: the scaled products q.k * scale, before soft-capping */
  long double* scores;    /* n_k: the scores, then their exponentials */
  unsigned char* visible; /* n_k */
  /* The backward's: one kv head's K and V widened, dK and dV summed over its query heads, the
   * row's dO, dP and dQ. */
  long double *k_head, *v_head, *dk_sum, *dv_sum, *doi, *dp, *dq_row;
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

/* Whether dropout keeps weight (i, j) of head h, from the seed alone: the forward's draw, which the
 * backward redraws (no keep mask is handed to it). Always, without dropout. */
static int kept(const attnbench_call* p, int64_t b, int64_t h, int64_t i, int64_t j) {
  return p->dropout_p <= 0 || dropout_keeps(p->dropout_seed, p->dropout_p, (uint64_t)(((b * p->h_q + h) * p->n_q + i) * p->n_k + j));
}

/* Key j of kv head g: from the widened head where the backward made one, else read in place. */
static long double key_element(const row_context* c, int64_t b, int64_t g, int64_t j, int64_t x) {
  return c->k_head != NULL ? c->k_head[j * c->p->d_k + x] : (long double)load(c->k, b, g, j, x);
}

/* Row i of query head h over the keys in [first, limit): each visible key's scaled product (x)
 * and exp(score - max) (scores), their sum with the sink's term in *sum, the max in *max. Returns
 * 0 when the row sees no key (fully masked). The forward and the backward compute the same row. */
static int row_weights(const row_context* c, int64_t b, int64_t h, int64_t i, int64_t first, int64_t limit, long double* max,
                       long double* sum) {
  const attnbench_call* p = c->p;
  const int64_t g = h / (p->h_q / p->h_kv); /* the kv head this query head reads */
  for (int64_t x = 0; x < p->d_k; ++x) c->qi[x] = (long double)load(c->q, b, h, i, x);
  int any = 0;
  *max = -INFINITY;
  for (int64_t j = first; j < limit; ++j) {
    c->visible[j] = c->mask == NULL || load(c->mask, b, h, i, j) != 0.0;
    if (!c->visible[j]) continue;
    long double dot = 0;
    for (int64_t x = 0; x < p->d_k; ++x) dot += c->qi[x] * key_element(c, b, g, j, x);
    long double s = c->x[j] = dot * (long double)p->scale;
    if (p->softcap > 0) s = (long double)p->softcap * tanhl(s / (long double)p->softcap);
    if (c->bias != NULL) s += (long double)load(c->bias, b, h, i, j);
    c->scores[j] = s;
    if (!any || s > *max) *max = s;
    any = 1;
  }
  if (!any) return 0;
  /* An attention sink: head h's logit joins the max and the denominator, and carries no value. */
  const long double sink =
      c->sink != NULL ? (long double)((const float*)((const char*)c->sink->data + c->sink->byte_offset))[h * c->sink->strides[0]] : 0.0L;
  if (c->sink != NULL && sink > *max) *max = sink;
  *sum = c->sink != NULL ? expl(sink - *max) : 0.0L;
  for (int64_t j = first; j < limit; ++j)
    if (c->visible[j]) *sum += (c->scores[j] = expl(c->scores[j] - *max));
  return 1;
}

/* --- the forward pass --------------------------------------------------------------------------- */

static void attend_row(const row_context* c, int64_t b, int64_t h, int64_t i) {
  const attnbench_call* p = c->p;
  const int64_t g = h / (p->h_q / p->h_kv);
  int64_t first, limit;
  key_range(p, b, i, &first, &limit);
  /* Dropout: this row's keep mask, every key's draw (a masked key's entry does not matter). */
  if (c->keep != NULL)
    for (int64_t j = 0; j < p->n_k; ++j) ((uint8_t*)c->keep->data)[offset_of(c->keep, b, h, i, j)] = (uint8_t)kept(p, b, h, i, j);
  long double max, sum;
  if (!row_weights(c, b, h, i, first, limit, &max, &sum)) { /* zeros, LSE -inf (the policy this plugin declares), sink or not */
    for (int64_t x = 0; x < p->d_v; ++x) store(c->out, b, h, i, x, 0.0L);
    if (c->lse != NULL) store(c->lse, b, h, i, 0, -INFINITY);
    return;
  }
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

/* --- the backward pass -------------------------------------------------------------------------- */

/* Row i of query head h: its weights recomputed from Q and K (the forward's O and LSE
 * are handed over too, but a recomputation in long double is more exact than either), then with
 * P the softmax's weights, Z the keep mask and r = 1 / (1 - p):
 *   dP_j = Z_j r <dO_i, v_j>,  D = sum_j P_j dP_j,  dS_j = P_j (dP_j - D),
 *   dX_j = dS_j * sech^2(x_j / softcap) (1 without soft-capping),
 *   dQ_i = scale sum_j dX_j k_j,  dK_j += scale dX_j q_i,  dV_j += P_j Z_j r dO_i,
 * dK and dV summed over every query head of the group. A fully masked row has dQ_i = 0 and adds
 * nothing; a masked key gets nothing from this row. */
static void backward_row(const row_context* c, int64_t b, int64_t h, int64_t i) {
  const attnbench_call* p = c->p;
  int64_t first, limit;
  key_range(p, b, i, &first, &limit);
  for (int64_t x = 0; x < p->d_k; ++x) c->dq_row[x] = 0;
  long double max, sum;
  if (row_weights(c, b, h, i, first, limit, &max, &sum)) {
    const long double rescale = p->dropout_p > 0 ? 1.0L / (1.0L - (long double)p->dropout_p) : 1.0L;
    const long double scale = (long double)p->scale;
    for (int64_t x = 0; x < p->d_v; ++x) c->doi[x] = (long double)load(c->d_o, b, h, i, x);
    long double d = 0;
    for (int64_t j = first; j < limit; ++j) {
      if (!c->visible[j]) continue;
      c->scores[j] /= sum; /* P_j */
      c->dp[j] = 0;
      if (!kept(p, b, h, i, j)) continue;
      const long double* vj = c->v_head + j * p->d_v;
      for (int64_t x = 0; x < p->d_v; ++x) c->dp[j] += c->doi[x] * vj[x];
      c->dp[j] *= rescale;
      d += c->scores[j] * c->dp[j];
      const long double weight = c->scores[j] * rescale;
      for (int64_t x = 0; x < p->d_v; ++x) c->dv_sum[j * p->d_v + x] += weight * c->doi[x];
    }
    for (int64_t j = first; j < limit; ++j) {
      if (!c->visible[j]) continue;
      long double slope = 1.0L;
      if (p->softcap > 0) {
        const long double t = tanhl(c->x[j] / (long double)p->softcap);
        slope = 1.0L - t * t;
      }
      const long double dx = c->scores[j] * (c->dp[j] - d) * slope * scale;
      const long double* kj = c->k_head + j * p->d_k;
      for (int64_t x = 0; x < p->d_k; ++x) {
        c->dq_row[x] += dx * kj[x];
        c->dk_sum[j * p->d_k + x] += dx * c->qi[x];
      }
    }
  }
  for (int64_t x = 0; x < p->d_k; ++x) store(c->dq, b, h, i, x, c->dq_row[x]);
}

/* Every query head of kv head g, then its dK and dV, each element written (a key no query sees
 * gets zeros). */
static void backward_group(row_context* c, int64_t b, int64_t g) {
  const attnbench_call* p = c->p;
  const int64_t group = p->h_q / p->h_kv;
  for (int64_t j = 0; j < p->n_k; ++j) {
    for (int64_t x = 0; x < p->d_k; ++x) c->k_head[j * p->d_k + x] = (long double)load(c->k, b, g, j, x);
    for (int64_t x = 0; x < p->d_v; ++x) c->v_head[j * p->d_v + x] = (long double)load(c->v, b, g, j, x);
  }
  memset(c->dk_sum, 0, sizeof(long double) * (size_t)(p->n_k * p->d_k));
  memset(c->dv_sum, 0, sizeof(long double) * (size_t)(p->n_k * p->d_v));
  for (int64_t h = g * group; h < (g + 1) * group; ++h)
    for (int64_t i = 0; i < p->n_q; ++i) backward_row(c, b, h, i);
  for (int64_t j = 0; j < p->n_k; ++j) {
    for (int64_t x = 0; x < p->d_k; ++x) store(c->dk, b, g, j, x, c->dk_sum[j * p->d_k + x]);
    for (int64_t x = 0; x < p->d_v; ++x) store(c->dv, b, g, j, x, c->dv_sum[j * p->d_v + x]);
  }
}

/* --- the ABI ------------------------------------------------------------------------------------ */

/* n long doubles (at least one), or NULL. */
static long double* scratch(int64_t n) { return malloc(sizeof(long double) * (size_t)(n > 0 ? n : 1)); }

static int c_cpu_run(const attnbench_call* p, char* error, size_t error_len) {
  const int backward = p->operation == ATTNBENCH_OP_BACKWARD;
  if (p->operation != ATTNBENCH_OP_FORWARD && !backward) {
    snprintf(error, error_len, "operation %d: only the forward and the backward pass are implemented", (int)p->operation);
    return 1;
  }
  if (p->h_kv <= 0 || p->h_q % p->h_kv != 0) {
    snprintf(error, error_len, "h_q=%lld is not a multiple of h_kv=%lld", (long long)p->h_q, (long long)p->h_kv);
    return 1;
  }
  row_context c = {0};
  c.p = p;
  c.q = attnbench_call_tensor(p, ATTNBENCH_ROLE_Q);
  c.k = attnbench_call_tensor(p, ATTNBENCH_ROLE_K);
  c.v = attnbench_call_tensor(p, ATTNBENCH_ROLE_V);
  c.mask = attnbench_call_tensor(p, ATTNBENCH_ROLE_MASK);
  c.bias = attnbench_call_tensor(p, ATTNBENCH_ROLE_BIAS);
  c.sink = attnbench_call_tensor(p, ATTNBENCH_ROLE_SINK);
  if (backward) {
    c.d_o = attnbench_call_tensor(p, ATTNBENCH_ROLE_D_O);
    c.dq = attnbench_call_tensor(p, ATTNBENCH_ROLE_DQ);
    c.dk = attnbench_call_tensor(p, ATTNBENCH_ROLE_DK);
    c.dv = attnbench_call_tensor(p, ATTNBENCH_ROLE_DV);
    if (c.d_o == NULL || c.dq == NULL || c.dk == NULL || c.dv == NULL) {
      snprintf(error, error_len, "a backward call without its D_O, DQ, DK and DV tensors");
      return 1;
    }
  } else {
    c.out = attnbench_call_tensor(p, ATTNBENCH_ROLE_O);
    c.lse = attnbench_call_tensor(p, ATTNBENCH_ROLE_LSE);
    c.keep = p->dropout_p > 0 ? attnbench_call_tensor(p, ATTNBENCH_ROLE_KEEP) : NULL;
    if (p->dropout_p > 0 && (c.keep == NULL || element_kind(c.keep->dtype) != ELEM_BOOL)) {
      snprintf(error, error_len, "dropout_p=%g without a BOOL 8-bit KEEP tensor to report the keep mask in", p->dropout_p);
      return 1;
    }
  }
  c.qi = scratch(p->d_k);
  c.x = scratch(p->n_k);
  c.scores = scratch(p->n_k);
  c.visible = malloc((size_t)(p->n_k > 0 ? p->n_k : 1));
  int ok = c.qi != NULL && c.x != NULL && c.scores != NULL && c.visible != NULL;
  if (ok && backward) {
    c.k_head = scratch(p->n_k * p->d_k);
    c.v_head = scratch(p->n_k * p->d_v);
    c.dk_sum = scratch(p->n_k * p->d_k);
    c.dv_sum = scratch(p->n_k * p->d_v);
    c.doi = scratch(p->d_v);
    c.dp = scratch(p->n_k);
    c.dq_row = scratch(p->d_k);
    ok = c.k_head != NULL && c.v_head != NULL && c.dk_sum != NULL && c.dv_sum != NULL && c.doi != NULL && c.dp != NULL && c.dq_row != NULL;
  }
  if (!ok)
    snprintf(error, error_len, "out of memory for the scratch of n_k=%lld keys", (long long)p->n_k);
  else if (backward)
    for (int64_t b = 0; b < p->batch; ++b)
      for (int64_t g = 0; g < p->h_kv; ++g) backward_group(&c, b, g);
  else
    for (int64_t b = 0; b < p->batch; ++b)
      for (int64_t h = 0; h < p->h_q; ++h)
        for (int64_t i = 0; i < p->n_q; ++i) attend_row(&c, b, h, i);
  void* owned[] = {c.qi, c.x, c.scores, c.visible, c.k_head, c.v_head, c.dk_sum, c.dv_sum, c.doi, c.dp, c.dq_row};
  for (size_t i = 0; i < sizeof owned / sizeof owned[0]; ++i) free(owned[i]);
  return ok ? 0 : 2;
}

/* Every data role (q k v o bias, and the backward's d_o dq dk dv) in any of the four types; the LSE
 * is attnbench's choice. Each tensor is read and written in its own type (load, store), so the
 * output, the keys, the values and each gradient may also each be in a type of their own:
 * mixed-precision cases (f16 inputs, an f32 output). */
#define C_CPU_EVERY_TYPE(role)                                                                    \
  {role, {ATTNBENCH_DL_FLOAT, 64, 1}}, {role, {ATTNBENCH_DL_FLOAT, 32, 1}}, {role, {ATTNBENCH_DL_FLOAT, 16, 1}}, \
      {role, {ATTNBENCH_DL_BFLOAT, 16, 1}}
static const attnbench_role_dtype c_cpu_dtypes[] = {
    C_CPU_EVERY_TYPE(ATTNBENCH_ROLE_DATA),
    C_CPU_EVERY_TYPE(ATTNBENCH_ROLE_O),
    C_CPU_EVERY_TYPE(ATTNBENCH_ROLE_K),
    C_CPU_EVERY_TYPE(ATTNBENCH_ROLE_V),
    C_CPU_EVERY_TYPE(ATTNBENCH_ROLE_D_O),
    C_CPU_EVERY_TYPE(ATTNBENCH_ROLE_DQ),
    C_CPU_EVERY_TYPE(ATTNBENCH_ROLE_DK),
    C_CPU_EVERY_TYPE(ATTNBENCH_ROLE_DV),
};

static const attnbench_plugin_v2 c_cpu_plugin = {
    ATTNBENCH_ABI_VERSION,
    sizeof(attnbench_plugin_v2),
    "c_cpu_reference",
    "2.0",
    "textbook softmax(QK^T*scale+mask)V and its gradients in C11, long double accumulation, rounded once",
    {
        ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD) | ATTNBENCH_OP_BIT(ATTNBENCH_OP_BACKWARD),
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

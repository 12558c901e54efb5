/* A correct narrow attention kernel of the kind people ship, and wrong variants of it
 * (tests/narrow_plugins.sh): the trust test of `attnbench validate` (issue 18) is whether its
 * verdict separates the correct build from each wrong one.
 *
 * What the kernel implements, and declares: f32 only; dense BHSD only; causal masks with either
 * alignment (top-left, bottom-right) and key padding per batch, composed by intersection; GQA and
 * MQA; d_k != d_v; any head dimension from 1 to 256; no bias, no boolean mask, no LSE; a fully
 * masked row written as zeros. Each output row is computed in double (scores, row maximum,
 * exponentials, sum, P.V) and rounded to f32 once, so the correct build is unambiguously right
 * and whatever a variant gets wrong is its mistake, not rounding.
 *
 * NARROW_MISTAKE (a number, at build time; tests/plugins/CMakeLists.txt names each library
 * narrow_<mistake>) plants one mistake that real kernels make. Where it shows, in brackets:
 *   1  scale_ignored            the caller's scale ignored, 1/sqrt(d_k) always          [a custom scale]
 *   2  default_scale_sqrt_dv    the default scale taken as 1/sqrt(d_v)                   [d_k != d_v]
 *   3  batch0_valid_len         batch 0's valid length used for every batch              [padding, b > 1]
 *   4  padded_key_leaks         one padded key visible (j <= valid_len)                  [padding shorter than n_k]
 *   5  softmax_over_queries     softmax normalised over the query axis                   [everywhere but n_q = 1]
 *   6  strict_causal            causal as j < i + delta (the diagonal hidden)            [causal]
 *   7  tail_tile_dropped        keys in 64-key tiles, the last partial tile dropped      [n_k > 64, n_k % 64 != 0]
 *   8  bottom_right_as_top_left bottom-right causal aligned top-left                     [bottom-right, n_q != n_k]
 *   9  finite_row_max_init      the running row maximum starts at -1e4, not -inf         [every visible score < -1e4 - 745]
 *  10  gqa_head_modulo          query head h reads kv head h % h_kv                       [GQA with 1 < h_kv < h_q]
 *  11  weights_bf16             softmax weights rounded to bf16 before P.V               [everywhere, small error]
 *  12  row_96_mod_97            the last visible key dropped on rows i = 96 (mod 97)     [n_q >= 97: rare rows]
 *  13  nondeterministic         every 7th call perturbs one output element by 1 ulp      [repeated calls only]
 *  14  large_case_row_corrupted 0.5 added to row n_q - 3 of batch 0, head 0              [n_q >= 512 only]
 *  15  bshd_read_as_bhsd        declares BSHD and BHSD, reads every tensor as BHSD       [when handed BSHD]
 * Plain C11, like a third party's. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnbench_plugin.h"

#define NARROW_CORRECT 0
#define NARROW_SCALE_IGNORED 1
#define NARROW_DEFAULT_SCALE_SQRT_DV 2
#define NARROW_BATCH0_VALID_LEN 3
#define NARROW_PADDED_KEY_LEAKS 4
#define NARROW_SOFTMAX_OVER_QUERIES 5
#define NARROW_STRICT_CAUSAL 6
#define NARROW_TAIL_TILE_DROPPED 7
#define NARROW_BOTTOM_RIGHT_AS_TOP_LEFT 8
#define NARROW_FINITE_ROW_MAX_INIT 9
#define NARROW_GQA_HEAD_MODULO 10
#define NARROW_WEIGHTS_BF16 11
#define NARROW_ROW_96_MOD_97 12
#define NARROW_NONDETERMINISTIC 13
#define NARROW_LARGE_CASE_ROW_CORRUPTED 14
#define NARROW_BSHD_READ_AS_BHSD 15
#define NARROW_MISTAKE_COUNT 16

#ifndef NARROW_MISTAKE
#define NARROW_MISTAKE NARROW_CORRECT
#endif
#if NARROW_MISTAKE < 0 || NARROW_MISTAKE >= NARROW_MISTAKE_COUNT
#error "NARROW_MISTAKE must be 0 (correct) to 15"
#endif
/* A compile-time constant: the mistake's code stays visible (and compiled) in every build. */
#define MISTAKE(name) (NARROW_MISTAKE == NARROW_##name)

/* The tile width of the key loop of the tail_tile_dropped variant (a typical kernel's). */
#define KEY_TILE 64

typedef struct {
  const attnbench_problem* p;
  const float *q, *k, *v;
  float* out;
  double* scores;       /* n_k per row; n_q * n_k for softmax_over_queries */
  int64_t* key_counts;  /* n_q: visible keys per row, for softmax_over_queries */
} narrow_call;

static int64_t kv_head_of(const attnbench_problem* p, int64_t h) {
  /* Right for MHA and for MQA (h % 1 == 0); wrong for every grouped case in between. */
  if (MISTAKE(GQA_HEAD_MODULO)) return h % p->h_kv;
  return h / (p->h_q / p->h_kv);
}

static double score_scale(const attnbench_problem* p) {
  if (MISTAKE(SCALE_IGNORED)) return 1.0 / sqrt((double)p->d_k);
  /* A wrapper whose "scale not given" path uses the value head dimension: the harness passes
   * 1/sqrt(d_k) when the case sets no scale, and this variant takes that for "not given". */
  if (MISTAKE(DEFAULT_SCALE_SQRT_DV) && fabs(p->scale * sqrt((double)p->d_k) - 1.0) < 1e-12) return 1.0 / sqrt((double)p->d_v);
  return p->scale;
}

/* Keys 0 .. count-1 are visible to query i of batch b: causality and padding both hide a suffix. */
static int64_t visible_key_count(const attnbench_problem* p, int64_t b, int64_t i) {
  int64_t count = p->n_k;
  if (p->causal != ATTNBENCH_CAUSAL_NONE) {
    int64_t diagonal = 0; /* query i's own position among the keys, minus i */
    if (p->causal == ATTNBENCH_CAUSAL_BOTTOM_RIGHT && !MISTAKE(BOTTOM_RIGHT_AS_TOP_LEFT)) diagonal = p->n_k - p->n_q;
    const int64_t causal_count = MISTAKE(STRICT_CAUSAL) ? i + diagonal : i + diagonal + 1;
    if (causal_count < count) count = causal_count;
  }
  if (p->padding == ATTNBENCH_PADDING_PER_BATCH) {
    int64_t valid = p->valid_len[MISTAKE(BATCH0_VALID_LEN) ? 0 : b];
    if (MISTAKE(PADDED_KEY_LEAKS)) valid += 1; /* j <= valid_len */
    if (valid < count) count = valid;
  }
  /* A tiled key loop run for n_k / KEY_TILE whole tiles, with a separate path only for n_k below
   * one tile: the keys of a last partial tile are never read. */
  if (MISTAKE(TAIL_TILE_DROPPED) && p->n_k >= KEY_TILE) {
    const int64_t tiled = p->n_k / KEY_TILE * KEY_TILE;
    if (tiled < count) count = tiled;
  }
  /* A row-blocked loop (97 rows a block) whose last row stops one key early. */
  if (MISTAKE(ROW_96_MOD_97) && i % 97 == 96 && count > 0) count -= 1;
  return count < 0 ? 0 : count;
}

/* Round to nearest even at bf16's 8 significant bits (the finite values these weights are). */
static double round_to_bf16(double x) {
  float f = (float)x;
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &bits, sizeof f);
  return (double)f;
}

static const float* q_row(const narrow_call* c, int64_t b, int64_t h, int64_t i) {
  const attnbench_problem* p = c->p;
  return c->q + ((b * p->h_q + h) * p->n_q + i) * p->d_k;
}
static const float* k_row(const narrow_call* c, int64_t b, int64_t g, int64_t j) {
  const attnbench_problem* p = c->p;
  return c->k + ((b * p->h_kv + g) * p->n_k + j) * p->d_k;
}
static const float* v_row(const narrow_call* c, int64_t b, int64_t g, int64_t j) {
  const attnbench_problem* p = c->p;
  return c->v + ((b * p->h_kv + g) * p->n_k + j) * p->d_v;
}
static float* out_row(const narrow_call* c, int64_t b, int64_t h, int64_t i) {
  const attnbench_problem* p = c->p;
  return c->out + ((b * p->h_q + h) * p->n_q + i) * p->d_v;
}

static double scaled_score(const narrow_call* c, int64_t b, int64_t h, int64_t i, int64_t j) {
  const float* q = q_row(c, b, h, i);
  const float* k = k_row(c, b, kv_head_of(c->p, h), j);
  double dot = 0;
  for (int64_t x = 0; x < c->p->d_k; ++x) dot += (double)q[x] * (double)k[x];
  return dot * score_scale(c->p);
}

/* out[b, h, i] = sum_j weights[j] v[j] / sum, the weights being exp(score - max), in double. */
static void write_weighted_values(const narrow_call* c, int64_t b, int64_t h, int64_t i, const double* weights, int64_t count, double sum) {
  const int64_t g = kv_head_of(c->p, h);
  float* out = out_row(c, b, h, i);
  for (int64_t x = 0; x < c->p->d_v; ++x) {
    double acc = 0;
    for (int64_t j = 0; j < count; ++j) acc += weights[j] * (double)v_row(c, b, g, j)[x];
    out[x] = (float)(acc / sum);
  }
}

static void write_zero_row(const narrow_call* c, int64_t b, int64_t h, int64_t i) {
  float* out = out_row(c, b, h, i);
  for (int64_t x = 0; x < c->p->d_v; ++x) out[x] = 0.0f;
}

static void attend_row(const narrow_call* c, int64_t b, int64_t h, int64_t i) {
  const int64_t count = visible_key_count(c->p, b, i);
  if (count == 0) { /* fully masked: zeros, the declared policy */
    write_zero_row(c, b, h, i);
    return;
  }
  double row_max = MISTAKE(FINITE_ROW_MAX_INIT) ? -1.0e4 : -INFINITY;
  for (int64_t j = 0; j < count; ++j) {
    c->scores[j] = scaled_score(c, b, h, i, j);
    if (c->scores[j] > row_max) row_max = c->scores[j];
  }
  double sum = 0;
  for (int64_t j = 0; j < count; ++j) sum += (c->scores[j] = exp(c->scores[j] - row_max));
  if (MISTAKE(WEIGHTS_BF16)) { /* normalised weights stored as bf16 for a bf16 P.V product */
    for (int64_t j = 0; j < count; ++j) c->scores[j] = round_to_bf16(c->scores[j] / sum);
    sum = 1.0;
  }
  write_weighted_values(c, b, h, i, c->scores, count, sum);
}

/* The softmax_over_queries variant, one (batch, head) at a time: each key's column of visible
 * scores is normalised over the queries that see it, and the rows then weight V as usual. */
static void attend_head_softmax_over_queries(const narrow_call* c, int64_t b, int64_t h) {
  const attnbench_problem* p = c->p;
  double* s = c->scores; /* n_q x n_k */
  for (int64_t i = 0; i < p->n_q; ++i) {
    c->key_counts[i] = visible_key_count(p, b, i);
    for (int64_t j = 0; j < c->key_counts[i]; ++j) s[i * p->n_k + j] = scaled_score(c, b, h, i, j);
  }
  for (int64_t j = 0; j < p->n_k; ++j) {
    double column_max = -INFINITY, sum = 0;
    for (int64_t i = 0; i < p->n_q; ++i)
      if (j < c->key_counts[i] && s[i * p->n_k + j] > column_max) column_max = s[i * p->n_k + j];
    for (int64_t i = 0; i < p->n_q; ++i)
      if (j < c->key_counts[i]) sum += (s[i * p->n_k + j] = exp(s[i * p->n_k + j] - column_max));
    for (int64_t i = 0; i < p->n_q; ++i)
      if (j < c->key_counts[i]) s[i * p->n_k + j] /= sum;
  }
  for (int64_t i = 0; i < p->n_q; ++i) {
    if (c->key_counts[i] == 0)
      write_zero_row(c, b, h, i);
    else
      write_weighted_values(c, b, h, i, s + i * p->n_k, c->key_counts[i], 1.0);
  }
}

/* Writes the message into the ABI's error buffer and returns the status, for run's refusals. */
__attribute__((format(printf, 4, 5))) static int refuse(char* error, size_t error_len, int status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(error, error_len, format, args);
  va_end(args);
  return status;
}

/* Dense BHSD: strides (h*s*d, s*d, d, 1) of the tensor's own shape. */
static int is_dense_bhsd(const attnbench_tensor* t) {
  const int64_t* n = t->shape;
  const int64_t* s = t->strides;
  return t->ndim == 4 && s[3] == 1 && s[2] == n[3] && s[1] == n[2] * n[3] && s[0] == n[1] * n[2] * n[3];
}

static int narrow_run(const attnbench_problem* p, const attnbench_tensor* q, const attnbench_tensor* k, const attnbench_tensor* v,
                      const attnbench_tensor* out, const attnbench_tensor* lse, const attnbench_tensor* mask,
                      const attnbench_tensor* bias, char* error, size_t error_len) {
  (void)lse; /* returns_lse is 0: attnbench passes NULL */
  /* What this kernel cannot do is refused, not computed wrongly (the capabilities already keep
   * such problems away; a caller that ignores them gets an error). */
  if (p->dtype != ATTNBENCH_DTYPE_F32) return refuse(error, error_len, 1, "narrow: f32 only, got dtype %d", (int)p->dtype);
  if (mask != NULL || bias != NULL || p->padding == ATTNBENCH_PADDING_PER_QUERY)
    return refuse(error, error_len, 1, "narrow: no boolean mask, bias or per-query padding");
  if (p->h_kv <= 0 || p->h_q % p->h_kv != 0)
    return refuse(error, error_len, 1, "narrow: h_q=%lld is not a multiple of h_kv=%lld", (long long)p->h_q, (long long)p->h_kv);
  /* The bshd_read_as_bhsd variant declares BSHD too and never looks at the strides. */
  if (!MISTAKE(BSHD_READ_AS_BHSD)) {
    const attnbench_tensor* views[] = {q, k, v, out};
    for (int t = 0; t < 4; ++t)
      if (!is_dense_bhsd(views[t])) return refuse(error, error_len, 1, "narrow: tensor %d (q, k, v, out) is not dense BHSD", t);
  }

  narrow_call c = {p, q->data, k->data, v->data, out->data, NULL, NULL};
  const size_t score_count = (size_t)(MISTAKE(SOFTMAX_OVER_QUERIES) ? p->n_q * p->n_k : p->n_k);
  c.scores = malloc(sizeof(double) * (score_count > 0 ? score_count : 1));
  c.key_counts = malloc(sizeof(int64_t) * (size_t)(p->n_q > 0 ? p->n_q : 1));
  if (c.scores == NULL || c.key_counts == NULL) {
    free(c.scores);
    free(c.key_counts);
    return refuse(error, error_len, 2, "narrow: out of memory for %zu scores", score_count);
  }
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->h_q; ++h) {
      if (MISTAKE(SOFTMAX_OVER_QUERIES)) {
        attend_head_softmax_over_queries(&c, b, h);
        continue;
      }
      for (int64_t i = 0; i < p->n_q; ++i) attend_row(&c, b, h, i);
    }
  free(c.scores);
  free(c.key_counts);

  /* A race that rarely loses, as a counter: every 7th call one element is off by one ulp. */
  static unsigned long calls = 0;
  if (MISTAKE(NONDETERMINISTIC) && ++calls % 7 == 0 && p->batch * p->h_q * p->n_q * p->d_v > 0) c.out[0] = nextafterf(c.out[0], INFINITY);
  /* One wrong row, and only on large problems, where a harness that samples rows may miss it. */
  if (MISTAKE(LARGE_CASE_ROW_CORRUPTED) && p->n_q >= 512 && p->batch > 0 && p->h_q > 0) {
    float* row = out_row(&c, 0, 0, p->n_q - 3);
    for (int64_t x = 0; x < p->d_v; ++x) row[x] += 0.5f;
  }
  return 0;
}

static const char* const variant_names[NARROW_MISTAKE_COUNT] = {
    "narrow_f32_bhsd",          "narrow_scale_ignored",        "narrow_default_scale_sqrt_dv", "narrow_batch0_valid_len",
    "narrow_padded_key_leaks",  "narrow_softmax_over_queries", "narrow_strict_causal",         "narrow_tail_tile_dropped",
    "narrow_bottom_right_as_top_left", "narrow_finite_row_max_init", "narrow_gqa_head_modulo", "narrow_weights_bf16",
    "narrow_row_96_mod_97",     "narrow_nondeterministic",     "narrow_large_case_row_corrupted", "narrow_bshd_read_as_bhsd",
};

static attnbench_plugin_v1 narrow_plugin = {
    ATTNBENCH_PLUGIN_ABI_VERSION,
    NULL, /* the variant's name, set by attnbench_plugin_get */
    "1.0",
    "narrow kernel: f32, BHSD, causal (both alignments), key padding per batch, GQA; rows in double, rounded once",
    {
        ATTNBENCH_DTYPE_BIT(ATTNBENCH_DTYPE_F32),
        MISTAKE(BSHD_READ_AS_BHSD) ? ATTNBENCH_LAYOUT_BHSD | ATTNBENCH_LAYOUT_BSHD : ATTNBENCH_LAYOUT_BHSD,
        ATTNBENCH_MASK_CAUSAL_TOP_LEFT | ATTNBENCH_MASK_CAUSAL_BOTTOM_RIGHT | ATTNBENCH_MASK_PADDING_PER_BATCH,
        ATTNBENCH_FULLY_MASKED_ZEROS,
        1, 256, NULL, 0, /* any head dim from 1 to 256 */
        1,               /* d_k != d_v */
        1,               /* GQA and MQA */
        0,               /* no LSE */
        1,               /* deterministic (the nondeterministic variant claims it too) */
        ATTNBENCH_DEVICE_HOST,
    },
    NULL, /* no supports(): the capabilities say it all */
    narrow_run,
};

ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v1* attnbench_plugin_get(uint32_t abi_version) {
  narrow_plugin.name = variant_names[NARROW_MISTAKE];
  return abi_version == ATTNBENCH_PLUGIN_ABI_VERSION ? &narrow_plugin : NULL;
}

/* A correct kernel of the kind with everything built in: the scale is 1/sqrt(d_k) and the mask
 * causal, aligned bottom-right (FlashAttention's), whatever the call says; f32, dense BHSD, GQA and
 * d_k != d_v; no padding, boolean mask or bias; no LSE. It declares exactly that on ABI version 2
 * (ATTNBENCH_FEATURE_DEFAULT_SCALE_ONLY, ATTNBENCH_FEATURE_CAUSAL_ONLY with
 * ATTNBENCH_FEATURE_CAUSAL_BOTTOM_RIGHT), so attnbench runs each case as its projection onto that
 * space: the test (tests/fixed_scale_causal_plugin.sh) is that validate passes it on the default
 * set and fails each wrong variant. Each row in long double, rounded to f32 once.
 *
 * FIXED_MISTAKE (at build time; tests/plugins/CMakeLists.txt names each library):
 *   0  the correct kernel                                 (fixed_scale_causal_plugin)
 *   1  the built-in scale 1/d_k instead of 1/sqrt(d_k)     (fixed_scale_causal_scale_over_dk)
 *   2  the causal diagonal aligned top-left                 (fixed_scale_causal_top_left)
 *   3  correct, but every key multiplied in, a masked one with weight exactly 0, so a NaN or Inf
 *      in a masked key's V reaches the row as 0 * NaN (fixed_scale_causal_masked_values_multiplied):
 *      not declared masked-non-finite-safe, so property 13 reports a finding, not a failure
 *   4  correct, but crashes (abort) on a NaN or Inf anywhere in V: property 13's inputs make it
 *      crash, a failure although that property's mismatches would be findings
 *      (fixed_scale_causal_crash_on_nonfinite)
 *   5  query head h reads kv head h, not h / (h_q / h_kv): past the end of K and V under GQA, a
 *      crash on the guard page after them; MHA cases right (fixed_scale_causal_gqa_reads_head_h)
 * Plain C11, like a third party's. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "attnbench_plugin.h"

#ifndef FIXED_MISTAKE
#define FIXED_MISTAKE 0
#endif

static float at(const attnbench_dl_tensor* t, int64_t b, int64_t h, int64_t s, int64_t d) {
  return ((const float*)t->data)[((b * t->shape[1] + h) * t->shape[2] + s) * t->shape[3] + d];
}

static int fixed_run(const attnbench_call* p, char* error, size_t error_len) {
  const attnbench_dl_tensor* q = attnbench_call_tensor(p, ATTNBENCH_ROLE_Q);
  const attnbench_dl_tensor* k = attnbench_call_tensor(p, ATTNBENCH_ROLE_K);
  const attnbench_dl_tensor* v = attnbench_call_tensor(p, ATTNBENCH_ROLE_V);
  const attnbench_dl_tensor* o = attnbench_call_tensor(p, ATTNBENCH_ROLE_O);
  long double* e = malloc(sizeof(long double) * (size_t)(p->n_k > 0 ? p->n_k : 1));
  if (e == NULL) {
    snprintf(error, error_len, "out of memory for %lld scores", (long long)p->n_k);
    return 1;
  }
  if (FIXED_MISTAKE == 4)
    for (int64_t e_ = 0; e_ < p->batch * p->h_kv * p->n_k * p->d_v; ++e_)
      if (!isfinite(((const float*)v->data)[e_])) abort();
  const long double scale = FIXED_MISTAKE == 1 ? 1.0L / (long double)p->d_k : 1.0L / sqrtl((long double)p->d_k);
  const int64_t shift = FIXED_MISTAKE == 2 ? 0 : p->n_k - p->n_q; /* bottom-right: row i sees keys j <= i + n_k - n_q */
  float* out = (float*)o->data;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->h_q; ++h)
      for (int64_t i = 0; i < p->n_q; ++i) {
        const int64_t g = FIXED_MISTAKE == 5 ? h : h / (p->h_q / p->h_kv);
        int64_t limit = i + 1 + shift;
        if (limit > p->n_k) limit = p->n_k;
        float* row = out + ((b * p->h_q + h) * p->n_q + i) * p->d_v;
        if (limit <= 0) { /* a row that sees no key: zeros */
          for (int64_t c = 0; c < p->d_v; ++c) row[c] = 0.0f;
          continue;
        }
        long double max = -INFINITY, sum = 0;
        for (int64_t j = 0; j < limit; ++j) {
          long double dot = 0;
          for (int64_t x = 0; x < p->d_k; ++x) dot += (long double)at(q, b, h, i, x) * (long double)at(k, b, g, j, x);
          e[j] = dot * scale;
          if (e[j] > max) max = e[j];
        }
        for (int64_t j = 0; j < limit; ++j) sum += (e[j] = expl(e[j] - max));
        const int64_t multiplied = FIXED_MISTAKE == 3 ? p->n_k : limit;
        for (int64_t c = 0; c < p->d_v; ++c) {
          long double acc = 0;
          for (int64_t j = 0; j < multiplied; ++j) acc += (j < limit ? e[j] : 0.0L) * (long double)at(v, b, g, j, c);
          row[c] = (float)(acc / sum);
        }
      }
  free(e);
  return 0;
}

static const attnbench_role_dtype fixed_dtypes[] = {{ATTNBENCH_ROLE_DATA, {ATTNBENCH_DL_FLOAT, 32, 1}}};

static const attnbench_plugin_v2 fixed_plugin = {
    ATTNBENCH_ABI_VERSION,
    sizeof(attnbench_plugin_v2),
    "fixed_scale_causal",
    "1.0",
    "softmax(QK^T/sqrt(d_k) + causal bottom-right)V, scale and mask built in, f32, long double rows",
    {
        ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD),
        ATTNBENCH_FEATURE_CAUSAL_BOTTOM_RIGHT | ATTNBENCH_FEATURE_CAUSAL_ONLY | ATTNBENCH_FEATURE_DEFAULT_SCALE_ONLY |
            ATTNBENCH_FEATURE_GQA | ATTNBENCH_FEATURE_DIFFERENT_DK_DV | ATTNBENCH_FEATURE_DETERMINISTIC,
        ATTNBENCH_ACCEPTS_BHSD,
        ATTNBENCH_FULLY_MASKED_AS_ZEROS,
        fixed_dtypes,
        1,
        1, 512, 0, NULL,
        ATTNBENCH_DL_CPU,
        0,
        0.0,
    },
    NULL,
    fixed_run,
    NULL,
};

ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v2* attnbench_plugin_get(uint32_t abi_version) {
  return abi_version == ATTNBENCH_ABI_VERSION ? &fixed_plugin : NULL;
}

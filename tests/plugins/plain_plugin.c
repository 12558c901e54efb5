/* A correct plain attention kernel, the plainest kind people publish (tests/narrow_plugins.sh):
 * f32, dense BHSD, multi-head attention only (h_q == h_kv), no mask of any kind, d_k == d_v from 1
 * to 256, and a supports() that accepts square attention only (n_q == n_k), as a wrapper around a
 * kernel written for self-attention would. A harness that only runs cases matching all of that
 * exactly checks almost nothing; issue 18 asks that such a kernel still get real coverage.
 * Each output row in double, rounded to f32 once. Plain C11, like a third party's. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "attnbench_plugin.h"

static int plain_supports(const attnbench_problem* p, char* why, size_t why_len) {
  if (p->n_q == p->n_k) return 1;
  snprintf(why, why_len, "square attention only: n_q=%lld != n_k=%lld", (long long)p->n_q, (long long)p->n_k);
  return 0;
}

static int plain_run(const attnbench_problem* p, const attnbench_tensor* q, const attnbench_tensor* k, const attnbench_tensor* v,
                     const attnbench_tensor* out, const attnbench_tensor* lse, const attnbench_tensor* mask, const attnbench_tensor* bias,
                     char* error, size_t error_len) {
  (void)lse, (void)mask, (void)bias; /* none declared: attnbench passes NULL */
  if (p->dtype != ATTNBENCH_DTYPE_F32 || p->h_q != p->h_kv || p->d_k != p->d_v || p->n_q != p->n_k ||
      p->causal != ATTNBENCH_CAUSAL_NONE || p->padding != ATTNBENCH_PADDING_NONE) {
    snprintf(error, error_len, "plain: f32 MHA, n_q == n_k, d_k == d_v, no mask only");
    return 1;
  }
  const int64_t n = p->n_q, d = p->d_k;
  double* weights = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  if (weights == NULL) {
    snprintf(error, error_len, "plain: out of memory for %lld weights", (long long)n);
    return 2;
  }
  /* Dense BHSD with h_q == h_kv: every (batch, head) is one n x d block of each tensor. */
  for (int64_t head = 0; head < p->batch * p->h_q; ++head) {
    const float* qh = (const float*)q->data + head * n * d;
    const float* kh = (const float*)k->data + head * n * d;
    const float* vh = (const float*)v->data + head * n * d;
    float* oh = (float*)out->data + head * n * d;
    for (int64_t i = 0; i < n; ++i) {
      double row_max = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t x = 0; x < d; ++x) dot += (double)qh[i * d + x] * (double)kh[j * d + x];
        weights[j] = dot * p->scale;
        if (weights[j] > row_max) row_max = weights[j];
      }
      for (int64_t j = 0; j < n; ++j) sum += (weights[j] = exp(weights[j] - row_max));
      for (int64_t x = 0; x < d; ++x) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += weights[j] * (double)vh[j * d + x];
        oh[i * d + x] = (float)(acc / sum);
      }
    }
  }
  free(weights);
  return 0;
}

static const attnbench_plugin_v1 plain_plugin = {
    ATTNBENCH_PLUGIN_ABI_VERSION,
    "plain_f32_mha",
    "1.0",
    "plain kernel: f32, BHSD, MHA, no mask, n_q == n_k, d_k == d_v; rows in double, rounded once",
    {
        ATTNBENCH_DTYPE_BIT(ATTNBENCH_DTYPE_F32),
        ATTNBENCH_LAYOUT_BHSD,
        0, /* no masks */
        ATTNBENCH_FULLY_MASKED_ZEROS, /* moot: without masks no row is fully masked */
        1, 256, NULL, 0,
        0, /* d_k == d_v only */
        0, /* MHA only */
        0, /* no LSE */
        1, /* deterministic */
        ATTNBENCH_DEVICE_HOST,
    },
    plain_supports,
    plain_run,
};

ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v1* attnbench_plugin_get(uint32_t abi_version) {
  return abi_version == ATTNBENCH_PLUGIN_ABI_VERSION ? &plain_plugin : NULL;
}

/* A small dropout kernel on ABI version 2 (tests/dropout_plugin.sh): f32, BHSD, no mask, the
 * forward pass with its LSE and dropout (ATTNBENCH_FEATURE_DROPOUT) on its own counter-based
 * stream, the keep mask reported in the KEEP tensor. DROPOUT_MISTAKE picks one planted mistake:
 *   0  none (the control: validates);
 *   1  not_rescaled: the kept weights are not divided by 1 - p;
 *   2  keeps_all: reports an all-ones keep mask, and computes what that mask says (every weight
 *      kept, rescaled), so only the keep rate is wrong;
 *   3  keep_unwritten: drops and rescales right but never writes the KEEP tensor. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "attnbench_plugin.h"

#ifndef DROPOUT_MISTAKE
#define DROPOUT_MISTAKE 0
#endif

static uint64_t fmix64(uint64_t z) {
  z ^= z >> 33;
  z *= 0xff51afd7ed558ccdULL;
  z ^= z >> 33;
  z *= 0xc4ceb9fe1a85ec53ULL;
  return z ^ (z >> 33);
}

/* Kept with probability 1 - p, from the seed and the weight's flat index. */
static int keeps(uint64_t seed, double p, uint64_t index) {
  return (double)(fmix64(fmix64(seed + 0x632be59bd9b4e019ULL) ^ index) >> 11) * 0x1p-53 >= p;
}

static int64_t at(const attnbench_dl_tensor* t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t->strides[0] + b * t->strides[1] + c * t->strides[2] + (t->ndim > 3 ? d * t->strides[3] : 0);
}

static int dropout_run(const attnbench_call* p, char* error, size_t error_len) {
  const attnbench_dl_tensor *q = attnbench_call_tensor(p, ATTNBENCH_ROLE_Q), *k = attnbench_call_tensor(p, ATTNBENCH_ROLE_K),
                            *v = attnbench_call_tensor(p, ATTNBENCH_ROLE_V), *o = attnbench_call_tensor(p, ATTNBENCH_ROLE_O),
                            *lse = attnbench_call_tensor(p, ATTNBENCH_ROLE_LSE), *keep = attnbench_call_tensor(p, ATTNBENCH_ROLE_KEEP);
  if (p->dropout_p > 0 && keep == NULL) {
    snprintf(error, error_len, "dropout_p=%g and no KEEP tensor", p->dropout_p);
    return 1;
  }
  double* s = malloc(sizeof(double) * (size_t)(p->n_k > 0 ? p->n_k : 1));
  if (s == NULL) {
    snprintf(error, error_len, "out of memory");
    return 2;
  }
  const float *Q = q->data, *K = k->data, *V = v->data;
  float* O = o->data;
  const int64_t group = p->h_q / p->h_kv;
  const double rescale = DROPOUT_MISTAKE == 1 || p->dropout_p <= 0 ? 1.0 : 1.0 / (1.0 - p->dropout_p);
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->h_q; ++h)
      for (int64_t i = 0; i < p->n_q; ++i) {
        double max = -INFINITY, sum = 0;
        for (int64_t j = 0; j < p->n_k; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < p->d_k; ++x) dot += (double)Q[at(q, b, h, i, x)] * (double)K[at(k, b, h / group, j, x)];
          s[j] = dot * p->scale;
          if (s[j] > max) max = s[j];
        }
        for (int64_t j = 0; j < p->n_k; ++j) sum += (s[j] = exp(s[j] - max));
        for (int64_t j = 0; j < p->n_k; ++j) {
          int kept = 1;
          if (p->dropout_p > 0) {
            kept = DROPOUT_MISTAKE == 2 || keeps(p->dropout_seed, p->dropout_p, (uint64_t)(((b * p->h_q + h) * p->n_q + i) * p->n_k + j));
            if (DROPOUT_MISTAKE != 3) ((uint8_t*)keep->data)[at(keep, b, h, i, j)] = (uint8_t)kept;
          }
          s[j] = kept ? s[j] / sum * rescale : 0.0;
        }
        for (int64_t x = 0; x < p->d_v; ++x) {
          double acc = 0;
          for (int64_t j = 0; j < p->n_k; ++j) acc += s[j] * (double)V[at(v, b, h / group, j, x)];
          O[at(o, b, h, i, x)] = (float)acc;
        }
        if (lse != NULL) ((float*)lse->data)[at(lse, b, h, i, 0)] = (float)(max + log(sum));
      }
  free(s);
  return 0;
}

static const attnbench_role_dtype dropout_dtypes[] = {{ATTNBENCH_ROLE_DATA, {ATTNBENCH_DL_FLOAT, 32, 1}}};

static const attnbench_plugin_v2 dropout_plugin = {
    ATTNBENCH_ABI_VERSION,
    sizeof(attnbench_plugin_v2),
    "dropout_test",
    "1",
    "f32 attention with dropout on its own stream (tests/plugins/dropout_plugin.c)",
    {ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD),
     ATTNBENCH_FEATURE_GQA | ATTNBENCH_FEATURE_DIFFERENT_DK_DV | ATTNBENCH_FEATURE_LSE | ATTNBENCH_FEATURE_DETERMINISTIC |
         ATTNBENCH_FEATURE_DROPOUT,
     ATTNBENCH_ACCEPTS_BHSD, ATTNBENCH_FULLY_MASKED_AS_ZEROS, dropout_dtypes, 1, 1, 512, 0, NULL, ATTNBENCH_DL_CPU, 0, 0.0},
    NULL,
    dropout_run,
    NULL,
};

ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v2* attnbench_plugin_get(uint32_t abi_version) {
  return abi_version == ATTNBENCH_ABI_VERSION ? &dropout_plugin : NULL;
}

/* A small soft-capping kernel on ABI version 2 that knows soft-capping by name only
 * (tests/softcap_by_name_plugin.sh): it declares it in the exported attnbench_score_modifications
 * ("softcap"), never with
 * ATTNBENCH_FEATURE_SOFTCAP, and reads the cap with attnbench_call_setting(call, "softcap"), never
 * from call->softcap: what a plugin does for a score modification added after the ABI's fields
 * and bits. f32, BHSD, no mask, GQA, d_k != d_v, the forward pass with its LSE. SOFTCAP_MISTAKE
 * picks one planted mistake:
 *   0  none (the control: validates);
 *   1  setting_ignored: finds the setting and never applies it;
 *   2  wrong_name: asks for "soft_cap", sees NULL, so never caps;
 *   3  unknown_name: declares "softcapp", which attnbench refuses at load. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "attnbench_plugin.h"

#ifndef SOFTCAP_MISTAKE
#define SOFTCAP_MISTAKE 0
#endif
#if SOFTCAP_MISTAKE == 3
#define DECLARED_MODIFICATIONS "softcapp"
#else
#define DECLARED_MODIFICATIONS "softcap"
#endif

static int64_t at(const attnbench_dl_tensor* t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t->strides[0] + b * t->strides[1] + c * t->strides[2] + (t->ndim > 3 ? d * t->strides[3] : 0);
}

static int softcap_run(const attnbench_call* p, char* error, size_t error_len) {
  const attnbench_dl_tensor *q = attnbench_call_tensor(p, ATTNBENCH_ROLE_Q), *k = attnbench_call_tensor(p, ATTNBENCH_ROLE_K),
                            *v = attnbench_call_tensor(p, ATTNBENCH_ROLE_V), *o = attnbench_call_tensor(p, ATTNBENCH_ROLE_O),
                            *lse = attnbench_call_tensor(p, ATTNBENCH_ROLE_LSE);
  const attnbench_setting* setting = attnbench_call_setting(p, SOFTCAP_MISTAKE == 2 ? "soft_cap" : "softcap");
  double cap = 0; /* 0: none */
  if (setting != NULL) {
    if (setting->integer != 0 || !(setting->value > 0)) {
      snprintf(error, error_len, "setting %s = %g (integer %llu): expected a positive real", setting->name, setting->value,
               (unsigned long long)setting->integer);
      return 3;
    }
    cap = SOFTCAP_MISTAKE == 1 ? 0 : setting->value;
  }
  double* s = malloc(sizeof(double) * (size_t)(p->n_k > 0 ? p->n_k : 1));
  if (s == NULL) {
    snprintf(error, error_len, "out of memory");
    return 2;
  }
  const float *Q = q->data, *K = k->data, *V = v->data;
  float* O = o->data;
  const int64_t group = p->h_q / p->h_kv;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->h_q; ++h)
      for (int64_t i = 0; i < p->n_q; ++i) {
        double max = -INFINITY, sum = 0;
        for (int64_t j = 0; j < p->n_k; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < p->d_k; ++x) dot += (double)Q[at(q, b, h, i, x)] * (double)K[at(k, b, h / group, j, x)];
          s[j] = dot * p->scale;
          if (cap > 0) s[j] = cap * tanh(s[j] / cap);
          if (s[j] > max) max = s[j];
        }
        for (int64_t j = 0; j < p->n_k; ++j) sum += (s[j] = exp(s[j] - max));
        for (int64_t x = 0; x < p->d_v; ++x) {
          double acc = 0;
          for (int64_t j = 0; j < p->n_k; ++j) acc += s[j] / sum * (double)V[at(v, b, h / group, j, x)];
          O[at(o, b, h, i, x)] = (float)acc;
        }
        if (lse != NULL) ((float*)lse->data)[at(lse, b, h, i, 0)] = (float)(max + log(sum));
      }
  free(s);
  return 0;
}

static const attnbench_role_dtype softcap_dtypes[] = {{ATTNBENCH_ROLE_DATA, {ATTNBENCH_DL_FLOAT, 32, 1}}};

static const attnbench_plugin_v2 softcap_plugin = {
    .abi_version = ATTNBENCH_ABI_VERSION,
    .struct_size = sizeof(attnbench_plugin_v2),
    .name = "softcap_by_name_test",
    .version = "1",
    .description = "f32 attention with soft-capping declared and read by name (tests/plugins/softcap_by_name_plugin.c)",
    .capabilities = {.operations = ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD),
                     /* no ATTNBENCH_FEATURE_SOFTCAP: the name below declares it */
                     .features = ATTNBENCH_FEATURE_GQA | ATTNBENCH_FEATURE_DIFFERENT_DK_DV | ATTNBENCH_FEATURE_LSE |
                                 ATTNBENCH_FEATURE_DETERMINISTIC,
                     .layouts = ATTNBENCH_ACCEPTS_BHSD,
                     .fully_masked_policy = ATTNBENCH_FULLY_MASKED_AS_ZEROS,
                     .dtypes = softcap_dtypes,
                     .dtype_count = 1,
                     .min_head_dim = 1,
                     .max_head_dim = 512,
                     .device_type = ATTNBENCH_DL_CPU},
    .supports = NULL,
    .run = softcap_run,
    .context = NULL,
};

ATTNBENCH_PLUGIN_EXPORT const char attnbench_score_modifications[] = DECLARED_MODIFICATIONS;

ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v2* attnbench_plugin_get(uint32_t abi_version) {
  return abi_version == ATTNBENCH_ABI_VERSION ? &softcap_plugin : NULL;
}

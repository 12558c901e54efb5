/* A small backward kernel on ABI version 2 (tests/backward_plugin.sh): f32 and f64, BHSD, causal
 * in both alignments, key padding per batch, GQA, d_k != d_v, the LSE; the forward pass and the
 * backward (dQ, dK, dV from Q, K, V and dO, its weights recomputed in double). BACKWARD_MISTAKE
 * picks one planted fault of the backward, each of which the worker must catch and name:
 *   0  none (the control: validates);
 *   1  dk_past_end: on a case with n_k = 17 only, one element written past the end of dK (its
 *      guard page), so the cases after it show the run goes on;
 *   2  dv_row_unwritten: the last key's row of dV (batch 0, kv head 0) never written;
 *   3  writes_d_o: dO's first element overwritten (an input). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnbench_plugin.h"

#ifndef BACKWARD_MISTAKE
#define BACKWARD_MISTAKE 0
#endif

static int64_t at(const attnbench_dl_tensor* t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t->strides[0] + b * t->strides[1] + c * t->strides[2] + (t->ndim > 3 ? d * t->strides[3] : 0);
}

static int is_f64(const attnbench_dl_tensor* t) { return t->dtype.bits == 64; }

static double get(const attnbench_dl_tensor* t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return is_f64(t) ? ((const double*)t->data)[at(t, a, b, c, d)] : (double)((const float*)t->data)[at(t, a, b, c, d)];
}

static void put(const attnbench_dl_tensor* t, int64_t a, int64_t b, int64_t c, int64_t d, double value) {
  if (is_f64(t))
    ((double*)t->data)[at(t, a, b, c, d)] = value;
  else
    ((float*)t->data)[at(t, a, b, c, d)] = (float)value;
}

/* Query i of batch b sees keys [0, key_limit): the causal window and the padding. */
static int64_t key_limit(const attnbench_call* p, int64_t b, int64_t i) {
  int64_t limit = p->n_k;
  if (p->window.right == 0) {
    const int64_t diagonal = i + (p->window.align == ATTNBENCH_ALIGN_BOTTOM_RIGHT ? p->n_k - p->n_q : 0);
    if (diagonal + 1 < limit) limit = diagonal + 1;
  }
  if (p->key_padding == ATTNBENCH_KEY_PADDING_PER_BATCH && p->valid_len[b] < limit) limit = p->valid_len[b];
  return limit < 0 ? 0 : limit;
}

/* Row i of head h: its softmax weights in w (keys [0, limit)); the LSE, or -inf when it sees none. */
static double weights(const attnbench_call* p, int64_t b, int64_t h, int64_t i, int64_t limit, double* w) {
  const attnbench_dl_tensor *q = attnbench_call_tensor(p, ATTNBENCH_ROLE_Q), *k = attnbench_call_tensor(p, ATTNBENCH_ROLE_K);
  const int64_t g = h / (p->h_q / p->h_kv);
  if (limit == 0) return -INFINITY;
  double max = -INFINITY, sum = 0;
  for (int64_t j = 0; j < limit; ++j) {
    double dot = 0;
    for (int64_t x = 0; x < p->d_k; ++x) dot += get(q, b, h, i, x) * get(k, b, g, j, x);
    w[j] = dot * p->scale;
    if (w[j] > max) max = w[j];
  }
  for (int64_t j = 0; j < limit; ++j) sum += (w[j] = exp(w[j] - max));
  for (int64_t j = 0; j < limit; ++j) w[j] /= sum;
  return max + log(sum);
}

static void forward(const attnbench_call* p, double* w) {
  const attnbench_dl_tensor *v = attnbench_call_tensor(p, ATTNBENCH_ROLE_V), *o = attnbench_call_tensor(p, ATTNBENCH_ROLE_O),
                            *lse = attnbench_call_tensor(p, ATTNBENCH_ROLE_LSE);
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->h_q; ++h)
      for (int64_t i = 0; i < p->n_q; ++i) {
        const int64_t limit = key_limit(p, b, i);
        const double l = weights(p, b, h, i, limit, w);
        for (int64_t x = 0; x < p->d_v; ++x) {
          double acc = 0;
          for (int64_t j = 0; j < limit; ++j) acc += w[j] * get(v, b, h / (p->h_q / p->h_kv), j, x);
          put(o, b, h, i, x, acc);
        }
        if (lse != NULL) put(lse, b, h, i, 0, l);
      }
}

/* dP_j = <dO_i, v_j>, D = sum_j P_j dP_j, dS_j = P_j (dP_j - D); dQ_i = scale sum_j dS_j k_j,
 * dK_j += scale dS_j q_i, dV_j += P_j dO_i, summed over the query heads of a kv head. */
static void backward(const attnbench_call* p, double* w, double* dk_sum, double* dv_sum, double* dq_row) {
  const attnbench_dl_tensor *q = attnbench_call_tensor(p, ATTNBENCH_ROLE_Q), *k = attnbench_call_tensor(p, ATTNBENCH_ROLE_K),
                            *v = attnbench_call_tensor(p, ATTNBENCH_ROLE_V), *d_o = attnbench_call_tensor(p, ATTNBENCH_ROLE_D_O),
                            *dq = attnbench_call_tensor(p, ATTNBENCH_ROLE_DQ), *dk = attnbench_call_tensor(p, ATTNBENCH_ROLE_DK),
                            *dv = attnbench_call_tensor(p, ATTNBENCH_ROLE_DV);
  const int64_t group = p->h_q / p->h_kv;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t g = 0; g < p->h_kv; ++g) {
      memset(dk_sum, 0, sizeof(double) * (size_t)(p->n_k * p->d_k));
      memset(dv_sum, 0, sizeof(double) * (size_t)(p->n_k * p->d_v));
      for (int64_t h = g * group; h < (g + 1) * group; ++h)
        for (int64_t i = 0; i < p->n_q; ++i) {
          const int64_t limit = key_limit(p, b, i);
          weights(p, b, h, i, limit, w);
          double d = 0;
          for (int64_t j = 0; j < limit; ++j) {
            double dp = 0;
            for (int64_t x = 0; x < p->d_v; ++x) dp += get(d_o, b, h, i, x) * get(v, b, g, j, x);
            for (int64_t x = 0; x < p->d_v; ++x) dv_sum[j * p->d_v + x] += w[j] * get(d_o, b, h, i, x);
            d += w[j] * dp;
            w[p->n_k + j] = dp;
          }
          for (int64_t x = 0; x < p->d_k; ++x) dq_row[x] = 0;
          for (int64_t j = 0; j < limit; ++j) {
            const double ds = w[j] * (w[p->n_k + j] - d) * p->scale;
            for (int64_t x = 0; x < p->d_k; ++x) {
              dq_row[x] += ds * get(k, b, g, j, x);
              dk_sum[j * p->d_k + x] += ds * get(q, b, h, i, x);
            }
          }
          for (int64_t x = 0; x < p->d_k; ++x) put(dq, b, h, i, x, dq_row[x]);
        }
      for (int64_t j = 0; j < p->n_k; ++j) {
        for (int64_t x = 0; x < p->d_k; ++x) put(dk, b, g, j, x, dk_sum[j * p->d_k + x]);
        if (BACKWARD_MISTAKE == 2 && b == 0 && g == 0 && j == p->n_k - 1) continue;
        for (int64_t x = 0; x < p->d_v; ++x) put(dv, b, g, j, x, dv_sum[j * p->d_v + x]);
      }
    }
  if (BACKWARD_MISTAKE == 1 && p->n_k == 17) {
    /* dK is BHSD: its last element is at batch*h_kv*n_k*d_k - 1; one more is past its end. */
    const int64_t end = p->batch * p->h_kv * p->n_k * p->d_k;
    if (is_f64(dk))
      ((double*)dk->data)[end] = 0;
    else
      ((float*)dk->data)[end] = 0;
  }
  if (BACKWARD_MISTAKE == 3) put(d_o, 0, 0, 0, 0, get(d_o, 0, 0, 0, 0) + 1);
}

static int backward_test_run(const attnbench_call* p, char* error, size_t error_len) {
  if (p->window.left >= 0 || (p->window.right != 0 && p->window.right != ATTNBENCH_WINDOW_UNBOUNDED)) {
    snprintf(error, error_len, "a window other than causal or none");
    return 1;
  }
  /* w: one row's weights, then (the backward's) its dP. */
  double *w = malloc(sizeof(double) * (size_t)(2 * p->n_k + 1)), *dk_sum = malloc(sizeof(double) * (size_t)(p->n_k * p->d_k + 1)),
         *dv_sum = malloc(sizeof(double) * (size_t)(p->n_k * p->d_v + 1)), *dq_row = malloc(sizeof(double) * (size_t)(p->d_k + 1));
  const int ok = w != NULL && dk_sum != NULL && dv_sum != NULL && dq_row != NULL;
  if (!ok)
    snprintf(error, error_len, "out of memory");
  else if (p->operation == ATTNBENCH_OP_BACKWARD)
    backward(p, w, dk_sum, dv_sum, dq_row);
  else
    forward(p, w);
  free(w);
  free(dk_sum);
  free(dv_sum);
  free(dq_row);
  return ok ? 0 : 2;
}

static const attnbench_role_dtype backward_dtypes[] = {{ATTNBENCH_ROLE_DATA, {ATTNBENCH_DL_FLOAT, 32, 1}},
                                                       {ATTNBENCH_ROLE_DATA, {ATTNBENCH_DL_FLOAT, 64, 1}}};

static const attnbench_plugin_v2 backward_plugin = {
    ATTNBENCH_ABI_VERSION,
    sizeof(attnbench_plugin_v2),
    "backward_test",
    "1",
    "f32/f64 attention and its gradients in double (tests/plugins/backward_plugin.c)",
    {ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD) | ATTNBENCH_OP_BIT(ATTNBENCH_OP_BACKWARD),
     ATTNBENCH_FEATURE_CAUSAL_TOP_LEFT | ATTNBENCH_FEATURE_CAUSAL_BOTTOM_RIGHT | ATTNBENCH_FEATURE_PADDING_PER_BATCH |
         ATTNBENCH_FEATURE_GQA | ATTNBENCH_FEATURE_DIFFERENT_DK_DV | ATTNBENCH_FEATURE_LSE,
     ATTNBENCH_ACCEPTS_BHSD, ATTNBENCH_FULLY_MASKED_AS_ZEROS, backward_dtypes, 2, 1, 512, 0, NULL, ATTNBENCH_DL_CPU, 0, 0.0},
    NULL,
    backward_test_run,
    NULL,
};

ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v2* attnbench_plugin_get(uint32_t abi_version) {
  return abi_version == ATTNBENCH_ABI_VERSION ? &backward_plugin : NULL;
}

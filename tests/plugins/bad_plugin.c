/* Deliberately broken plugins for the isolation tests (tests/plugin_isolation.sh): the correct
 * example plugin (examples/plugins/c_cpu) with one defect each, chosen at build time by
 * BAD_PLUGIN_DEFECT. Each must be reported precisely while the run goes on.
 *   1 segfault:      dereferences NULL on the case with n_q == 17 (every other case is correct)
 *   2 past the end:  writes one element past the end of out
 *   3 last row:      leaves the last output row (last batch, last head, last query) unwritten
 *   4 hang:          never returns on the case with n_q == 17
 *   5 input:         modifies q (flips the first element's lowest bit) after computing */
#define attnbench_plugin_get correct_plugin_get
#include "abi_v1/c_cpu_plugin.c"
#undef attnbench_plugin_get

#ifndef BAD_PLUGIN_DEFECT
#error "define BAD_PLUGIN_DEFECT (1 to 5)"
#endif

#if BAD_PLUGIN_DEFECT == 2
static int64_t last_offset(const attnbench_tensor* t) {
  return offset_of(t, t->shape[0] - 1, t->shape[1] - 1, t->shape[2] - 1, t->shape[3] - 1);
}

static size_t element_bytes(int32_t dtype) {
  return dtype == ATTNBENCH_DTYPE_F64 ? 8 : dtype == ATTNBENCH_DTYPE_F32 ? 4 : dtype == ATTNBENCH_DTYPE_BOOL ? 1 : 2;
}
#endif

static int bad_run(const attnbench_problem* p, const attnbench_tensor* q, const attnbench_tensor* k, const attnbench_tensor* v,
                   const attnbench_tensor* out, const attnbench_tensor* lse, const attnbench_tensor* mask, const attnbench_tensor* bias,
                   char* error, size_t error_len) {
#if BAD_PLUGIN_DEFECT == 1
  if (p->n_q == 17) {
    volatile int* volatile nowhere = NULL;
    *nowhere = 1;
  }
#elif BAD_PLUGIN_DEFECT == 4
  if (p->n_q == 17) {
    volatile int forever = 1;
    while (forever) {
    }
  }
#endif
#if BAD_PLUGIN_DEFECT == 3
  row_context c = {p, q, k, v, out, lse, mask, bias, malloc(sizeof(long double) * (size_t)p->n_k), malloc((size_t)p->n_k)};
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->h_q; ++h)
      for (int64_t i = 0; i < p->n_q; ++i)
        if (!(b == p->batch - 1 && h == p->h_q - 1 && i == p->n_q - 1)) attend_row(&c, b, h, i);
  free(c.scores);
  free(c.visible);
  (void)error;
  (void)error_len;
  return 0;
#else
  const int status = c_cpu_run(p, q, k, v, out, lse, mask, bias, error, error_len);
#if BAD_PLUGIN_DEFECT == 2
  /* the element right after the last one (dense outputs end there) */
  memset((char*)out->data + (size_t)(last_offset(out) + 1) * element_bytes(out->dtype), 0, element_bytes(out->dtype));
#elif BAD_PLUGIN_DEFECT == 5
  ((unsigned char*)q->data)[0] ^= 1;
#endif
  return status;
#endif
}

static attnbench_plugin_v1 bad_plugin;

ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v1* attnbench_plugin_get(uint32_t abi_version) {
  const attnbench_plugin_v1* correct = correct_plugin_get(abi_version);
  if (correct == NULL) return NULL;
  bad_plugin = *correct;
  bad_plugin.name = "bad_plugin";
  bad_plugin.run = bad_run;
  return &bad_plugin;
}

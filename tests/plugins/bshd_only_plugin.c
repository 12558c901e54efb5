/* The correct example plugin (examples/plugins/c_cpu), declaring only the BSHD layout: attnbench
 * must hand it sequence-before-heads tensors and read its output back through the same strides
 * (tests/plugin_isolation.sh: every case passes, no input reads as modified). */
#define attnbench_plugin_get correct_plugin_get
#include "abi_v1/c_cpu_plugin.c"
#undef attnbench_plugin_get

static attnbench_plugin_v1 bshd_plugin;

/* The layout this plugin was handed last, checked on every call: BSHD strides, dense. */
static int bshd_run(const attnbench_problem* p, const attnbench_tensor* q, const attnbench_tensor* k, const attnbench_tensor* v,
                    const attnbench_tensor* out, const attnbench_tensor* lse, const attnbench_tensor* mask, const attnbench_tensor* bias,
                    char* error, size_t error_len) {
  const attnbench_tensor* views[] = {q, k, v, out};
  for (int t = 0; t < 4; ++t) {
    const int64_t* s = views[t]->shape;
    const int64_t* st = views[t]->strides;
    if (!(st[3] == 1 && st[1] == s[3] && st[2] == s[1] * s[3] && st[0] == s[2] * s[1] * s[3])) {
      snprintf(error, error_len, "tensor %d is not BSHD: strides %lld %lld %lld %lld", t, (long long)st[0], (long long)st[1],
               (long long)st[2], (long long)st[3]);
      return 1;
    }
  }
  return c_cpu_run(p, q, k, v, out, lse, mask, bias, error, error_len);
}

ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v1* attnbench_plugin_get(uint32_t abi_version) {
  const attnbench_plugin_v1* correct = correct_plugin_get(abi_version);
  if (correct == NULL) return NULL;
  bshd_plugin = *correct;
  bshd_plugin.name = "bshd_only";
  bshd_plugin.capabilities.layouts = ATTNBENCH_LAYOUT_BSHD;
  bshd_plugin.run = bshd_run;
  return &bshd_plugin;
}

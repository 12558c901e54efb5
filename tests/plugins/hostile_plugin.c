/* A hostile plugin for the isolation bounds (tests/plugin_hostile.sh): the correct example plugin
 * (examples/plugins/c_cpu) that, in the mode ATTN_HOSTILE_MODE names, attacks the machine the
 * harness runs on instead of the kernel's contract. Every mode but hang attacks only on the case
 * with n_q == 17 (tests/plugin_cases.txt: case 1), so the cases after it show that the run goes
 * on; hang attacks on every call.
 *   fork    starts a process that outlives the call (a sleeper), then computes correctly
 *   escape  the same from a grandchild in a session of its own (setsid; its parent exits), out of
 *           the worker's process group
 *   flood   writes 1 GiB to stdout (FLOOD-BEGIN first, FLOOD-END last), then returns status 1
 *   alloc   allocates 50 GiB in 64 MiB steps, touching every page, and writes through the NULL
 *           that the first refused step returns (no check, like careless code)
 *   hang    starts a sleeper, then never returns
 * A sleeper's argv[0] is ATTN_HOSTILE_MARKER (default attn_hostile_sleeper), so the test finds any
 * that survive with pgrep -f. ATTN_HOSTILE_NAME, when set, replaces the plugin's name (the name
 * clash checks). */
#define _GNU_SOURCE 1 /* fork, setsid, execv under -std=c11 */
#define attnbench_plugin_get correct_plugin_get
#include "abi_v1/c_cpu_plugin.c"
#undef attnbench_plugin_get

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile/hostile_common.h"

static void start_sleeper(void) {
  if (fork() == 0) become_sleeper();
}

static int flood(char* error, size_t error_len) {
  static char chunk[1 << 20];
  memset(chunk, 'x', sizeof chunk);
  for (size_t i = 63; i < sizeof chunk; i += 64) chunk[i] = '\n';
  const char begin[] = "FLOOD-BEGIN\n", end[] = "\nFLOOD-END\n";
  if (write(1, begin, sizeof begin - 1) < 0) return 3;
  size_t written = sizeof begin - 1;
  const size_t total = (size_t)1 << 30;
  while (written + sizeof end - 1 < total) {
    const size_t want = total - (sizeof end - 1) - written < sizeof chunk ? total - (sizeof end - 1) - written : sizeof chunk;
    for (size_t off = 0; off < want;) {
      const ssize_t n = write(1, chunk + off, want - off);
      if (n <= 0) return 3;
      off += (size_t)n;
    }
    written += want;
  }
  if (write(1, end, sizeof end - 1) < 0) return 3;
  snprintf(error, error_len, "wrote %zu bytes to stdout", written + sizeof end - 1);
  return 1;
}

static void allocate_without_bound(void) {
  const size_t step = (size_t)64 << 20;
  for (size_t total = 0; total < ((size_t)50 << 30); total += step) {
    volatile char* p = malloc(step);
    for (size_t i = 0; i < step; i += 4096) p[i] = 1; /* a NULL p faults here */
  }
}

static int hostile_run(const attnbench_problem* p, const attnbench_tensor* q, const attnbench_tensor* k, const attnbench_tensor* v,
                       const attnbench_tensor* out, const attnbench_tensor* lse, const attnbench_tensor* mask,
                       const attnbench_tensor* bias, char* error, size_t error_len) {
  if (is_mode("hang")) {
    start_sleeper();
    volatile int forever = 1;
    while (forever) {
    }
  }
  if (p->n_q == 17) {
    if (is_mode("fork")) start_sleeper();
    if (is_mode("escape")) start_escaped_sleeper();
    if (is_mode("flood")) return flood(error, error_len);
    if (is_mode("alloc")) allocate_without_bound();
  }
  return c_cpu_run(p, q, k, v, out, lse, mask, bias, error, error_len);
}

ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v1* attnbench_plugin_get(uint32_t abi_version) {
  const char* name = getenv("ATTN_HOSTILE_NAME");
  return hostile_plugin_get(abi_version, name != NULL ? name : "hostile_plugin", hostile_run);
}

/* A hostile plugin for the sandbox (issue 29; tests/plugin_sandbox.sh, README.md here): the
 * correct example plugin (tests/plugins/abi_v1/c_cpu_plugin.c) that, in the mode ATTN_HOSTILE_MODE
 * names, attacks the harness or the machine from inside its call, on the case with n_q == 17 only
 * (tests/plugin_cases.txt: case 1), so the cases around it show that the run goes on.
 *   kill_parent    kill(getppid(), SIGKILL), then computes correctly
 *   stop_parent    kill(getppid(), SIGSTOP), then computes correctly
 *   kill_group     kill(0, SIGKILL), then computes correctly
 *   stop_group     kill(0, SIGSTOP), then computes correctly
 *   write_outside  chdir("/"), then writes the file ATTN_HOSTILE_FILE names (an absolute path
 *                  outside the worker's scratch directory), then computes correctly
 *   setsid_crash   a grandchild sleeper in a session of its own (setsid; its parent exits), then a
 *                  write through NULL
 *   fork_bomb      up to 2000 children, each a sleeper (bounded, so that without a sandbox it
 *                  cannot take the machine down), stopping at the first refused fork, then
 *                  computes correctly
 *   late_writer    computes correctly, then leaves a detached thread writing NaN over out every
 *                  millisecond for 10 s, and returns at once
 *   close_fds      closes every descriptor from 0 to 1023 (the worker's channel included), then
 *                  computes correctly
 *   connect        a TCP socket connected to 127.0.0.1 port 9, then computes correctly
 * Every error of the attack itself is ignored: the sandbox refusing it is the point. A sleeper's
 * argv[0] is ATTN_HOSTILE_MARKER (default attn_hostile_sleeper), so the test finds any that survive
 * with pgrep -f. */
#define _GNU_SOURCE 1 /* fork, setsid, execv, kill under -std=c11 */
#define attnbench_plugin_get correct_plugin_get
#include "../abi_v1/c_cpu_plugin.c"
#undef attnbench_plugin_get

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hostile_common.h"

static void write_outside(void) {
  const char* path = getenv("ATTN_HOSTILE_FILE");
  if (chdir("/") != 0) { /* ignored: the write below is the attack */
  }
  if (path == NULL) return;
  FILE* f = fopen(path, "w");
  if (f == NULL) return;
  fputs("written by hostile_sandbox_plugin from inside the sandbox\n", f);
  fclose(f);
}

static void setsid_crash(void) {
  start_escaped_sleeper();
  volatile int* volatile nowhere = NULL;
  *nowhere = 1; /* SIGSEGV */
}

static void fork_bomb(void) {
  for (int i = 0; i < 2000; ++i) {
    const pid_t p = fork();
    if (p == 0) become_sleeper();
    if (p < 0) break;
  }
}

/* The output tensor as it was during the call (attnbench owns the struct only for the call; the
 * memory it points at is what the thread keeps writing). */
static attnbench_tensor late_out;

static void* late_writer_thread(void* unused) {
  (void)unused;
  const struct timespec millisecond = {0, 1000000};
  for (int tick = 0; tick < 10000; ++tick) {
    for (int64_t b = 0; b < late_out.shape[0]; ++b)
      for (int64_t h = 0; h < late_out.shape[1]; ++h)
        for (int64_t i = 0; i < late_out.shape[2]; ++i)
          for (int64_t x = 0; x < late_out.shape[3]; ++x) store(&late_out, b, h, i, x, (long double)NAN);
    nanosleep(&millisecond, NULL);
  }
  return NULL;
}

static void start_late_writer(const attnbench_tensor* out) {
  late_out = *out;
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  if (pthread_create(&thread, &attr, late_writer_thread, NULL) != 0) { /* ignored: a refused thread is no attack */
  }
  pthread_attr_destroy(&attr);
}

static void close_fds(void) {
  for (int fd = 0; fd < 1024; ++fd) close(fd);
}

static void connect_out(void) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return;
  struct sockaddr_in to;
  memset(&to, 0, sizeof to);
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s, (const struct sockaddr*)&to, sizeof to) != 0) { /* ignored: the attempt is the attack */
  }
  close(s);
}

static int hostile_run(const attnbench_problem* p, const attnbench_tensor* q, const attnbench_tensor* k, const attnbench_tensor* v,
                       const attnbench_tensor* out, const attnbench_tensor* lse, const attnbench_tensor* mask,
                       const attnbench_tensor* bias, char* error, size_t error_len) {
  if (p->n_q == 17) {
    if (is_mode("kill_parent")) kill(getppid(), SIGKILL);
    if (is_mode("stop_parent")) kill(getppid(), SIGSTOP);
    if (is_mode("kill_group")) kill(0, SIGKILL);
    if (is_mode("stop_group")) kill(0, SIGSTOP);
    if (is_mode("write_outside")) write_outside();
    if (is_mode("setsid_crash")) setsid_crash();
    if (is_mode("fork_bomb")) fork_bomb();
    if (is_mode("close_fds")) close_fds();
    if (is_mode("connect")) connect_out();
    if (is_mode("late_writer")) {
      const int status = c_cpu_run(p, q, k, v, out, lse, mask, bias, error, error_len);
      start_late_writer(out);
      return status;
    }
  }
  return c_cpu_run(p, q, k, v, out, lse, mask, bias, error, error_len);
}

ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v1* attnbench_plugin_get(uint32_t abi_version) {
  return hostile_plugin_get(abi_version, "hostile_sandbox_plugin", hostile_run);
}

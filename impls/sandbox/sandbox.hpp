#pragma once
// The sandbox every worker that runs untrusted code (a plugin, a Python callable, a peers program) lives in.
// Two halves, because the bounds are set up on both sides of the fork:
//   - spawn_sandboxed (the harness): the child in a PID namespace (under a process 1 of the
//     sandbox's: what it starts cannot outlive it, and nothing outside is visible to signal) and a
//     network namespace (no interface but a down loopback), with a user namespace where the
//     harness is not root;
//   - confine (the child, before it loads untrusted code): Landlock (write only to the scratch
//     directory and to device files), seccomp (no signal to another process, no tracing, no new
//     process, no socket but AF_UNIX, the channel descriptor kept), each refused call reported.
// A bound that cannot be set up on the machine is listed with its reason, never dropped silently.
// README.md in this folder states the policy and what each bound does.
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace attn::sandbox {

// One bound and whether it holds.
struct Bound {
  std::string name;    // "pid namespace", "seccomp", ...
  bool applied = false;
  std::string detail;  // what it does, or why it could not be set up
};

// The bounds a worker runs under, in one line: "pid namespace, network namespace, seccomp,
// landlock; unavailable: user namespace (...)". "off (--sandbox=off)" when disabled.
std::string describe(const std::vector<Bound>& bounds);

// The harness side: fork() into new PID, mount and network namespaces (a user namespace too where
// the caller lacks CAP_SYS_ADMIN). Returns as fork does: 0 in the worker, which the harness's side
// must exec or _exit after only async-signal-safe calls (unless the caller is single-threaded, as
// the Python package's forked worker is); the namespaces' bounds go in `bounds`. The worker is
// process 2 there, with a /proc of its own; process 1 (the returned pid) reaps, and when the
// worker ends passes on its wait status on status_fd and exits, which ends the namespace:
// wait_for_worker waits and says how the worker ended. Where namespaces cannot be made, a plain fork
// (status_fd -1), with the reason in `bounds`.
pid_t spawn_sandboxed(std::vector<Bound>& bounds, int& status_fd);

// Waits for the pid spawn_sandboxed (or a plain fork) returned and says how the worker ended, a
// wait status: what process 1 passed on status_fd (closed and set to -1 here), else the pid's
// own (killed before the worker ended, or a plain fork). -1 when waitpid fails (errno says why).
int wait_for_worker(pid_t pid, int& status_fd);

// The environment a sandboxed program gets: the harness's, with TMPDIR and the frameworks' caches
// (CUDA's, Triton's, TorchInductor's, XDG_CACHE_HOME) pointing into its scratch directory, the
// only place it may write. As "NAME=value" strings, built before a fork.
std::vector<std::string> scratch_environment(const std::string& scratch_dir);

// How a program the harness ran ended.
struct ProgramEnd {
  std::optional<int> exit_code;  // when it exited
  std::optional<int> signal;     // when a signal ended it
  std::string start_error;       // when it could not be started (or its sandbox could not be applied)
};

// Runs `shell_command` through /bin/sh -c (stdin, stdout and stderr the harness's) and waits for it:
// a program the harness runs (bench --peers). Sandboxed, it runs in spawn_sandboxed's PID, mount
// and network namespaces (whatever it starts dies with it; no network), and Landlock lets it write
// only under scratch_dir, to device files and to its own /proc entries (a command that is one
// program is exec'd by the shell, so that they are the program's: the CUDA driver writes there);
// TMPDIR and the frameworks' caches point into scratch_dir. No seccomp filter: a shell and the
// frameworks it runs start processes and programs, and outside its PID namespace there is no
// process to signal or trace.
ProgramEnd run_program(const std::string& shell_command, const std::string& scratch_dir, bool sandboxed, std::vector<Bound>& bounds);

// A scratch directory for one worker (mkdtemp under TMPDIR or /tmp) and its removal.
std::string make_scratch_directory();
void remove_scratch_directory(const std::string& path);

// What the child confines itself to. channel_fd: its descriptor to the harness, which no call may
// close or replace.
struct Policy {
  std::string scratch_dir;
  int channel_fd = -1;
  std::string who = "plugin";            // names the code in each refusal: "the sandbox refused the plugin's ..."
  std::string off_switch = "--sandbox=off";  // how to run without it, named where a refusal may be the kernel's need
};

// The child side, before loading untrusted code: no new privileges, Landlock, seccomp with a
// SIGSYS handler that refuses and records each forbidden call. Returns the bounds it set.
std::vector<Bound> confine(const Policy& policy);

// The calls the sandbox refused since the last take (one message each, repeats counted), e.g.
// "the sandbox refused the plugin's kill(0, SIGKILL) (pid 0: its own process group; a plugin may
// signal only itself)". Not async-signal-safe: call it between calls.
std::vector<std::string> take_refusals();

// While a call runs, refusals are also copied here (a page the harness reads after a crash); null
// to stop. The text is NUL-terminated and truncated to `size`.
void mirror_refusals(char* buffer, std::size_t size);

}  // namespace attn::sandbox

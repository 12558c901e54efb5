#include "impls/sandbox/sandbox.hpp"

#include <fcntl.h>
#include <ftw.h>
#include <linux/landlock.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#if ATTN_HAVE_SECCOMP
#include <seccomp.h>
#endif

namespace attn::sandbox {
namespace {

// ---- the refusals: recorded by the SIGSYS handler (async-signal-safe), read between calls ----

constexpr int kKinds = 16;          // distinct refusals kept per call; more are counted only
constexpr std::size_t kText = 320;  // each one's message

struct Refusal {
  long key = 0;  // syscall number and, for signals, the signal: repeats of one attack are one line
  long count = 0;
  char text[kText] = {};
};

Refusal refusals[kKinds];
std::atomic<int> refusal_kinds{0};
std::atomic<long> refusals_dropped{0};
std::atomic_flag refusal_lock = ATOMIC_FLAG_INIT;
char* mirror = nullptr;
std::size_t mirror_size = 0;
char scratch_path[512] = {};
char who_text[48] = "the sandbox refused the plugin's ";
char off_switch[48] = "--sandbox=off";
int channel_descriptor = -1;
long bypass = 0;  // the 6th argument with which the handler re-issues a trapped open (random)

// A tiny appender for the handler (no allocation, no stdio).
struct Text {
  char* out;
  std::size_t size;
  std::size_t n = 0;
  void add(const char* s) {
    while (s != nullptr && *s != '\0' && n + 1 < size) out[n++] = *s++;
    out[n] = '\0';
  }
  void add_long(long v) {
    char digits[24];
    int i = 0;
    const bool negative = v < 0;
    unsigned long u = negative ? 0ul - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
    do {
      digits[i++] = char('0' + u % 10);
      u /= 10;
    } while (u != 0 && i < 22);
    if (negative) digits[i++] = '-';
    char reversed[24];
    for (int j = 0; j < i; ++j) reversed[j] = digits[i - 1 - j];
    reversed[i] = '\0';
    add(reversed);
  }
  // A string from the plugin's memory, bounded and printable.
  void add_user_string(const char* s, std::size_t limit = 160) {
    if (s == nullptr) return add("(null)");
    std::size_t k = 0;
    for (; s[k] != '\0' && k < limit && n + 1 < size; ++k) {
      const auto c = static_cast<unsigned char>(s[k]);
      out[n++] = c >= 0x20 && c < 0x7f ? char(c) : '?';
    }
    out[n] = '\0';
    if (s[k] != '\0') add("...");
  }
};

const char* signal_name(long sig) {
  switch (sig) {
    case 0: return "signal 0";
    case SIGKILL: return "SIGKILL";
    case SIGSTOP: return "SIGSTOP";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGTSTP: return "SIGTSTP";
    case SIGCONT: return "SIGCONT";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return nullptr;
  }
}

void record(long key, const char* text) {
  while (refusal_lock.test_and_set(std::memory_order_acquire)) {
  }
  const int kinds = refusal_kinds.load(std::memory_order_relaxed);
  int at = -1;
  for (int i = 0; i < kinds; ++i)
    if (refusals[i].key == key) at = i;
  if (at < 0 && kinds < kKinds) {
    at = kinds;
    refusals[at].key = key;
    refusals[at].count = 0;
    Text t{refusals[at].text, kText};
    t.add(text);
    refusal_kinds.store(kinds + 1, std::memory_order_relaxed);
    if (mirror != nullptr && mirror_size > 0) {
      Text m{mirror, mirror_size, ::strnlen(mirror, mirror_size - 1)};
      if (m.n > 0) m.add("; ");
      m.add(text);
    }
  }
  if (at >= 0)
    ++refusals[at].count;
  else
    refusals_dropped.fetch_add(1, std::memory_order_relaxed);
  refusal_lock.clear(std::memory_order_release);
}

void describe_signal(Text& t, const char* call, long target, long sig, bool group_semantics) {
  t.add(who_text);
  t.add(call);
  t.add("(");
  t.add_long(target);
  t.add(", ");
  if (const char* name = signal_name(sig))
    t.add(name);
  else
    t.add_long(sig);
  t.add(")");
  if (group_semantics && target == 0) t.add(" (pid 0: its process group)");
  if (group_semantics && target == -1) t.add(" (pid -1: every process it may signal)");
  if (group_semantics && target < -1) t.add(" (a process group)");
  t.add(": it may signal only itself");
}

long raw(long nr, long a0, long a1, long a2, long a3, long a4, long a5) {
  const long r = ::syscall(nr, a0, a1, a2, a3, a4, a5);
  return r < 0 ? -errno : r;
}

#if defined(__x86_64__)
void on_sigsys(int, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  auto* uc = static_cast<ucontext_t*>(context);
  greg_t* r = uc->uc_mcontext.gregs;
  const long nr = info->si_syscall;
  const long a0 = r[REG_RDI], a1 = r[REG_RSI], a2 = r[REG_RDX], a3 = r[REG_R10], a4 = r[REG_R8];
  long result = -EPERM;
  char buffer[kText];
  Text t{buffer, sizeof buffer};
  long key = nr;
  switch (nr) {
    case SYS_open:
    case SYS_openat:
    case SYS_creat: {
      // Re-issued past the trap: Landlock decides; a refusal by it is reported with the path.
      result = raw(nr, a0, a1, a2, a3, a4, bypass);
      if (result != -EACCES && result != -EPERM) break;
      const char* path = reinterpret_cast<const char*>(nr == SYS_openat ? a1 : a0);
      t.add(who_text);
      t.add("open of ");
      t.add_user_string(path);
      if (path != nullptr && path[0] != '/') {
        char cwd[256];
        if (::syscall(SYS_getcwd, cwd, sizeof cwd) > 0) {
          t.add(" (relative to ");
          t.add(cwd);
          t.add(")");
        }
      }
      t.add(" for writing: only its scratch directory ");
      t.add(scratch_path);
      t.add(" is writable");
      key = nr * 1000 + 1;
      record(key, buffer);
      break;
    }
    case SYS_kill:
      describe_signal(t, "kill", a0, a1, true);
      key = nr * 1000 + a1;
      record(key, buffer);
      break;
    case SYS_tgkill:
      describe_signal(t, "tgkill", a0, a2, false);
      key = nr * 1000 + a2;
      record(key, buffer);
      break;
    case SYS_tkill:
      describe_signal(t, "tkill", a0, a1, false);
      key = nr * 1000 + a1;
      record(key, buffer);
      break;
    case SYS_rt_sigqueueinfo:
    case SYS_rt_tgsigqueueinfo:
      describe_signal(t, nr == SYS_rt_sigqueueinfo ? "rt_sigqueueinfo" : "rt_tgsigqueueinfo", a0, nr == SYS_rt_sigqueueinfo ? a1 : a2, false);
      record(key, buffer);
      break;
    case SYS_pidfd_send_signal:
    case SYS_pidfd_open:
      t.add(who_text);
      t.add(nr == SYS_pidfd_open ? "pidfd_open(" : "pidfd_send_signal(");
      t.add_long(a0);
      t.add("): it may signal only itself");
      record(key, buffer);
      break;
    case SYS_ptrace:
    case SYS_process_vm_readv:
    case SYS_process_vm_writev:
      t.add(who_text);
      t.add(nr == SYS_ptrace ? "ptrace" : nr == SYS_process_vm_readv ? "process_vm_readv" : "process_vm_writev");
      t.add("(): no tracing or reading of other processes");
      record(key, buffer);
      break;
    case SYS_clone:
    case SYS_fork:
    case SYS_vfork:
      t.add(who_text);
      t.add(nr == SYS_clone ? "clone" : nr == SYS_fork ? "fork" : "vfork");
      t.add("() of a new process (fork, posix_spawn, system, popen): no new process in the sandbox (threads are allowed; ");
      t.add(off_switch);
      t.add(" lifts this)");
      key = SYS_clone;  // fork, vfork and clone are one attack
      record(key, buffer);
      result = -EAGAIN;
      break;
    case SYS_execve:
    case SYS_execveat:
      t.add(who_text);
      t.add("execve of ");
      t.add_user_string(reinterpret_cast<const char*>(nr == SYS_execve ? a0 : a1));
      t.add(": a plugin runs no other program");
      record(key, buffer);
      break;
    case SYS_socket:
      t.add(who_text);
      t.add("socket(");
      if (a0 == AF_INET)
        t.add("AF_INET");
      else if (a0 == AF_INET6)
        t.add("AF_INET6");
      else if (a0 == AF_NETLINK)
        t.add("AF_NETLINK");
      else if (a0 == AF_PACKET)
        t.add("AF_PACKET");
      else
        t.add_long(a0);
      t.add("): no network in the sandbox");
      key = nr * 1000 + a0;
      record(key, buffer);
      result = -EACCES;
      break;
    case SYS_close:
    case SYS_close_range:
    case SYS_dup2:
    case SYS_dup3:
      t.add(who_text);
      t.add(nr == SYS_close ? "close" : nr == SYS_close_range ? "close_range" : nr == SYS_dup2 ? "dup2" : "dup3");
      t.add(nr == SYS_close || nr == SYS_close_range ? " of descriptor " : " onto descriptor ");
      t.add_long(channel_descriptor);
      t.add(" (the worker's channel to attnbench): a plugin closes only what it opened");
      key = SYS_close;
      record(key, buffer);
      if (nr == SYS_close_range) {  // the rest of the range is closed, the channel kept
        if (a0 < channel_descriptor) raw(SYS_close_range, a0, channel_descriptor - 1, a2, 0, 0, 0);
        if (a1 > channel_descriptor) raw(SYS_close_range, channel_descriptor + 1, a1, a2, 0, 0, 0);
        result = 0;
      } else {
        result = nr == SYS_close ? 0 : -EBADF;
      }
      break;
    default:
      t.add(who_text);
      t.add("system call ");
      t.add_long(nr);
      record(key, buffer);
      break;
  }
  r[REG_RAX] = result;
  errno = saved_errno;
}
#endif

bool write_whole(const char* path, const char* text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const std::size_t n = std::strlen(text);
  const bool ok = ::write(fd, text, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

// ---- Landlock (raw system calls: Debian 12 has no library for it) ----

constexpr std::uint64_t landlock_refer = 1ull << 13, landlock_truncate = 1ull << 14;  // ABI 2 and 3 (newer than Debian 12's header)

// A ruleset that handles every kind of write and allows them all under the scratch directory and
// the opening for writing of device files under /dev (/dev/null, a GPU's /dev/nvidia*), never
// their creation. The caller adds its /proc rule (landlock_allow, async-signal-safe) and applies it.
struct Ruleset {
  int fd = -1;
  long abi = 0;
  std::uint64_t file_writes = 0;  // writing into an existing file (and truncating it, ABI >= 3)
  std::string error;              // why there is none: "unavailable: ..."
};

// 0, or the errno of the failed call. Raw system calls only: safe between fork and exec.
int landlock_allow(int ruleset, const char* path, std::uint64_t access) {
  landlock_path_beneath_attr rule{};
  rule.allowed_access = access;
  rule.parent_fd = ::open(path, O_PATH | O_CLOEXEC);
  if (rule.parent_fd < 0) return errno;
  const long r = ::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
  const int e = errno;
  ::close(rule.parent_fd);
  return r == 0 ? 0 : e;
}

Ruleset landlock_ruleset(const std::string& scratch) {
  Ruleset set;
  set.abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (set.abi < 0) {
    set.error = errno == ENOSYS       ? "unavailable: this kernel has no Landlock"
                : errno == EOPNOTSUPP ? "unavailable: Landlock is disabled on this kernel (boot option lsm=)"
                                      : fmt::format("unavailable: landlock_create_ruleset failed: {}", std::strerror(errno));
    return set;
  }
  std::uint64_t writes = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
                         LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                         LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
                         LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (set.abi >= 2) writes |= landlock_refer;
  if (set.abi >= 3) writes |= landlock_truncate;
  set.file_writes = LANDLOCK_ACCESS_FS_WRITE_FILE | (set.abi >= 3 ? landlock_truncate : 0);
  struct {
    std::uint64_t handled_access_fs;
  } attr{writes};
  set.fd = int(::syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0));
  if (set.fd < 0) {
    set.error = fmt::format("unavailable: landlock_create_ruleset failed: {}", std::strerror(errno));
    return set;
  }
  for (const auto& [path, access] : {std::pair{scratch.c_str(), writes}, std::pair{"/dev", set.file_writes}})
    if (const int e = landlock_allow(set.fd, path, access); e != 0) {
      set.error = fmt::format("unavailable: landlock_add_rule({}): {}", path, std::strerror(e));
      ::close(set.fd);
      set.fd = -1;
      return set;
    }
  return set;
}

Bound apply_landlock(const std::string& scratch) {
  Bound b{"landlock", false, ""};
  Ruleset set = landlock_ruleset(scratch);
  if (set.fd < 0) {
    b.detail = set.error;
    return b;
  }
  // Its own /proc entries: the CUDA driver names its threads (/proc/self/task/TID/comm).
  std::string failed;
  if (const int e = landlock_allow(set.fd, "/proc/self", set.file_writes); e != 0)
    failed = fmt::format("landlock_add_rule(/proc/self): {}", std::strerror(e));
  if (failed.empty() && ::syscall(SYS_landlock_restrict_self, set.fd, 0) != 0)
    failed = fmt::format("landlock_restrict_self: {}", std::strerror(errno));
  ::close(set.fd);
  if (!failed.empty()) {
    b.detail = "unavailable: " + failed;
    return b;
  }
  b.applied = true;
  b.detail = fmt::format("writes only under {} (and to device files under /dev); reads anywhere (Landlock ABI {})", scratch, set.abi);
  return b;
}

// ---- seccomp (libseccomp) ----

Bound apply_seccomp(int channel) {
  Bound b{"seccomp", false, ""};
#if !ATTN_HAVE_SECCOMP
  (void)channel;
  b.detail = "unavailable: this attnbench was built without libseccomp (Debian: libseccomp-dev)";
  return b;
#elif !defined(__x86_64__)
  (void)channel;
  b.detail = "unavailable: the refusal handler is written for x86-64 only";
  return b;
#else
  struct sigaction action{};
  action.sa_sigaction = on_sigsys;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGSYS, &action, nullptr) != 0) {
    b.detail = fmt::format("unavailable: sigaction(SIGSYS): {}", std::strerror(errno));
    return b;
  }
  if (getrandom(&bypass, sizeof bypass, 0) != sizeof bypass || bypass == 0) bypass = 0x5eedbeefL ^ long(getpid());
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) {
    b.detail = "unavailable: seccomp_init failed";
    return b;
  }
  const std::uint64_t self = std::uint64_t(getpid());
  int rc = 0;
  auto trap = [&](int nr, unsigned count, auto... conditions) {
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_TRAP, nr, count, conditions...);
  };
  // Signals: only to this process itself (raise, abort, pthread_kill use tgkill on it).
  trap(SCMP_SYS(kill), 1, SCMP_A0(SCMP_CMP_NE, self));
  trap(SCMP_SYS(tgkill), 1, SCMP_A0(SCMP_CMP_NE, self));
  trap(SCMP_SYS(tkill), 0);
  trap(SCMP_SYS(rt_sigqueueinfo), 1, SCMP_A0(SCMP_CMP_NE, self));
  trap(SCMP_SYS(rt_tgsigqueueinfo), 1, SCMP_A0(SCMP_CMP_NE, self));
  trap(SCMP_SYS(pidfd_send_signal), 0);
  trap(SCMP_SYS(pidfd_open), 0);
  trap(SCMP_SYS(ptrace), 0);
  trap(SCMP_SYS(process_vm_readv), 0);
  trap(SCMP_SYS(process_vm_writev), 0);
  // Processes: threads only (clone with CLONE_THREAD); clone3's arguments are out of a filter's
  // reach, so it answers ENOSYS and glibc falls back to clone.
  trap(SCMP_SYS(fork), 0);
  trap(SCMP_SYS(vfork), 0);
  trap(SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  trap(SCMP_SYS(execve), 0);
  trap(SCMP_SYS(execveat), 0);
  // Network: local sockets only.
  trap(SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  // The channel to the harness stays open and stays itself.
  const auto fd = std::uint64_t(channel);
  trap(SCMP_SYS(close), 1, SCMP_A0(SCMP_CMP_EQ, fd));
  trap(SCMP_SYS(close_range), 2, SCMP_A0(SCMP_CMP_LE, fd), SCMP_A1(SCMP_CMP_GE, fd));
  trap(SCMP_SYS(dup2), 1, SCMP_A1(SCMP_CMP_EQ, fd));
  trap(SCMP_SYS(dup3), 1, SCMP_A1(SCMP_CMP_EQ, fd));
  // Opens for writing go through the handler, which re-issues them (Landlock decides) and names
  // the path Landlock refused; openat2's flags are out of reach: ENOSYS, glibc does not need it.
  const auto key = std::uint64_t(bypass);
  for (const std::uint64_t flag : {std::uint64_t(O_WRONLY), std::uint64_t(O_RDWR), std::uint64_t(O_CREAT)}) {
    trap(SCMP_SYS(open), 2, SCMP_A1(SCMP_CMP_MASKED_EQ, flag, flag), SCMP_A5(SCMP_CMP_NE, key));
    trap(SCMP_SYS(openat), 2, SCMP_A2(SCMP_CMP_MASKED_EQ, flag, flag), SCMP_A5(SCMP_CMP_NE, key));
  }
  trap(SCMP_SYS(creat), 1, SCMP_A5(SCMP_CMP_NE, key));
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0);
  if (rc == 0) rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc != 0) {
    b.detail = fmt::format("unavailable: libseccomp failed: {}", std::strerror(-rc));
    return b;
  }
  b.applied = true;
  b.detail = "no signal to another process, no tracing, no new process or program (threads allowed), no socket but AF_UNIX, the "
             "channel descriptor kept; each refused call is named in the case's failure";
  return b;
#endif
}

}  // namespace

std::string describe(const std::vector<Bound>& bounds) {
  std::vector<std::string> on, off;
  for (const Bound& b : bounds) (b.applied ? on : off).push_back(b.applied ? b.name : fmt::format("{} ({})", b.name, b.detail));
  if (on.empty() && off.empty()) return "off";
  std::string text = on.empty() ? "none" : fmt::format("{}", fmt::join(on, ", "));
  if (!off.empty()) text += fmt::format("; unavailable: {}", fmt::join(off, "; "));
  return text;
}

namespace {

// A /proc of the new PID namespace, in its own mount namespace (nothing propagating back): the
// process IDs the worker gets from the kernel then name its entries there. Async-signal-safe.
bool mount_own_proc() {
  return ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
         ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0;
}

// Process 1 of a sandbox's PID namespace once it started the worker (process 2): reaps whatever
// ends in the namespace until the worker does, passes on the worker's wait status on status_fd and
// exits, which ends every other process in the namespace. The worker is not process 1 itself: a
// process 1 is not ended by a signal it sends itself (abort()'s SIGABRT is discarded, and abort()
// then faults: a SIGSEGV reported where the plugin aborted). Async-signal-safe.
[[noreturn]] void serve_as_init(pid_t worker, int status_fd) {
  // Nothing of the harness's stays open here: the worker's socket and pipes close when it ends.
  if (status_fd > 0) ::syscall(SYS_close_range, 0u, unsigned(status_fd - 1), 0u);
  ::syscall(SYS_close_range, unsigned(status_fd + 1), ~0u, 0u);
  int status = 0;
  for (;;) {
    int s = 0;
    const pid_t r = ::waitpid(-1, &s, 0);
    if (r == worker) {
      status = s;
      break;
    }
    if (r < 0 && errno != EINTR) ::_exit(125);
  }
  [[maybe_unused]] const auto written = ::write(status_fd, &status, sizeof status);
  ::_exit(0);
}

}  // namespace

pid_t spawn_sandboxed(std::vector<Bound>& bounds, int& status_fd) {
  status_fd = -1;
  // Everything the child writes is formatted here: between fork and exec only async-signal-safe calls.
  char uid_map[64], gid_map[64];
  std::snprintf(uid_map, sizeof uid_map, "0 %u 1\n", unsigned(getuid()));
  std::snprintf(gid_map, sizeof gid_map, "0 %u 1\n", unsigned(getgid()));
  // Process 1 says on this pipe whether its /proc is its own (one byte, before it starts the
  // worker), and later the worker's wait status.
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    bounds.push_back({"pid namespace", false, fmt::format("pipe2 failed: {}", std::strerror(errno))});
    return ::fork();
  }
  // The bounds as they will be when the namespaces are made, for both sides (the worker's may not
  // allocate): without and with a user namespace.
  std::vector<Bound> granted = bounds;
  granted.push_back({"pid namespace", true,
                     "its own PID namespace, with its own /proc, under a process 1 that reaps and passes on how it ended: what it "
                     "starts dies with it; no process outside is visible"});
  granted.push_back({"network namespace", true, "no network interface but a loopback that is down"});
  std::vector<Bound> granted_with_user = granted;
  granted_with_user.push_back({"user namespace", true, ""});
  const long flags = SIGCHLD | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET;
  // The raw system call with no stack of its own: a fork into new namespaces.
  long pid = ::syscall(SYS_clone, flags, nullptr, nullptr, nullptr, nullptr);
  const int privileged_errno = pid < 0 ? errno : 0;
  bool user = false;
  if (pid < 0) {
    granted_with_user.back().detail = fmt::format("mapped to uid {} (needed: {})", getuid(), std::strerror(privileged_errno));
    pid = ::syscall(SYS_clone, flags | CLONE_NEWUSER, nullptr, nullptr, nullptr, nullptr);
    user = true;
  }
  if (pid == 0) {
    ::close(ready[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the namespace ends with the harness
    if (user) {
      write_whole("/proc/self/setgroups", "deny");
      write_whole("/proc/self/uid_map", uid_map);
      write_whole("/proc/self/gid_map", gid_map);
    }
    // A /proc of its own PID namespace (in a mount namespace of its own, nothing propagating
    // back): the process IDs the worker gets from the kernel then name its entries there, as the
    // CUDA driver expects (it writes /proc/self/task/TID/comm; with the harness's /proc it fails
    // with cudaErrorOperatingSystem, seen on an H200).
    const bool own_proc = mount_own_proc();
    const char byte = own_proc ? 1 : 0;
    if (::write(ready[1], &byte, 1) != 1 || !own_proc) ::_exit(125);
    // glibc's fork without its handlers (async-signal-safe): the worker's thread ID is its own.
    const pid_t worker = ::_Fork();
    if (worker != 0) {
      if (worker < 0) ::_exit(125);
      serve_as_init(worker, ready[1]);
    }
    bounds.swap(user ? granted_with_user : granted);
    return 0;
  }
  ::close(ready[1]);
  char byte = 0;
  const bool own_proc = pid > 0 && ::read(ready[0], &byte, 1) == 1 && byte == 1;
  if (pid > 0 && own_proc) {
    status_fd = ready[0];
    bounds.swap(user ? granted_with_user : granted);
    return pid_t(pid);
  }
  ::close(ready[0]);
  std::string why;
  if (pid > 0) {  // namespaces, but no /proc of its own: not a worker CUDA (or anything reading /proc) can run in
    ::waitpid(pid_t(pid), nullptr, 0);
    why = "mounting a /proc for the new PID namespace was refused";
  } else {
    why = fmt::format("clone(CLONE_NEWPID) failed: {}; with a user namespace too: {}", std::strerror(privileged_errno), std::strerror(errno));
  }
  bounds.push_back({"pid namespace", false, why});
  bounds.push_back({"network namespace", false, "made with the same clone"});
  return ::fork();
}

int wait_for_worker(pid_t pid, int& status_fd) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      const int e = errno;
      if (status_fd >= 0) ::close(status_fd);
      status_fd = -1;
      errno = e;
      return -1;
    }
  if (status_fd < 0) return status;
  int passed_on = 0;
  ssize_t n;
  while ((n = ::read(status_fd, &passed_on, sizeof passed_on)) < 0 && errno == EINTR) {
  }
  ::close(status_fd);
  status_fd = -1;
  return n == sizeof passed_on ? passed_on : status;
}

namespace {

// Whether a shell command is one program with its arguments (words, single-quoted strings), which
// the shell may exec in its place: no operator, redirection, expansion or assignment.
bool is_one_program(const std::string& command) {
  bool quoted = false, first_word = true, in_word = false;
  for (const char c : command) {
    if (quoted) {
      quoted = c != '\'';
      continue;
    }
    if (c == '\'') {
      quoted = in_word = true;
      continue;
    }
    if (c == ' ' || c == '\t') {
      first_word = first_word && !in_word;
      in_word = false;
      continue;
    }
    if (std::strchr(";&|<>()$`\\\"*?[]{}~#!\n", c) != nullptr || (first_word && c == '=')) return false;
    in_word = true;
  }
  return !quoted;
}

}  // namespace

ProgramEnd run_program(const std::string& shell_command, const std::string& scratch_dir, bool sandboxed, std::vector<Bound>& bounds) {
  ProgramEnd end;
  // Everything the child needs is prepared here: between fork and exec only async-signal-safe calls.
  std::vector<std::string> env_strings;
  if (sandboxed)
    env_strings = scratch_environment(scratch_dir);
  else
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  // A command that is one program takes the shell's place (exec), so that the /proc entries it may
  // write are its own.
  std::string shell = "/bin/sh", dash_c = "-c", command = sandboxed && is_one_program(shell_command) ? "exec " + shell_command : shell_command;
  char* argv[] = {shell.data(), dash_c.data(), command.data(), nullptr};

  Ruleset rules;
  if (sandboxed) {
    rules = landlock_ruleset(scratch_dir);
    if (rules.fd < 0) bounds.push_back({"landlock", false, rules.error});
  }
  // The child reports a failure before exec here; an exec that succeeds closes it empty.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    end.start_error = fmt::format("pipe2 failed: {}", std::strerror(errno));
    if (rules.fd >= 0) ::close(rules.fd);
    return end;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  int status_fd = -1;
  const pid_t pid = sandboxed ? spawn_sandboxed(bounds, status_fd) : ::fork();
  if (pid == 0) {
    ::close(report[0]);
    auto die = [&](const char* what, int e) {
      const char* why = strerrorname_np(e);  // a constant string ("EACCES"): no allocation, no locale
      [[maybe_unused]] auto w = ::write(report[1], what, std::strlen(what));
      w = ::write(report[1], ": ", 2);
      w = ::write(report[1], why, std::strlen(why));
      ::_exit(127);
    };
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the harness (or the sandbox's process 1)
    if (rules.fd >= 0) {
      // Its own entries in its namespace's /proc (this process's, which the program becomes when
      // the shell execs it): the CUDA driver names its threads there. Not all of /proc: /proc/sys
      // is the machine's, and writable by root.
      if (const int e = landlock_allow(rules.fd, "/proc/self", rules.file_writes); e != 0) die("landlock_add_rule(/proc/self)", e);
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("prctl(PR_SET_NO_NEW_PRIVS)", errno);
      if (::syscall(SYS_landlock_restrict_self, rules.fd, 0) != 0) die("landlock_restrict_self", errno);
      ::close(rules.fd);
    }
    ::execve(argv[0], argv, envp.data());
    die("execve(/bin/sh)", errno);
  }
  ::close(report[1]);
  if (rules.fd >= 0) ::close(rules.fd);
  if (pid < 0) {
    end.start_error = fmt::format("fork failed: {}", std::strerror(errno));
    ::close(report[0]);
    return end;
  }
  char text[256];
  ssize_t n;
  std::string failure;
  while ((n = ::read(report[0], text, sizeof text)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) failure.append(text, std::size_t(n));
  ::close(report[0]);
  if (rules.fd >= 0 && failure.empty())
    bounds.push_back({"landlock", true,
                      fmt::format("writes only under {}, to device files under /dev and to its own /proc entries; reads anywhere "
                                  "(Landlock ABI {})",
                                  scratch_dir, rules.abi)});
  const int status = wait_for_worker(pid, status_fd);
  if (status < 0) {
    end.start_error = fmt::format("waitpid failed: {}", std::strerror(errno));
  } else if (!failure.empty()) {
    end.start_error = failure;
  } else if (WIFEXITED(status)) {
    end.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    end.signal = WTERMSIG(status);
  }
  return end;
}

std::vector<std::string> scratch_environment(const std::string& scratch_dir) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const char* name : {"TMPDIR", "CUDA_CACHE_PATH", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME"}) {
    std::erase_if(env, [&](const std::string& e) { return e.rfind(std::string(name) + "=", 0) == 0; });
    env.push_back(fmt::format("{}={}", name, scratch_dir));
  }
  return env;
}

std::string make_scratch_directory() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = fmt::format("{}/attnbench-sandbox-XXXXXX", base != nullptr && *base != '\0' ? base : "/tmp");
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error(fmt::format("cannot create the plugin worker's scratch directory {}: {}", pattern, std::strerror(errno)));
  return pattern;
}

void remove_scratch_directory(const std::string& path) {
  if (path.empty()) return;
  ::nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        ::remove(p);
        return 0;  // on with the rest
      },
      16,
      FTW_DEPTH | FTW_PHYS);
}


std::vector<Bound> confine(const Policy& policy) {
  std::vector<Bound> bounds;
  std::snprintf(scratch_path, sizeof scratch_path, "%s", policy.scratch_dir.c_str());
  std::snprintf(who_text, sizeof who_text, "the sandbox refused the %s's ", policy.who.c_str());
  std::snprintf(off_switch, sizeof off_switch, "%s", policy.off_switch.c_str());
  channel_descriptor = policy.channel_fd;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    const std::string why = fmt::format("unavailable: prctl(PR_SET_NO_NEW_PRIVS): {}", std::strerror(errno));
    return {{"landlock", false, why}, {"seccomp", false, why}};
  }
  bounds.push_back(apply_landlock(policy.scratch_dir));
  bounds.push_back(apply_seccomp(policy.channel_fd));
  return bounds;
}

std::vector<std::string> take_refusals() {
  std::vector<std::string> out;
  while (refusal_lock.test_and_set(std::memory_order_acquire)) {
  }
  const int kinds = refusal_kinds.load(std::memory_order_relaxed);
  for (int i = 0; i < kinds; ++i)
    out.push_back(refusals[i].count > 1 ? fmt::format("{} ({} times)", refusals[i].text, refusals[i].count) : std::string(refusals[i].text));
  if (const long dropped = refusals_dropped.exchange(0); dropped > 0) out.push_back(fmt::format("and {} more refused calls", dropped));
  refusal_kinds.store(0, std::memory_order_relaxed);
  if (mirror != nullptr && mirror_size > 0) mirror[0] = '\0';
  refusal_lock.clear(std::memory_order_release);
  return out;
}

void mirror_refusals(char* buffer, std::size_t size) {
  while (refusal_lock.test_and_set(std::memory_order_acquire)) {
  }
  mirror = buffer;
  mirror_size = size;
  if (mirror != nullptr && size > 0) mirror[0] = '\0';
  refusal_lock.clear(std::memory_order_release);
}

}  // namespace attn::sandbox

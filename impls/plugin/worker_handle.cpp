#include "impls/plugin/worker_handle.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "impls/plugin/plugin_abi.hpp"
#include "impls/plugin/worker_process.hpp"

extern char** environ;

namespace attn::plugin {

using nlohmann::json;

namespace {

std::string printable(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += ' ';
    else if (c < 0x20 || c > 0x7e || c == '\\')
      out += fmt::format("\\x{:02x}", c);
    else
      out += ch;
  }
  return out;
}

// A descriptor moved above stdin, stdout and stderr, which the worker's own replace.
int above_stdio(int fd) {
  if (fd > 2) return fd;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  ::close(fd);
  return moved;
}

}  // namespace

void OutputCapture::add(const char* data, std::size_t n) {
  total_ += n;
  if (head_.size() < keep) {
    const std::size_t take = std::min(n, keep - head_.size());
    head_.append(data, take);
    data += take;
    n -= take;
  }
  if (n >= keep) {
    tail_.assign(data + n - keep, keep);
  } else if (n > 0) {
    tail_.append(data, n);
    if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
  }
}

std::string OutputCapture::describe() const {
  if (total_ == 0) return "";
  if (total_ == head_.size() + tail_.size()) return fmt::format("the plugin's output ({} bytes): {}", total_, printable(head_ + tail_));
  return fmt::format("the plugin's output ({} bytes; the first {} and the last {} shown): {} [... {} bytes left out ...] {}", total_,
                     head_.size(), tail_.size(), printable(head_), total_ - head_.size() - tail_.size(), printable(tail_));
}



Worker::Worker(const std::string& host, const std::string& plugin, std::uint64_t memory_limit, bool sandboxed) {
  if (sandboxed) scratch_ = sandbox::make_scratch_directory();
  int sockets[2], output[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0)
    throw std::runtime_error(fmt::format("socketpair failed: {}", std::strerror(errno)));
  if (pipe2(output, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(sockets[0]);
    ::close(sockets[1]);
    throw std::runtime_error(fmt::format("pipe2 failed: {}", std::strerror(e)));
  }
  for (int* fd : {&sockets[0], &sockets[1], &output[0], &output[1]}) *fd = above_stdio(*fd);
  const int null_input = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls (the harness has threads).
  // The plugin's temporary files and caches go to its scratch directory, the only place it may write.
  std::vector<std::string> env_strings;
  if (sandboxed)
    env_strings = sandbox::scratch_environment(scratch_);
  else
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  std::erase_if(env_strings, [](const std::string& e) { return e.rfind("ASAN_OPTIONS=", 0) == 0; });
  // A sanitized worker must die of the plugin's own signal (and not report the plugin's leaks).
  const char* asan = std::getenv("ASAN_OPTIONS");
  env_strings.push_back(fmt::format("ASAN_OPTIONS={}{}handle_segv=0:handle_sigbus=0:handle_abort=0:detect_leaks=0",
                                    asan != nullptr ? asan : "", asan != nullptr && *asan != '\0' ? ":" : ""));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string host_arg = host, plugin_arg = plugin, limit_flag = "--memory-limit", limit_arg = std::to_string(memory_limit),
              sandbox_flag = "--sandbox", sandbox_arg = scratch_;
  char* argv[] = {host_arg.data(), plugin_arg.data(), limit_flag.data(), limit_arg.data(),
                  sandboxed ? sandbox_flag.data() : nullptr, sandbox_arg.data(), nullptr};
  const int child_socket = sockets[1], child_output = output[1];
  const char* scratch_dir = scratch_.c_str();

  pid_ = sandboxed ? sandbox::spawn_sandboxed(spawn_bounds_, status_fd_) : fork();
  if (pid_ < 0) {
    const int e = errno;
    for (int fd : {sockets[0], sockets[1], output[0], output[1], null_input}) ::close(fd);
    throw std::runtime_error(fmt::format("fork failed: {}", std::strerror(e)));
  }
  if (pid_ == 0) {
    if (sandboxed && chdir(scratch_dir) != 0) _exit(127);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the harness
    if (null_input >= 0) dup2(null_input, 0);
    // The plugin's prints go to the harness's bounded buffer, never into its tables.
    dup2(child_output, 1);
    dup2(child_output, 2);
    if (child_socket == 3)
      fcntl(3, F_SETFD, 0);
    else
      dup2(child_socket, 3);
    execve(argv[0], argv, envp.data());
    _exit(127);
  }
  // Also here, so the group exists before the parent acts on it, whichever runs first.
  setpgid(pid_, pid_);
  for (int fd : {sockets[1], output[1], null_input}) ::close(fd);
  socket_ = sockets[0];
  output_ = output[0];
  fcntl(output_, F_SETFL, fcntl(output_, F_GETFL) | O_NONBLOCK);
}

Worker::~Worker() {
  ::close(socket_);
  kill_now();
  if (output_ >= 0) ::close(output_);
  sandbox::remove_scratch_directory(scratch_);
}

// Waits up to the timeout for a message, draining the output pipe meanwhile (a plugin that
// floods it is read as fast as it writes, and kept to the capture's bounds).
Received Worker::wait_for_message(double timeout_seconds, std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  for (;;) {
    const auto left = std::chrono::duration<double, std::milli>(deadline - std::chrono::steady_clock::now()).count();
    pollfd fds[2] = {{socket_, POLLIN, 0}, {output_, POLLIN, 0}};
    const int r = ::poll(fds, 2, left > 0 ? int(std::ceil(std::min(left, 1e9))) : 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Received::failed;
    if (fds[1].revents != 0) drain(std::size_t(1) << 20);
    if (fds[0].revents != 0) {
      const Received got = receive_message(socket_, 0, text);
      // The worker flushed the call's output before it replied: all of it is in the pipe now.
      drain(std::size_t(16) << 20);
      return got;
    }
    if (r == 0 || std::chrono::steady_clock::now() >= deadline) return Received::timed_out;
  }
}

// After the socket closed: how the process ended (waits for it, kills it after a grace). The
// group goes with it before the worker is reaped, while its process ID still names the group.
std::string Worker::reap() {
  siginfo_t info{};
  int r = -1;
  for (int i = 0; i < 500; ++i) {
    info.si_pid = 0;
    r = waitid(P_PID, id_t(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
    if (r != 0 || info.si_pid != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const bool ended = r == 0 && info.si_pid != 0;
  kill_process_tree(pid_);
  const int status = sandbox::wait_for_worker(pid_, status_fd_);  // the sandbox's process 1 passes on the worker's
  const int wait_errno = errno;
  pid_ = -1;
  drain(std::size_t(16) << 20);
  if (!ended) return "closed its socket without exiting (killed)";
  if (status < 0) return fmt::format("ended (waitpid: {})", std::strerror(wait_errno));
  if (WIFSIGNALED(status)) return fmt::format("crashed: {}", signal_description(WTERMSIG(status)));
  if (WIFEXITED(status)) return fmt::format("exited with status {} (the plugin called exit?)", WEXITSTATUS(status));
  return "ended";
}

void Worker::kill_now() {
  if (pid_ > 0) {
    kill_process_tree(pid_);
    sandbox::wait_for_worker(pid_, status_fd_);
    pid_ = -1;
    drain(std::size_t(16) << 20);
  }
}

// Reads what the pipe holds now, at most `budget` bytes (a writer that never stops is cut off
// there; its next chunk is read on the next poll).
void Worker::drain(std::size_t budget) {
  char chunk[65536];
  while (output_ >= 0 && budget > 0) {
    const ssize_t n = ::read(output_, chunk, std::min(sizeof chunk, budget));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // EAGAIN: nothing more for now
    if (n == 0) {       // every writer is gone
      ::close(output_);
      output_ = -1;
      return;
    }
    capture_.add(chunk, std::size_t(n));
    budget -= std::size_t(n);
  }
}

Exchange exchange(Worker& worker, const json& request, int fd, double timeout_seconds) {
  Exchange x;
  worker.begin_call();
  const bool sent = send_message(worker.socket(), request.dump(), fd);
  std::string text;
  const auto got = sent ? worker.wait_for_message(timeout_seconds, text) : Received::closed;
  if (got == Received::message) {
    try {
      x.reply = json::parse(text);
    } catch (const json::exception& e) {
      x.kind = Exchange::Kind::died;
      worker.kill_now();
      x.death = fmt::format("sent a malformed reply ({})", e.what());
    }
  } else if (got == Received::timed_out) {
    x.kind = Exchange::Kind::timed_out;
    worker.kill_now();
  } else {
    x.kind = Exchange::Kind::died;
    x.death = worker.reap();
  }
  x.output = worker.output();
  return x;
}

// A failure message with the call's output after it, when there was any.
std::string with_output(std::string message, const std::string& output) {
  if (!output.empty()) message += "; " + output;
  return message;
}

}  // namespace attn::plugin

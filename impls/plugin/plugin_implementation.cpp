#include "impls/plugin/plugin_implementation.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/metrics.hpp"
#include "impls/plugin/guarded_arena.hpp"
#include "impls/plugin/worker_channel.hpp"
#include "impls/plugin/worker_process.hpp"
#include "impls/registry.hpp"

extern char** environ;

namespace attn::plugin {

using nlohmann::json;

namespace {

// What one call's worker wrote to its stdout and stderr: the first and the last `keep` bytes and
// how many there were in all. A plugin that writes without bound costs the time to drain the
// pipe, never memory, and never blocks on a full pipe.
class OutputCapture {
 public:
  static constexpr std::size_t keep = 4096;
  void reset() {
    head_.clear();
    tail_.clear();
    total_ = 0;
  }
  void add(const char* data, std::size_t n) {
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
  // "the plugin's output (N bytes; ...): TEXT", one line (control and non-ASCII bytes escaped, so
  // it fits a table row and a JSON string), or "" when there was none.
  std::string describe() const {
    if (total_ == 0) return "";
    if (total_ == head_.size() + tail_.size()) return fmt::format("the plugin's output ({} bytes): {}", total_, printable(head_ + tail_));
    return fmt::format("the plugin's output ({} bytes; the first {} and the last {} shown): {} [... {} bytes left out ...] {}", total_,
                       head_.size(), tail_.size(), printable(head_), total_ - head_.size() - tail_.size(), printable(tail_));
  }

 private:
  static std::string printable(std::string_view text) {
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
  std::string head_, tail_;
  std::uint64_t total_ = 0;
};

// A descriptor moved above stdin, stdout and stderr, which the worker's own replace.
int above_stdio(int fd) {
  if (fd > 2) return fd;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  ::close(fd);
  return moved;
}

}  // namespace

// One worker process, its socket and its output pipe. The worker leads its own process group;
// killing it kills the group and every process below it (kill_process_tree).
class Worker {
 public:
  Worker(const std::string& host, const std::string& plugin, std::uint64_t memory_limit) {
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
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e)
      if (std::strncmp(*e, "ASAN_OPTIONS=", 13) != 0) env_strings.emplace_back(*e);
    // A sanitized worker must die of the plugin's own signal (and not report the plugin's leaks).
    const char* asan = std::getenv("ASAN_OPTIONS");
    env_strings.push_back(fmt::format("ASAN_OPTIONS={}{}handle_segv=0:handle_sigbus=0:handle_abort=0:detect_leaks=0",
                                      asan != nullptr ? asan : "", asan != nullptr && *asan != '\0' ? ":" : ""));
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string host_arg = host, plugin_arg = plugin, limit_flag = "--memory-limit", limit_arg = std::to_string(memory_limit);
    char* argv[] = {host_arg.data(), plugin_arg.data(), limit_flag.data(), limit_arg.data(), nullptr};
    const int child_socket = sockets[1], child_output = output[1];

    pid_ = fork();
    if (pid_ < 0) {
      const int e = errno;
      for (int fd : {sockets[0], sockets[1], output[0], output[1], null_input}) ::close(fd);
      throw std::runtime_error(fmt::format("fork failed: {}", std::strerror(e)));
    }
    if (pid_ == 0) {
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
  ~Worker() {
    ::close(socket_);
    kill_now();
    if (output_ >= 0) ::close(output_);
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  int socket() const { return socket_; }
  void begin_call() { capture_.reset(); }
  std::string output() const { return capture_.describe(); }

  // Waits up to the timeout for a message, draining the output pipe meanwhile (a plugin that
  // floods it is read as fast as it writes, and kept to the capture's bounds).
  Received wait_for_message(double timeout_seconds, std::string& text) {
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
  std::string reap() {
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
    int status = 0;
    const pid_t w = waitpid(pid_, &status, 0);
    pid_ = -1;
    drain(std::size_t(16) << 20);
    if (!ended) return "closed its socket without exiting (killed)";
    if (w < 0) return fmt::format("ended (waitpid: {})", std::strerror(errno));
    if (WIFSIGNALED(status)) return fmt::format("crashed: {}", signal_description(WTERMSIG(status)));
    if (WIFEXITED(status)) return fmt::format("exited with status {} (the plugin called exit?)", WEXITSTATUS(status));
    return "ended";
  }
  void kill_now() {
    if (pid_ > 0) {
      kill_process_tree(pid_);
      int status;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
      drain(std::size_t(16) << 20);
    }
  }

 private:
  // Reads what the pipe holds now, at most `budget` bytes (a writer that never stops is cut off
  // there; its next chunk is read on the next poll).
  void drain(std::size_t budget) {
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

  pid_t pid_ = -1;
  int socket_ = -1;
  int output_ = -1;
  OutputCapture capture_;
};

namespace {

// The outcome of one request.
struct Exchange {
  enum class Kind { reply, died, timed_out } kind = Kind::reply;
  json reply;
  std::string death;   // Worker::reap's description
  std::string output;  // what the worker wrote during the call (OutputCapture::describe)
};

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

std::string seconds_text(double s) { return fmt::format("{:g} s", s); }

bool executable(const std::filesystem::path& p) { return ::access(p.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(p); }

// A tensor handed to the plugin: where its elements come from (dense BHSD bytes) and how they lie
// in the arena.
struct Item {
  const char* name;
  const std::byte* source;       // dense row-major storage [s0, s1, s2, s3] (broadcast dims already 1)
  std::byte* destination;        // the output tensor's storage to copy back into (null for inputs)
  Tensor::Shape shape;           // logical shape given to the plugin
  Tensor::Shape storage_shape;   // the source's shape (differs from shape where broadcast)
  Strides strides;
  std::int32_t dtype;
  std::size_t element;
};

std::size_t item_bytes(const Item& it) { return std::size_t(storage_elements(it.shape, it.strides)) * it.element; }

// Visits each stored element once: its dense index in the source and its offset in the view.
template <class F>
void for_each_element(const Item& it, F&& f) {
  const auto& s = it.storage_shape;
  std::int64_t dense = 0;
  for (std::int64_t a = 0; a < s[0]; ++a)
    for (std::int64_t b = 0; b < s[1]; ++b)
      for (std::int64_t c = 0; c < s[2]; ++c)
        for (std::int64_t d = 0; d < s[3]; ++d, ++dense) f(dense, a * it.strides[0] + b * it.strides[1] + c * it.strides[2] + d * it.strides[3]);
}

bool dense_copy(const Item& it) {
  std::int64_t expect = 1;
  for (int i = 3; i >= 0; --i) {
    const auto u = std::size_t(i);
    if (it.storage_shape[u] > 1 && it.strides[u] != expect) return false;
    expect *= it.storage_shape[u];
  }
  return true;
}

void copy_in(const Item& it, std::byte* arena) {
  if (dense_copy(it)) {
    std::memcpy(arena, it.source, std::size_t(it.storage_shape[0] * it.storage_shape[1] * it.storage_shape[2] * it.storage_shape[3]) * it.element);
    return;
  }
  for_each_element(it, [&](std::int64_t dense, std::int64_t at) {
    std::memcpy(arena + std::size_t(at) * it.element, it.source + std::size_t(dense) * it.element, it.element);
  });
}

void copy_out(const Item& it, const std::byte* arena) {
  for_each_element(it, [&](std::int64_t dense, std::int64_t at) {
    std::memcpy(it.destination + std::size_t(dense) * it.element, arena + std::size_t(at) * it.element, it.element);
  });
}

// "modified input q: 3 elements changed, first at [0,1,2,5]", or "".
std::string compare_input(const Item& it, const std::byte* arena) {
  std::int64_t changed = 0, first = -1;
  for_each_element(it, [&](std::int64_t dense, std::int64_t at) {
    if (std::memcmp(arena + std::size_t(at) * it.element, it.source + std::size_t(dense) * it.element, it.element) != 0) {
      if (changed++ == 0) first = dense;
    }
  });
  if (changed == 0) return "";
  const auto& s = it.storage_shape;
  const std::int64_t d = first % s[3], c = first / s[3] % s[2], b = first / s[3] / s[2] % s[1], a = first / s[3] / s[2] / s[1];
  return fmt::format("modified input {}: {} element(s) changed, first at [{},{},{},{}] of its [{},{},{},{}]", it.name, changed, a, b, c, d,
                     s[0], s[1], s[2], s[3]);
}

// "out not written (still poison): 64 elements in 1 row(s), first at b=0 h=1 i=16 c=0; rows b=0 h=1 i=16".
std::string unwritten_output(const Problem& p, const Tensor& out, const char* name) {
  std::int64_t count = 0, first = -1;
  std::vector<std::int64_t> rows;
  const std::int64_t width = out.shape()[3];
  for (std::int64_t e = 0; e < out.numel(); ++e) {
    if (!out.is_poisoned(e)) continue;
    if (count++ == 0) first = e;
    if (rows.empty() || rows.back() != e / width) rows.push_back(e / width);
  }
  if (count == 0) return "";
  auto row_text = [&](std::int64_t r) {
    return fmt::format("b={} h={} i={}", r / p.n_q / p.h_q, r / p.n_q % p.h_q, r % p.n_q);
  };
  std::vector<std::string> shown;
  for (std::size_t i = 0; i < rows.size() && i < 4; ++i) shown.push_back(row_text(rows[i]));
  const std::string where = width == p.d_v ? output_coordinates(p, first) : row_text(first);
  return fmt::format("{} not written (still poison): {} element(s) in {} row(s), first at {}; rows {}{}", name, count, rows.size(), where,
                     fmt::join(shown, ", "), rows.size() > shown.size() ? fmt::format(" and {} more", rows.size() - shown.size()) : "");
}

std::string phase_name(Phase phase) {
  switch (phase) {
    case Phase::supports: return "supports()";
    case Phase::run: return "run()";
    case Phase::bench: return "a timed run()";
    case Phase::idle: break;
  }
  return "the worker";
}

}  // namespace

std::string find_plugin_host() {
  if (const char* env = std::getenv("ATTNBENCH_PLUGIN_HOST"); env != nullptr && *env != '\0') {
    if (!executable(env)) throw InputError(fmt::format("ATTNBENCH_PLUGIN_HOST={}: not an executable file", env));
    return env;
  }
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = self.parent_path() / "attnbench-plugin-host";
    if (executable(beside)) return beside.string();
  }
#ifdef ATTN_PLUGIN_HOST_PATH
  if (executable(ATTN_PLUGIN_HOST_PATH)) return ATTN_PLUGIN_HOST_PATH;
#endif
  throw InputError("cannot find the plugin worker attnbench-plugin-host (looked next to this executable and where the build put it; "
                   "set ATTNBENCH_PLUGIN_HOST to its path)");
}

std::unique_ptr<PluginImplementation> PluginImplementation::load(const std::string& path, const PluginOptions& options) {
  if (!(options.timeout_seconds > 0)) throw InputError("the plugin timeout must be positive");
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(fmt::format("plugin {}: no such file", path));
  if (std::filesystem::is_directory(path, ec)) throw InputError(fmt::format("plugin {}: is a directory, not a shared library", path));
  std::unique_ptr<PluginImplementation> impl(new PluginImplementation(std::filesystem::absolute(path).string(), options));
  if (impl->options_.host_path.empty()) impl->options_.host_path = find_plugin_host();
  std::string limit_basis = "--plugin-memory-limit";
  if (!impl->options_.memory_limit_bytes) {
    const DefaultMemoryLimit d = default_memory_limit();
    impl->options_.memory_limit_bytes = d.bytes;
    limit_basis = d.basis + "; --plugin-memory-limit sets it";
  }
  auto worker = std::make_unique<Worker>(impl->options_.host_path, impl->path_, *impl->options_.memory_limit_bytes);
  std::string text;
  const auto got = worker->wait_for_message(options.timeout_seconds, text);
  if (got == Received::timed_out)
    throw InputError(with_output(fmt::format("plugin {}: loading it timed out after {}", path, seconds_text(options.timeout_seconds)), worker->output()));
  if (got != Received::message) {
    const std::string death = worker->reap();
    throw InputError(with_output(fmt::format("plugin {}: the worker {} while loading it{}", path, death,
                                             death.find("127") != std::string::npos ? fmt::format(" (could not execute {})", impl->options_.host_path) : ""),
                                 worker->output()));
  }
  json hello;
  try {
    hello = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("plugin {}: malformed hello from the worker: {}", path, e.what()));
  }
  if (!hello.value("ok", false))
    throw InputError(with_output(fmt::format("plugin {}: cannot be loaded: {}", path, hello.value("error", std::string("?"))), worker->output()));
  impl->info_ = hello.at("info").get<PluginInfo>();
  impl->info_.path = impl->path_;
  // Results are keyed by implementation name everywhere (verify.json, the report's merge, bench
  // families, gate): a plugin under a built-in's name would merge with it there.
  const auto& builtin = builtin_implementation_names();
  if (std::find(builtin.begin(), builtin.end(), impl->info_.name) != builtin.end())
    throw InputError(fmt::format("plugin {}: its name '{}' is a built-in implementation's; results are keyed by implementation name, so "
                                 "its records would merge with the built-in's in reports: give the plugin another name "
                                 "(attnbench_plugin_v1.name; reserved: {})",
                                 path, impl->info_.name, fmt::join(builtin, ", ")));
  if (impl->info_.cuda && !hello.at("cuda").value("available", false)) impl->unavailable_ = hello.at("cuda").value("reason", std::string("no CUDA device"));
  const json memory = hello.value("memory_limit", json::object());
  impl->memory_limit_ = memory.value("bytes", std::uint64_t{0});
  if (impl->memory_limit_ > 0)
    impl->memory_description_ = fmt::format("{} of address space per worker (RLIMIT_AS; {})", format_bytes(impl->memory_limit_), limit_basis);
  else if (*impl->options_.memory_limit_bytes == 0)
    impl->memory_description_ = "none (--plugin-memory-limit none)";
  else
    impl->memory_description_ = fmt::format("none: {}", memory.value("note", std::string("the worker did not apply it")));
  impl->worker_ = std::move(worker);
  impl->workers_started_ = 1;
  return impl;
}

PluginImplementation::PluginImplementation(std::string path, PluginOptions options) : path_(std::move(path)), options_(std::move(options)) {}
PluginImplementation::~PluginImplementation() = default;

std::string PluginImplementation::given_up_reason() const {
  std::lock_guard lock(mutex_);
  return given_up_;
}

int PluginImplementation::timed_out_calls() const {
  std::lock_guard lock(mutex_);
  return timeouts_;
}

// Called with the mutex held, for each call cut off by the timeout (a load, supports() or run()).
// A plugin that hangs on every call would otherwise cost a timeout per case and per property
// draw: two in a row, and it gets no more calls.
void PluginImplementation::count_timeout(const std::string& where) const {
  ++timeouts_;
  if (++consecutive_timeouts_ >= timeouts_before_giving_up && given_up_.empty())
    given_up_ = fmt::format("the plugin timed out on {} consecutive calls ({} each; the last in {}): it gets no more calls",
                            consecutive_timeouts_, seconds_text(options_.timeout_seconds), where);
}

// The evidence that a failed call ran into the worker's memory limit: an operator new refused,
// or a peak address space within an eighth of the limit (a runaway allocation reaches the limit
// in steps, and fails at the step that would cross it).
std::string PluginImplementation::memory_note(std::int32_t allocation_failed, std::uint64_t vm_peak_kib) const {
  if (memory_limit_ == 0) return "";
  const std::uint64_t peak = vm_peak_kib * 1024;
  if (allocation_failed == 0 && peak + memory_limit_ / 8 < memory_limit_) return "";
  const std::string peak_text = peak > 0 ? fmt::format(", peak {}", format_bytes(peak)) : "";
  if (allocation_failed != 0)
    return fmt::format("an allocation (operator new) was refused: the worker is limited to {} of address space (RLIMIT_AS; "
                       "--plugin-memory-limit sets it){}",
                       format_bytes(memory_limit_), peak_text);
  return fmt::format("the worker was at its memory limit of {} of address space (RLIMIT_AS; --plugin-memory-limit sets it){}",
                     format_bytes(memory_limit_), peak_text);
}

Worker& PluginImplementation::worker() const {
  if (worker_) return *worker_;
  if (!given_up_.empty()) throw std::runtime_error(given_up_);
  auto w = std::make_unique<Worker>(options_.host_path, path_, *options_.memory_limit_bytes);
  std::string text;
  const auto got = w->wait_for_message(options_.timeout_seconds, text);
  if (got != Received::message) {
    if (got == Received::timed_out) count_timeout("loading the plugin");
    const std::string death = got == Received::timed_out ? "timed out loading" : w->reap();
    throw std::runtime_error(with_output(fmt::format("restarting the plugin worker failed: it {}", death), w->output()));
  }
  const json hello = json::parse(text);
  if (!hello.value("ok", false))
    throw std::runtime_error(with_output(fmt::format("restarting the plugin worker failed: {}", hello.value("error", std::string("?"))), w->output()));
  worker_ = std::move(w);
  ++workers_started_;
  return *worker_;
}

Capabilities PluginImplementation::describe() const {
  Capabilities caps = to_capabilities(info_);
  caps.masked_nonfinite_safe = caps.masked_nonfinite_safe || options_.masked_nonfinite_safe;
  caps.matmul_unit_roundoff = options_.matmul_unit_roundoff;
  return caps;
}

Support PluginImplementation::supports(const Problem& problem) const {
  if (!unavailable_.empty()) return Support::no(unavailable_);
  {
    std::lock_guard lock(mutex_);
    if (!given_up_.empty()) return Support::no(given_up_);
  }
  if (Support s = check_capabilities(info_, problem); !s.ok) return s;
  if (!info_.has_supports) return Support::yes();
  std::lock_guard lock(mutex_);
  try {
    Exchange x = exchange(worker(), {{"op", "supports"}, {"repro", problem.repro()}}, -1, options_.timeout_seconds);
    if (x.kind == Exchange::Kind::reply) {
      consecutive_timeouts_ = 0;
      Support answer = Support::yes();
      if (!x.reply.value("supported", false)) {
        const std::string why = x.reply.value("why", std::string());
        answer = Support::no(why.empty() ? "the plugin's supports() declined (no reason given)" : "plugin: " + why);
      }
      // Processes left running are a defect of the plugin, not of the problem: the case fails.
      if (x.reply.contains("leftover")) pending_failure_ = with_output(x.reply.at("leftover").get<std::string>(), x.output);
      return answer;
    }
    worker_.reset();
    // Not a skip: a supports() that crashes is a defect, reported by the run that follows.
    if (x.kind == Exchange::Kind::timed_out) {
      count_timeout("supports()");
      pending_failure_ = with_output(fmt::format("the plugin's supports() timed out after {} (worker killed with its process group){}",
                                                 seconds_text(options_.timeout_seconds),
                                                 given_up_.empty() ? "" : "; a second consecutive timeout: the plugin gets no more calls"),
                                     x.output);
    } else {
      consecutive_timeouts_ = 0;
      pending_failure_ = with_output(fmt::format("the plugin's supports() {}", x.death), x.output);
    }
  } catch (const std::exception& e) {
    pending_failure_ = e.what();
  }
  return Support::yes();
}

void PluginImplementation::run(const RunArgs& args) const { call(args, 0, 0); }

std::vector<double> PluginImplementation::timed_runs(const Problem& problem, const CaseInputs& inputs, int warmup, int iterations) const {
  Tensor out = make_output(problem), lse = make_lse(problem);
  return call(RunArgs{problem, inputs, out, info_.returns_lse ? &lse : nullptr, nullptr, {}}, std::max(warmup, 0), std::max(iterations, 1));
}

std::vector<double> PluginImplementation::call(const RunArgs& a, int warmup, int iterations) const {
  std::lock_guard lock(mutex_);
  if (!pending_failure_.empty()) {
    const std::string failure = std::move(pending_failure_);
    pending_failure_.clear();
    throw std::runtime_error(failure);
  }
  if (!unavailable_.empty()) throw std::runtime_error(unavailable_);
  if (!given_up_.empty()) throw std::runtime_error(given_up_);
  const Problem& p = a.problem;
  // The problem's layout where declared (verify hands each declared layout out in turn); a
  // problem made elsewhere (the benchmarks' list) gets the first one declared.
  const std::vector<Layout> declared = declared_layouts(info_.layouts);
  if (declared.empty()) throw std::runtime_error("the plugin declares no layout attnbench can pass (BHSD, BSHD or strided)");
  const Layout layout = std::find(declared.begin(), declared.end(), p.layout) != declared.end() ? p.layout : declared.front();
  auto bytes_of = [](const Tensor& t) { return reinterpret_cast<const std::byte*>(t.data()); };
  auto io = [&](const char* name, const Tensor& t, std::byte* back, Layout l) {
    const auto elem = std::size_t(bytes_per_element(t.dtype()));
    return Item{name, bytes_of(t), back, t.shape(), t.shape(), layout_strides(t.shape(), l), to_abi(t.dtype()), elem};
  };
  std::vector<Item> items{io("q", a.inputs.q, nullptr, layout), io("k", a.inputs.k, nullptr, layout), io("v", a.inputs.v, nullptr, layout),
                          io("out", a.out, static_cast<std::byte*>(a.out.data()), layout)};
  const bool want_lse = info_.returns_lse && a.lse != nullptr;
  if (want_lse) items.push_back(io("lse", *a.lse, static_cast<std::byte*>(a.lse->data()), Layout::bhsd));
  const Tensor::Shape scores{p.batch, p.h_q, p.n_q, p.n_k};
  auto stored = [&](Broadcast b) {
    const bool batch = b == Broadcast::per_batch || b == Broadcast::per_batch_head, head = b == Broadcast::per_head || b == Broadcast::per_batch_head;
    return Tensor::Shape{batch ? p.batch : 1, head ? p.h_q : 1, p.n_q, p.n_k};
  };
  if (p.bool_mask.enabled)
    items.push_back(Item{"mask", reinterpret_cast<const std::byte*>(a.inputs.mask.bool_flags().data()), nullptr, scores,
                         stored(p.bool_mask.broadcast), broadcast_strides(p, p.bool_mask.broadcast), ATTNBENCH_DTYPE_BOOL, 1});
  if (p.bias.enabled) {
    const Tensor& bias = a.inputs.mask.bias_tensor();
    items.push_back(Item{"bias", bytes_of(bias), nullptr, scores, stored(p.bias.broadcast), broadcast_strides(p, p.bias.broadcast),
                         to_abi(bias.dtype()), std::size_t(bytes_per_element(bias.dtype()))});
  }

  std::vector<ArenaBuffer> wanted;
  for (const auto& it : items) wanted.push_back({it.name, 0, item_bytes(it), 0, it.element});
  SharedArena arena(ArenaLayout::plan(wanted, std::size_t(sysconf(_SC_PAGESIZE))));
  json tensors = json::object();
  for (const auto& it : items) {
    copy_in(it, arena.data(arena.layout().buffer(it.name)));
    tensors[it.name] = {{"dtype", it.dtype}, {"shape", it.shape}, {"strides", it.strides}};
  }
  const json request = {{"op", "run"}, {"repro", p.repro()}, {"layout", arena.layout()}, {"tensors", tensors},
                        {"warmup", warmup},  {"iterations", iterations}};
  Exchange x = exchange(worker(), request, arena.fd(), options_.timeout_seconds);
  // Where it was when it died or hung, as the worker last recorded it.
  const std::string where = phase_name(arena.status().phase);
  const StatusPage& status = arena.status();
  if (x.kind == Exchange::Kind::timed_out) {
    worker_.reset();
    count_timeout(where);
    throw std::runtime_error(with_output(fmt::format("the plugin timed out after {} in {} (worker killed with its process group; {})",
                                                     seconds_text(options_.timeout_seconds), where,
                                                     given_up_.empty() ? "the next call starts a new one"
                                                                       : "a second consecutive timeout: the plugin gets no more calls"),
                                         x.output));
  }
  consecutive_timeouts_ = 0;
  const std::string memory = memory_note(status.allocation_failed, status.vm_peak_kib);
  if (x.kind == Exchange::Kind::died) {
    worker_.reset();
    std::string message = fmt::format("the plugin {} in {}", x.death, where);
    const FaultRecord& fault = status.fault;
    if (fault.magic == FaultRecord::valid) {
      if (auto d = arena.layout().describe_fault(fault.offset, fault.access))
        message += ": " + *d;
      else
        message += fmt::format(": faulted inside the arena at byte {} (not a guard page)", fault.offset);
    }
    if (!memory.empty()) message += "; " + memory;
    throw std::runtime_error(with_output(message, x.output));
  }

  std::vector<std::string> problems;
  if (x.reply.contains("cuda_error")) {
    problems.push_back(x.reply.at("cuda_error").get<std::string>() + " (the worker restarts)");
    worker_.reset();
  }
  if (const int status = x.reply.value("status", -1); status != 0)
    problems.push_back(fmt::format("the plugin's run() returned status {}: {}", status,
                                   x.reply.value("error", std::string()).empty() ? "(no message)" : x.reply.value("error", std::string())));
  for (const auto& message : x.reply.value("problems", json::array())) problems.push_back(message.get<std::string>());
  for (const auto& it : items) {
    const ArenaBuffer& b = arena.layout().buffer(it.name);
    if (auto slack = arena.layout().check_slack(arena.base(), b)) problems.push_back(*slack);
    if (it.destination == nullptr) {
      if (std::string changed = compare_input(it, arena.data(b)); !changed.empty()) problems.push_back(changed);
    } else {
      copy_out(it, arena.data(b));
    }
  }
  if (problems.empty()) {  // unwritten elements are meaningful only when the call claims success
    if (std::string u = unwritten_output(p, a.out, "out"); !u.empty()) problems.push_back(u);
    if (want_lse)
      if (std::string u = unwritten_output(p, *a.lse, "lse"); !u.empty()) problems.push_back(u);
  }
  if (!problems.empty()) {
    if (!memory.empty()) problems.push_back(memory);
    throw std::runtime_error(with_output(fmt::format("{}", fmt::join(problems, "; ")), x.output));
  }
  std::vector<double> times;
  for (const auto& t : x.reply.value("times", json::array())) times.push_back(t.get<double>());
  return times;
}

}  // namespace attn::plugin

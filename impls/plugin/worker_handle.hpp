#pragma once
// The harness's end of one plugin worker (attnbench-plugin-host): the process, its socket and
// its output pipe, and one request's exchange with it (a reply, a death, or a timeout). Used by
// PluginImplementation (plugin_implementation.hpp); the worker's side is plugin_host_main.cpp.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "impls/plugin/worker_channel.hpp"
#include "impls/sandbox/sandbox.hpp"

namespace attn::plugin {

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
  void add(const char* data, std::size_t n);
  // "the plugin's output (N bytes; ...): TEXT", one line (control and non-ASCII bytes escaped, so
  // it fits a table row and a JSON string), or "" when there was none.
  std::string describe() const;

 private:
  std::string head_, tail_;
  std::uint64_t total_ = 0;
};


// One worker process, its socket and its output pipe. The worker leads its own process group;
// killing it kills the group and every process below it (kill_process_tree).
class Worker {
 public:
  // Starts `host PLUGIN --memory-limit BYTES [--sandbox SCRATCH]` with the socket on descriptor 3:
  // with `sandboxed`, in new namespaces (impls/sandbox) with a scratch directory of its own as its
  // working directory and TMPDIR, removed when the worker goes.
  Worker(const std::string& host, const std::string& plugin, std::uint64_t memory_limit, bool sandboxed);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  int socket() const { return socket_; }
  void begin_call() { capture_.reset(); }
  std::string output() const { return capture_.describe(); }

  // Waits up to the timeout for a message, draining the output pipe meanwhile (a plugin that
  // floods it is read as fast as it writes, and kept to the capture's bounds).
  Received wait_for_message(double timeout_seconds, std::string& text);
  // After the socket closed: how the process ended (waits for it, kills it after a grace). The
  // group goes with it before the worker is reaped, while its process ID still names the group.
  std::string reap();
  void kill_now();
  // The bounds set up on the harness's side (the namespaces); the worker reports its own.
  const std::vector<sandbox::Bound>& spawn_bounds() const { return spawn_bounds_; }
  const std::string& scratch_directory() const { return scratch_; }

 private:
  // Reads what the pipe holds now, at most `budget` bytes (a writer that never stops is cut off
  // there; its next chunk is read on the next poll).
  void drain(std::size_t budget);

  pid_t pid_ = -1;
  int status_fd_ = -1;  // sandboxed: where the sandbox's process 1 passes on how the worker ended
  int socket_ = -1;
  int output_ = -1;
  std::string scratch_;
  std::vector<sandbox::Bound> spawn_bounds_;
  OutputCapture capture_;
};

// The outcome of one request.
struct Exchange {
  enum class Kind { reply, died, timed_out } kind = Kind::reply;
  nlohmann::json reply;
  std::string death;   // Worker::reap's description
  std::string output;  // what the worker wrote during the call (OutputCapture::describe)
};

// Sends one request (with the arena's descriptor, or -1) and waits for its reply.
Exchange exchange(Worker& worker, const nlohmann::json& request, int fd, double timeout_seconds);

// A failure message with the call's output after it, when there was any.
std::string with_output(std::string message, const std::string& output);

}  // namespace attn::plugin

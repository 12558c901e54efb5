#pragma once
// A third-party kernel behind the C ABI (attnbench_plugin.h) as an attn::Implementation, run in
// isolation: the plugin is loaded and called in a worker process (attnbench-plugin-host), never
// in the harness. Each run places the inputs and poisoned outputs in a shared-memory arena with
// guard pages (guarded_arena.hpp), sends the request, and waits at most the timeout. A crash (the
// signal named, and the buffer overrun when a guard page was hit), a hang (the worker is killed),
// a CUDA error, a nonzero status, a write past or before an output, a modified input or an
// output element left unwritten becomes an exception naming it: that case's failure, as for any
// implementation. A dead worker is replaced on the next call, so the run goes on.
//
// Bounds on what a plugin can do to the machine (README.md, "Isolation"): the worker leads its own
// process group, killed whole (with every process the plugin started) when the worker is; a
// process the plugin leaves running after a call is killed and fails that call; the worker's
// stdout and stderr are drained into a bounded buffer, shown with a failure; its address space is
// limited (RLIMIT_AS), and a failure near the limit says so; after two consecutive timed-out
// calls the plugin gets no more calls (every later case is skipped with the reason).
#include <cstdint>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <vector>

#include "impls/implementation.hpp"
#include "impls/plugin/call_description.hpp"
#include "impls/plugin/guarded_arena.hpp"
#include "impls/plugin/plugin_abi.hpp"
#include "impls/sandbox/sandbox.hpp"

namespace attn::plugin {

struct PluginOptions {
  double timeout_seconds = 60;  // per call; the load (dlopen and the description) gets the same
  std::string host_path;        // the worker executable; empty: find_plugin_host()
  // Declarations ABI version 1 has no field for (version 2 has), given on validate's command line
  // (see Capabilities): masked K/V rows kept out entirely, and the unit roundoff of
  // reduced-precision matrix products (none: what the plugin declares). They add to a version 2
  // plugin's own declaration.
  bool masked_nonfinite_safe = false;
  std::optional<MatmulPrecision> matmul_precision;
  std::optional<MatmulPrecision> accumulation_precision;  // the same for its accumulators
  // The worker's address-space limit in bytes: nullopt, default_memory_limit(); 0, none.
  std::optional<std::uint64_t> memory_limit_bytes;
  // The worker in the sandbox (impls/sandbox): no signal outside, no process, no network, writes
  // only to a scratch directory. false: --sandbox=off, for a kernel that needs more.
  bool sandbox = true;
};

// Consecutive timed-out calls after which a plugin gets no more calls.
inline constexpr int timeouts_before_giving_up = 2;

// ATTNBENCH_PLUGIN_HOST if set, else attnbench-plugin-host next to this executable, else where
// the build put it. Throws InputError when none exists.
std::string find_plugin_host();

class Worker;

class PluginImplementation : public Implementation {
 public:
  // Starts a worker that loads the plugin; throws InputError naming the path and the fault when
  // it cannot be loaded (no such file, dlopen fails, no entry point, another ABI version, a bad
  // description, a crash while loading).
  static std::unique_ptr<PluginImplementation> load(const std::string& path, const PluginOptions& options = {});
  ~PluginImplementation() override;

  const PluginInfo& info() const { return info_; }
  // A CUDA plugin on a machine without a device (or a build without CUDA): every case is skipped
  // with this reason. Empty when the plugin can run.
  const std::string& unavailable_reason() const { return unavailable_; }
  int workers_started() const { return workers_started_; }
  // "11.7 GiB per worker (address space, RLIMIT_AS: half of ...)", or why there is none.
  const std::string& memory_limit_description() const { return memory_description_; }
  // "pid namespace, network namespace, landlock, seccomp" (and any bound that could not be set up,
  // with its reason), or "off (...)"; the same as JSON for the result files.
  std::string sandbox_description() const;
  nlohmann::json sandbox_json() const;
  // Why the plugin gets no more calls (it timed out twice in a row), or empty. Once set,
  // supports() refuses every problem with it and run() throws it.
  std::string given_up_reason() const;
  int timed_out_calls() const override;

  std::string name() const override { return info_.name; }
  Capabilities describe() const override;
  Support supports(const Problem& problem) const override;
  std::size_t workspace_bytes(const Problem&) const override { return 0; }  // the plugin manages its own scratch
  void run(const RunArgs& args) const override;

  // The benchmark route: `warmup` untimed then `iterations` timed calls made and timed inside the
  // worker (host: steady_clock around each call; CUDA: events on the stream), so the times are
  // the plugin's alone; the last call's output is checked as run's. Throws like run.
  bool times_itself() const override { return true; }
  std::vector<double> timed_runs(const Problem& problem, const CaseInputs& inputs, int warmup, int iterations) const override;
  // Whether a thread of the last call wrote into its buffers after run() returned (the worker
  // keeps them mapped read-only until the next call, and records the fault).
  std::string late_problems() const override;

 private:
  PluginImplementation(std::string path, PluginOptions options);
  std::vector<double> call(const RunArgs& args, int warmup, int iterations) const;
  Worker& worker() const;  // the live worker, started when there is none
  void count_timeout(const std::string& where) const;
  std::string memory_note(std::int32_t allocation_failed, std::uint64_t vm_peak_kib) const;

  std::string path_;
  PluginOptions options_;
  PluginInfo info_;
  std::string unavailable_;
  mutable std::mutex mutex_;
  mutable std::unique_ptr<Worker> worker_;
  mutable int workers_started_ = 0;
  mutable std::string pending_failure_;  // supports() crashed: the next run reports it
  std::uint64_t memory_limit_ = 0;       // as the worker applied it (0: none)
  std::string memory_description_;
  std::vector<sandbox::Bound> sandbox_bounds_;
  // The last call's arena, kept until the next call: the worker holds its buffers read-only
  // meanwhile, and a late write faults there, recorded in this arena's status page.
  struct LastCall {
    std::unique_ptr<SharedArena> arena;
    std::vector<TensorSpec> specs;  // which of its buffers were outputs
    std::string repro;
    bool threads_left = false;  // the worker saw threads started in the call still running after it
  };
  mutable std::optional<LastCall> last_call_;
  std::string written_after_return() const;  // "" or the late write (from the status page), naming buffer and element
  mutable int timeouts_ = 0, consecutive_timeouts_ = 0;
  mutable std::string given_up_;
};

}  // namespace attn::plugin

#pragma once
// A third-party kernel behind the C ABI (attnbench_plugin.h) as an attn::Implementation, run in
// isolation: the plugin is loaded and called in a worker process (attnbench-plugin-host), never
// in the harness. Each run places the inputs and poisoned outputs in a shared-memory arena with
// guard pages (guarded_arena.hpp), sends the request, and waits at most the timeout. A crash (the
// signal named, and the buffer overrun when a guard page was hit), a hang (the worker is killed),
// a CUDA error, a nonzero status, a write past or before an output, a modified input or an
// output element left unwritten becomes an exception naming it: that case's failure, as for any
// implementation. A dead worker is replaced on the next call, so the run goes on.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "impls/implementation.hpp"
#include "impls/plugin/plugin_abi.hpp"

namespace attn::plugin {

struct PluginOptions {
  double timeout_seconds = 60;  // per call; the load (dlopen and the description) gets the same
  std::string host_path;        // the worker executable; empty: find_plugin_host()
  // Declared by the caller (validate --masked-nonfinite-safe) because ABI version 1 has no field
  // for it: the plugin keeps NaN/Inf in masked K and V rows out of every output, so the property
  // suite's check of it is a failure, not a finding.
  bool masked_nonfinite_safe = false;
};

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

  std::string name() const override { return info_.name; }
  Capabilities describe() const override {
    Capabilities caps = to_capabilities(info_);
    caps.masked_nonfinite_safe = caps.masked_nonfinite_safe || options_.masked_nonfinite_safe;
    return caps;
  }
  Support supports(const Problem& problem) const override;
  std::size_t workspace_bytes(const Problem&) const override { return 0; }  // the plugin manages its own scratch
  void run(const RunArgs& args) const override;

  // The benchmark route: `warmup` untimed then `iterations` timed calls made and timed inside the
  // worker (host: steady_clock around each call; CUDA: events on the stream), so the times are
  // the plugin's alone; the last call's output is checked as run's. Throws like run.
  bool times_itself() const override { return true; }
  std::vector<double> timed_runs(const Problem& problem, const CaseInputs& inputs, int warmup, int iterations) const override;

 private:
  PluginImplementation(std::string path, PluginOptions options);
  std::vector<double> call(const RunArgs& args, int warmup, int iterations) const;
  Worker& worker() const;  // the live worker, started when there is none

  std::string path_;
  PluginOptions options_;
  PluginInfo info_;
  std::string unavailable_;
  mutable std::mutex mutex_;
  mutable std::unique_ptr<Worker> worker_;
  mutable int workers_started_ = 0;
  mutable std::string pending_failure_;  // supports() crashed: the next run reports it
};

}  // namespace attn::plugin

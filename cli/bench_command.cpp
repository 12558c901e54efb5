#include "cli/bench_command.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "records/context.hpp"
#include "records/progress.hpp"
#include "records/shard.hpp"

namespace attn::cli {
namespace {

// The progress bar (plain lines where stdout is not a terminal), stepping aside for Google
// Benchmark's console lines.
class BenchProgress final : public bench::BenchObserver {
 public:
  void started(std::size_t benchmarks) override { progress_.set_total(benchmarks); }
  void before_console_line() override { progress_.clear(); }
  void benchmark_finished(const std::string& name, const BenchDocument&) override { progress_.step(name); }
  void benchmarks_finished(const BenchDocument&) override { progress_.finish(); }

 private:
  Progress progress_{"bench", 0, stdout, Progress::stdout_is_terminal()};
};

}  // namespace

BenchCommand::BenchCommand(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmark implementations (Google Benchmark): time, GFLOP/s, fraction of the "
                                            "measured peak, memory, and the fitted O(n^2) exponent; --benchmark_* flags pass through");
  command_ = bench;
  bench::BenchOptions& o = options_;
  bench->add_option("--impl", implementations_, "Implementation to benchmark (repeatable; default: all)");
  bench->add_option("--dtype", o.dtypes, "Dtypes, comma-separated (default: f32; --smoke: every dtype each accepts)")->delimiter(',');
  bench->add_option("--masks", o.masks, "Masks, comma-separated: none, causal (top-left), bottom_right, sliding:W (each query sees itself and the W keys before it); "
                    "each may add +softcap:C (scores s become C tanh(s / C)), e.g. causal+softcap:30")->delimiter(',')->capture_default_str();
  bench->add_option("--pass", o.passes,
                    "Passes, comma-separated: forward; backward (fed O and the LSE of a forward run before the timing); forward_backward "
                    "(both, a training step's attention). Implementations without a backward time the forward only")
      ->delimiter(',')
      ->capture_default_str();
  bench->add_option("--d", o.head_dims, "Head dimensions d_k = d_v, comma-separated")->delimiter(',')->capture_default_str();
  bench->add_option("--heads", o.heads, "Heads (h_q = h_kv)")->capture_default_str();
  bench->add_option("--batch", o.batch, "Batch size")->capture_default_str();
  bench->add_option("--threads", o.threads, "Threads for the implementations and the peak probes (default: all cores)");
  bench->add_option("--min-n", o.min_n, "Smallest sequence length (a power of two)")->capture_default_str();
  bench->add_option("--max-n", o.max_n, "Largest sequence length (a power of two)")->capture_default_str();
  bench->add_option("--naive-max-n", o.naive_max_n, "Largest n for cpu_naive (single-threaded, n^2 memory)")->capture_default_str();
  bench->add_option("--fit-min-n", o.fit_min_n, "Smallest n in the log-log exponent fit")->capture_default_str();
  bench->add_option("--json", o.json_path, "Google Benchmark JSON output ('' to skip)")->capture_default_str();
  bench->add_flag("--smoke", o.smoke, "Tiny sizes (n = 16..64), one iteration each, short peak probes: for CTest");
  auto* peers = bench->add_option("--peers", o.peers_command,
                                  "Afterwards run COMMAND through /bin/sh in the sandbox (--sandbox; a peers script, e.g. '.venv/bin/python benchmarks/peers/cpu_peers.py' or "
                                  "'python3 benchmarks/peers/torch_sdpa.py') with --cases DIR --threads [--l2] --out appended, DIR holding the problem list "
                                  "and its inputs (benchmarks/peers/README.md), and compare its medians with ours per (dtype, d, mask, n)");
  bench->add_option("--peers-cases", o.peers_cases_dir,
                    "With --peers: write the folder of the peers' problems and inputs to DIR and keep it, to rerun a peers script on "
                    "it by hand (--cases DIR); default: a temporary folder, removed afterwards")
      ->needs(peers);
  bench->add_option_function<std::string>(
           "--sandbox", [this](const std::string& mode) { options_.peers_sandboxed = mode == "on"; },
           "With --peers: on runs COMMAND in the sandbox (its own PID, network and user namespaces, Landlock: no network, "
           "nothing it starts outlives it, writes only to its scratch directory, where TMPDIR and the frameworks' caches point; "
           "impls/sandbox/README.md); off runs it with the harness's rights, for a peer that needs more (default: on)")
      ->check(CLI::IsMember({"on", "off"}))
      ->needs(peers);
  bench->add_option("--l2", o.l2, "GPU families: cold (flush L2 before every timed iteration) or hot (no flush); part of their names")
      ->capture_default_str();
  bench->add_option("--shard", shard_, "Run part I of N of the families (I/N: family position modulo N; each family's n-sweep "
                                       "stays whole), e.g. for a CI matrix; `attnbench report` merges the shards");
  bench->allow_extras();
}

int BenchCommand::run(const Registry& registry) {
  bench::BenchOptions o = options_;
  o.benchmark_flags = command_->remaining();
  if (implementations_.empty()) {
    o.implementations = registry.all();
  } else {
    for (const auto& name : implementations_) {
      const auto* impl = registry.find(name);
      if (impl == nullptr) throw InputError(fmt::format("unknown implementation '{}' (known: {})", name, fmt::join(registry.names(), ", ")));
      o.implementations.push_back(impl);
    }
  }
  if (!shard_.empty()) o.shard = parse_shard(shard_);
  o.context = run_context(o.threads > 0 ? o.threads : default_thread_count());
  BenchProgress progress;
  return bench::run_bench(o, {&progress});
}

}  // namespace attn::cli

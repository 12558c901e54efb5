#pragma once
// `attnbench bench`: measures the machine's peaks, registers one Google Benchmark family per
// (implementation, dtype, head dimension, mask) with n varying, runs them, prints Google
// Benchmark's console output, then a summary table and the fitted scaling exponents (and, with
// --peers, the peers' medians side by side with ours), and writes the bench result file
// (records/bench_record.hpp: Google Benchmark's JSON keys and attnbench's section of peaks, fits
// and peer comparisons).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "impls/implementation.hpp"
#include "records/bench_record.hpp"
#include "records/shard.hpp"

namespace attn::bench {

// What watches a run as it goes (the command line's progress bar; a binding streaming results),
// as verify's observers do (verification/run.hpp). Every method has a default that does nothing.
class BenchObserver {
 public:
  virtual ~BenchObserver() = default;
  // After the peaks are measured: how many benchmarks (family x n) will run.
  virtual void started(std::size_t /*benchmarks*/) {}
  // Google Benchmark is about to print a console line (a progress bar steps aside).
  virtual void before_console_line() {}
  // One benchmark's runs reported; `so_far` holds every run yet, as the result file does.
  virtual void benchmark_finished(const std::string& /*name*/, const BenchDocument& /*so_far*/) {}
  // The last benchmark finished, before the summary is printed and the fits computed.
  virtual void benchmarks_finished(const BenchDocument& /*runs*/) {}
};

struct BenchOptions {
  std::vector<const Implementation*> implementations;  // what to benchmark (the caller resolves names)
  std::vector<std::string> dtypes;                     // empty: f32 (smoke: every dtype each accepts)
  std::vector<std::string> masks{"none", "causal"};    // none, causal (top-left), top_left, bottom_right
  std::vector<std::int64_t> head_dims{64};
  std::vector<std::string> passes{"forward"};          // forward, backward, forward_backward (benchmarks/problem_list.hpp, Pass)
  std::int64_t batch = 1;
  std::int64_t heads = 8;
  int threads = 0;                                     // 0: every core
  std::int64_t min_n = 128;
  std::int64_t max_n = 8192;
  std::int64_t naive_max_n = 4096;                     // cpu_naive is single-threaded and O(n^2) in memory
  std::int64_t fit_min_n = 512;                        // the log-log fit uses n >= this (smoke: every n)
  std::string json_path = "results/bench.json";        // Google Benchmark JSON; empty: none
  bool smoke = false;                                  // n = 16, 32, 64, one iteration each, short peak probes
  std::vector<std::string> benchmark_flags;            // passed to Google Benchmark (--benchmark_*=...)
  nlohmann::json context;                              // where it ran (git revision, compiler, CPU, ...)
  // --peers COMMAND: afterwards, run the peers script on the same problem list and our inputs
  // (appending --cases DIR --threads [--l2] --out) and compare; see peer_comparison.hpp.
  std::optional<std::string> peers_command;
  // --peers-cases DIR: the folder of the peers' problems and inputs is written there and kept (to
  // rerun a peers script on it by hand); empty: a temporary one, removed after the peers ran.
  std::string peers_cases_dir;
  // --sandbox on|off: the peers command runs in the sandbox (impls/sandbox/README.md: its own PID,
  // network and user namespaces, writes only to its scratch directory) or with the harness's rights.
  bool peers_sandboxed = true;
  // GPU families (describe().device == "cuda"): "cold" flushes L2 before every timed iteration,
  // "hot" does not (gpu_timing.hpp). In the GPU families' names: IMPL/DTYPE/dD/MASK/l2_cold.
  std::string l2 = "cold";
  // --shard I/N: only the families at positions p of the problem list with p % N == I - 1 (a
  // family's n-sweep stays whole). The JSON gets "shard": {"index": I, "count": N}.
  std::optional<Shard> shard;
};

// Returns 0 when every benchmark ran, 1 when any reported an error (the others still run) or the
// --peers command failed (non-zero exit other than 1 = a peer failed its own checks, or 3 = the
// peer is unavailable here; or a missing or malformed JSON). GPU implementations without a
// device are skipped with the reason (not an error); when nothing else was asked for, nothing
// runs: 0 with --smoke, else 1. Throws InputError (before running anything) on bad options.
int run_bench(const BenchOptions& options, const std::vector<BenchObserver*>& observers = {});

}  // namespace attn::bench

#pragma once
// `attnbench bench --peers COMMAND`: after our families have run, runs the peers script
// (benchmarks/peers/cpu_peers.py, or anything that writes its JSON schema) on the same problem
// list, reads its JSON, and puts the peers' medians beside ours: one table, one JSON section.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/problem.hpp"

namespace attn::bench {

struct BenchOptions;

// What `--peers` will run, settled (and validated) before anything runs.
struct PeersPlan {
  std::string command;                    // the user's COMMAND, run through /bin/sh
  std::int64_t min_n = 0, max_n = 0;      // the sizes our families run
  int threads = 1;
  std::vector<std::string> script_masks;  // the script's names: none, causal
  std::string out_path;                   // next to the bench JSON; empty: a temporary file
  std::vector<std::string> notes;         // e.g. bottom_right compared with the peers' top-left
};

// Checks that the bench options describe the peers script's problem list (b = 1, h = 8,
// d = 64, f32; masks none and causal) and that COMMAND is not empty. Throws InputError naming
// the mismatch. Nothing is run or written.
// min_n and max_n are the sizes our families run (--smoke: 16 and 64).
PeersPlan plan_peers(const BenchOptions& options, int threads, std::int64_t min_n, std::int64_t max_n);

// "results/bench.json" -> "results/bench.peers.json"; "" -> "" (a temporary file is used).
std::string peers_json_path(const std::string& bench_json_path);

// One size of one of our families, as the summary table shows it (f32, d = 64).
struct OurTime {
  std::string implementation;
  std::string mask;  // our family's mask name: none, causal, causal_bottom_right
  Causal causal = Causal::none;
  std::int64_t n = 0;
  double time_ms = 0;  // the median run's time when there are repetitions
};

struct PeersOutcome {
  bool failed = false;      // the command failed, or its JSON is missing or malformed
  std::string failure;      // what went wrong, when failed
  bool table_built = false;
  std::vector<std::string> invalid_peers;  // peers that failed their own correctness checks
  nlohmann::json section;   // for the bench JSON's "attnbench" section, key "peers"
};

// Runs the command (its output streams to the console), reads its JSON, prints the side-by-side
// table. Never throws for what the command does: a failure is reported in the outcome.
PeersOutcome run_peers(const PeersPlan& plan, const std::vector<OurTime>& ours);

// Python's json.dumps writes NaN, Infinity and -Infinity, which strict JSON forbids; this turns
// those tokens (outside strings) into null. Exposed for tests.
std::string python_json_to_strict(const std::string& text);

}  // namespace attn::bench

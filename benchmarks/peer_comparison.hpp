#pragma once
// `attnbench bench --peers COMMAND`: after our families have run, writes the peers' problems and
// their inputs into a peer-cases folder (benchmarks/peer_cases.hpp), runs the peers script
// (benchmarks/peers/cpu_peers.py or torch_sdpa.py, or anything that reads that folder and writes
// their JSON schema) on it, reads its JSON, and puts the peers' medians beside ours, per
// (dtype, d, mask, n): one table, one JSON section.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmarks/peer_cases.hpp"
#include "benchmarks/problem_list.hpp"
#include "core/problem.hpp"

namespace attn::bench {

struct BenchOptions;

// What `--peers` will run, settled (and validated) before anything runs.
struct PeersPlan {
  std::string command;                    // the user's COMMAND, run through /bin/sh
  std::int64_t min_n = 0, max_n = 0;      // the sizes our families run
  int threads = 1;
  std::int64_t batch = 1, heads = 8;      // b, h_q = h_kv
  std::vector<std::int64_t> head_dims;    // d_k = d_v of our families
  std::vector<std::string> dtypes;        // of our families: f32, f16, bf16, f64
  std::vector<std::string> script_masks;  // the peers' masks: none, causal (top-left)
  std::vector<Pass> passes{Pass::forward};  // and backward (timed alone) where a family times it
  std::string l2;                         // "cold" or "hot" when a GPU family runs (--l2), else empty
  std::string out_path;                   // next to the bench JSON; empty: a temporary file
  std::string cases_dir;                  // --peers-cases: where the peer-cases folder is kept; empty: a temporary one
  std::vector<std::string> notes;         // e.g. bottom_right compared with the peers' top-left
  bool sandboxed = true;                  // the command runs in the sandbox (sandbox::run_program); --sandbox=off: not

  // The problems the peers are timed on: per dtype, d and mask, n over the powers of two from
  // min_n to max_n, each our family's problem (FamilySpec::problem: the same repro string, the
  // same inputs); a causal mask is top-left (with n_q = n_k bottom-right is the same mask).
  std::vector<Problem> timed_problems() const;
  // Their correctness checks first (peer_check_problems), then the timed problems.
  std::vector<PeerCase> cases() const;

  // What is appended to COMMAND, before "--out PATH": "--cases DIR --threads 2" (and
  // "--l2 cold"), DIR the peer-cases folder written for the run.
  std::string arguments(const std::string& cases_dir) const;
};

// Settles the peers' problem list from our families (their sizes, dtypes and head dimensions;
// the options' when no family is left) and the options (batch, heads, masks, --l2 when a family
// runs on the GPU). Throws InputError when COMMAND is empty, with --smoke and no --dtype
// (--smoke benchmarks every dtype each implementation accepts: name the ones to compare), or when
// --peers-cases names a folder that holds anything but a peer-cases folder. Nothing is run or written. Whether the script supports the list is the script's to say (it
// exits 2 naming what it does not support: cpu_peers.py takes f32 only).
PeersPlan plan_peers(const BenchOptions& options, int threads, std::span<const FamilySpec> families);

// "results/bench.json" -> "results/bench.peers.json"; "" -> "" (a temporary file is used).
std::string peers_json_path(const std::string& bench_json_path);

// One size of one of our families, as the summary table shows it.
struct OurTime {
  std::string implementation;
  std::string mask;                      // our family's mask name: none, causal, causal_bottom_right, sliding_W; then /backward ... for another pass
  std::optional<std::string> peer_mask;  // the peers' mask it is compared with; empty: none runs it
  std::int64_t n = 0;
  double time_ms = 0;  // the median run's time when there are repetitions
  std::string dtype = "f32";
  std::int64_t head_dim = 64;
};

struct PeersOutcome {
  bool failed = false;      // the command failed, or its JSON is missing or malformed
  std::string failure;      // what went wrong, when failed
  bool unavailable = false; // the command exited 3: its peer cannot run here (no PyTorch, no GPU); not a failure
  std::string unavailable_reason;
  bool table_built = false;
  std::vector<std::string> invalid_peers;  // peers that failed their own correctness checks
  nlohmann::json section;   // for the bench JSON's "attnbench" section, key "peers"
};

// Writes the peer-cases folder (a temporary one, removed afterwards), runs the command on it (its
// output streams to the console), reads its JSON, prints the side-by-side table. A record whose
// problem is not one of the timed problems (by repro string) is left out, with the reason. Never throws for what the command does: a failure is reported in the outcome. Exit
// codes: 0 ok; 1 with a peer marked valid_target false: ok, that peer invalid; 3 the peer is
// unavailable here (outcome.unavailable, no table); anything else, a signal, or a missing or
// malformed JSON: failed.
PeersOutcome run_peers(const PeersPlan& plan, const std::vector<OurTime>& ours);

// Python's json.dumps writes NaN, Infinity and -Infinity, which strict JSON forbids; this turns
// those tokens (outside strings) into null. Exposed for tests.
std::string python_json_to_strict(const std::string& text);

}  // namespace attn::bench

#pragma once
// A peers result file (schema "attnbench.peers", written by benchmarks/peers/*.py), typed: the
// peers it tried and one record per (peer, problem), with the one reader `bench --peers` and the
// report use. benchmarks/peers/README.md documents the fields. A record that cannot be used says
// why instead of being dropped silently.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attn {

struct PeerStatus {  // an entry of "peers"
  std::string peer;
  std::optional<std::string> skipped;  // why it did not run (not installed, broken)
  std::optional<bool> valid_target;    // its correctness checks: passed, failed, or skipped (null)
};

struct PeerResult {  // an entry of "results"
  std::string peer, peer_version;
  std::optional<bool> valid_target;
  nlohmann::json problem = nlohmann::json::object();  // the case's problem JSON as bench wrote it, echoed by the script
  std::string dtype, causal, repro;                  // from the problem
  std::string operation = "forward";                 // from the problem: forward, or backward (timed alone)
  std::int64_t d_k = 0, n_q = 0;
  std::optional<double> median_ms;                   // median_seconds, in ms (positive and finite)
  std::optional<std::string> error;                  // the peer failed on this problem
  // Why the record cannot be used: no peer or problem (causal, n_q) to place it; or neither a
  // time nor an error. Empty when it can.
  std::string unplaced, untimed;
};

struct PeersDocument {
  nlohmann::json context = nlohmann::json::object();
  std::vector<PeerStatus> peers;
  std::vector<PeerResult> results;
};

// Reads a parsed peers document (its "results" must be an array; "peers", when present, too).
// Throws InputError naming `source` otherwise; records are never refused, only marked.
PeersDocument read_peers_document(const nlohmann::json& document, const std::string& source);

}  // namespace attn

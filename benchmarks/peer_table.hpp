#pragma once
// The side-by-side table of `bench --peers` (peer_comparison.hpp): the peers' usable records
// against our medians, per (dtype, d, mask, n); printed, and kept as the section's
// "comparisons".
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmarks/peer_comparison.hpp"

namespace attn::bench {

// One usable record of the peers' JSON: a time or an error.
struct PeerRecord {
  std::string version;
  std::optional<double> median_ms;  // absent: an error record
  std::string error;
  std::optional<bool> valid;        // valid_target: true, false, or null (checks skipped)
};
// Keyed by (peer, dtype, d_k, the peer's mask name, n).
using PeerRecords = std::map<std::tuple<std::string, std::string, std::int64_t, std::string, std::int64_t>, PeerRecord>;

// Prints the table (and the peers' errors, the records left out, the peers that failed their
// checks) and puts the comparisons in outcome.section["comparisons"].
void print_comparison(const std::vector<OurTime>& ours, const PeerRecords& records,
                      const std::vector<std::string>& peer_order, const std::set<std::string>& invalid,
                      const std::vector<std::string>& skipped_records, PeersOutcome& outcome);

}  // namespace attn::bench

#pragma once
// The result files attnbench writes and reads: their schema names and version, the --shard I/N
// split, and reading one or more files (shards included) back into one set of results for
// `attnbench report`. reports/README.md documents every field.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "records/bench_record.hpp"
#include "records/result_schema.hpp"
#include "records/peers_record.hpp"
#include "records/properties_record.hpp"
#include "records/shard.hpp"
#include "records/verify_record.hpp"

namespace attn {


// One result file as read: which kind it is ("verify", "bench", "properties", "peers") and its
// document. Unknown fields are kept and ignored.
struct ResultFile {
  std::string path;
  std::string kind;
  nlohmann::json doc;
  std::optional<Shard> shard;
  nlohmann::json context;  // the common context block ({} where the file has none)
  std::string command;     // what wrote a verify-shaped file: verify, check or validate ("" in older files)
  std::vector<VerifyRecord> verify_records;  // a verify file's, read (records/verify_record.hpp)
  std::vector<PropertyRecord> property_records;  // a properties file's (records/properties_record.hpp)
  std::optional<BenchDocument> bench;  // a bench file, read (records/bench_record.hpp)
  std::optional<PeersDocument> peers;  // a peers file (records/peers_record.hpp)
  // Whether the run it is of ended ("complete": verify's and properties' top level, bench's
  // "attnbench" section); a file without the field (older ones, peers files) is taken as complete.
  bool complete = true;
};

// An attnbench file that is not a result (a gate baseline or configuration, a cases manifest):
// `attnbench report` skips it with a note, where a glob such as results/*.json picked it up.
class NotAResult : public InputError {
 public:
  using InputError::InputError;
};

// Reads and classifies one file; throws InputError naming the file when it is not a regular file
// (a device or FIFO is never read from), cannot be read, is not JSON, is not an attnbench result
// (NotAResult for attnbench's other files), is a newer schema version, lacks the array its kind
// needs (verify: records, bench: benchmarks, properties: records, peers: results), or holds a
// record whose status (verify: pass, fail, skip) or verdict (properties) it does not know.
ResultFile load_result_file(const std::string& path);
// The same from a string (the path is only used in messages).
ResultFile parse_result_file(const std::string& path, const std::string& text);

struct MergeOptions {
  // Files measured at different git revisions are refused (InputError) unless this is set;
  // then they are merged with a warning.
  bool allow_mixed_revisions = false;
};

// Everything the report shows, merged over the input files.
struct MergedResults {
  std::vector<std::string> files;
  std::vector<nlohmann::json> contexts;    // one per input file, in order
  std::vector<std::string> file_kinds;     // one per input file
  std::vector<std::string> file_shards;    // "I/N", or "" for an unsharded file
  std::vector<VerifyRecord> verify_records;                     // by (implementation, case_index, repro), duplicates dropped
  std::vector<PropertyRecord> property_records;                 // by (property, implementation)
  std::vector<BenchRun> bench_runs;                             // by (name, run_type, repetition_index)
  std::vector<BenchFit> bench_fits;                             // by family
  struct Peaks {
    std::string file;
    BenchPeaks cpu;
    std::vector<std::pair<std::string, double>> gpu_gemm;  // (precision, GFLOP/s) of a GPU run
  };
  std::vector<Peaks> bench_peaks;                               // of each bench file
  nlohmann::json peer_comparisons = nlohmann::json::array();    // attnbench.peers.comparisons
  std::vector<PeerResult> peer_results;                         // standalone peers files' results
  nlohmann::json pass_rule;                                     // of the first verify file
  std::vector<std::string> warnings;                            // incomplete shard sets, mixed revisions, duplicates
  std::vector<std::string> incomplete_files;                    // files whose run did not finish (ResultFile::complete)
  bool has(std::string_view kind) const;
  std::vector<std::string> kinds;
};

// Merges files of any kinds; shards of one run merge into the unsharded run's records.
MergedResults merge_results(const std::vector<ResultFile>& files, const MergeOptions& options = {});

}  // namespace attn

#pragma once
// The bench result file (schema "attnbench.bench"), typed: one struct per part, one writer
// (to_json) and one reader (read_bench_document), used by the bench that writes it and by the
// report and the gate that read it. reports/README.md documents every field.
//
// The file is Google Benchmark's JSON as its --benchmark_out would write it ("context",
// "benchmarks" with Google Benchmark's own keys, so compare.py reads it), written by attnbench
// from the typed runs, with attnbench's own parts beside it: top-level "schema",
// "schema_version", "shard" and the "attnbench" section, and per run "family" and "n". A NaN or
// infinite figure is written as null and read back as NaN.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "records/result_schema.hpp"
#include "records/shard.hpp"

namespace attn {


// One entry of "benchmarks": a timed run of one (family, n), or an aggregate of repetitions
// (mean, median, stddev, cv), or a family's complexity rows (BigO, RMS).
struct BenchRun {
  std::string name;      // Google Benchmark's name: FAMILY/n:N[/iterations:1]/real_time (or manual_time), + _median ...
  std::string run_name;  // the name without an aggregate's suffix
  std::string family;    // IMPL/DTYPE/dD/MASK[/l2_cold|/l2_hot]
  std::int64_t n = 0;    // 0 on the BigO and RMS rows
  std::int64_t family_index = 0, per_family_instance_index = 0;
  bool aggregate = false;      // run_type "aggregate" (else "iteration")
  std::string aggregate_name;  // mean, median, stddev, cv, BigO, RMS
  std::string aggregate_unit;  // time or percentage
  std::int64_t repetitions = 1, repetition_index = 0, threads = 1, iterations = 0;
  double real_time = 0, cpu_time = 0;  // per iteration, in time_unit
  std::string time_unit = "ms";        // ns, us, ms, s
  std::optional<std::string> error;    // error_message of a run that failed
  std::string big_o;                   // BigO row: "N^2"; real_time/cpu_time hold the coefficients
  std::optional<double> rms;           // RMS row: relative, no unit
  std::string label;
  std::map<std::string, double> counters;  // gflops_exact, ... (NaN where not finite)

  double real_time_ms() const;  // the one conversion of Google Benchmark's time units
  double cpu_time_ms() const;
  // A timed run of one n (not an aggregate, not a complexity row).
  bool is_iteration() const { return !aggregate; }
  bool is_complexity() const { return aggregate_name == "BigO" || aggregate_name == "RMS"; }
  // The run's name without "/real_time" or "/manual_time": what the gate calls a benchmark.
  std::string case_name() const;
  double counter(const std::string& key) const;  // NaN when absent
};

// The median run of one (family, n): the median of its repetitions' timed runs (the upper
// middle one of an even count), or Google Benchmark's median aggregate when only aggregates
// were reported. Computed once here, for the bench's table, fits and peers, and the report.
struct BenchPoint {
  std::string family;
  std::int64_t n = 0;
  const BenchRun* run = nullptr;
  double time_ms() const { return run->real_time_ms(); }
};
// Families in order of first appearance, each one's sizes ascending; failed runs are left out.
std::vector<BenchPoint> median_points(const std::vector<BenchRun>& runs);

struct BenchPeaks {
  double fma_gflops = 0, sgemm_gflops = 0, roofline_gflops = 0;
  std::string fma_method, sgemm_method, roofline_is;  // roofline_is: fma or sgemm
};

// A family's O(n^2) fit (benchmarks/scaling_fit.hpp) and what it was fitted on.
struct BenchFit {
  std::string family, implementation, dtype, mask, device;
  std::string pass = "forward";  // forward, backward or forward_backward (benchmarks/problem_list.hpp, Pass)
  std::int64_t head_dim = 0, fit_min_n = 0;
  std::vector<std::int64_t> sizes_measured;
  std::int64_t workspace_bytes_at_16384 = 0;
  std::optional<std::string> roofline_precision;  // GPU families: the GEMM precision of their roofline
  std::optional<double> exponent, r_squared, coefficient_ms;
  std::optional<std::int64_t> points;
  std::optional<double> bigo_n_squared_coefficient_ms, bigo_rms;
  // The measured sizes the fit used (n >= fit_min_n), or none without a fit.
  std::vector<std::int64_t> sizes_used() const;
};

// The "attnbench" section.
struct BenchSection {
  nlohmann::json context = nlohmann::json::object();  // records/context.hpp's block
  bool complete = false;  // false while the run goes on (the file is rewritten after every benchmark)
  BenchPeaks peaks;
  std::string rss_growth_method;
  std::vector<BenchFit> fits;
  std::vector<std::string> notes, errors;
  // Passed through as written (benchmarks/README.md describes them): the GPU device, timing and
  // peaks; the machine's load; the side-by-side comparison with the peers.
  nlohmann::json gpu, machine_load, peers;
};

struct BenchDocument {
  std::optional<Shard> shard;
  nlohmann::ordered_json benchmark_context = nlohmann::ordered_json::object();  // Google Benchmark's "context"
  std::vector<BenchRun> runs;
  BenchSection attnbench;
};

nlohmann::ordered_json to_json(const BenchRun& run);
nlohmann::ordered_json to_json(const BenchDocument& document);

// Reads a bench document (also one written before the top-level schema field, and one whose
// runs carry no "family"/"n": both are taken from the run name). Unknown fields are ignored.
// Throws InputError naming `source` and the field on a missing array or a field of the wrong
// type.
BenchDocument read_bench_document(const nlohmann::json& document, const std::string& source);

}  // namespace attn

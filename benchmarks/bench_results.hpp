#pragma once
// What a bench run measured, per family: the median run of each n (records/bench_record.hpp's
// median_points, computed once), the O(n^2) fit (scaling_fit.hpp), Google Benchmark's
// complexity rows and the errors; the GPU side of the run; and how both go into the result
// file's typed section and the console.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmarks/device_plan.hpp"
#include "benchmarks/gpu_peaks.hpp"
#include "benchmarks/problem_list.hpp"
#include "benchmarks/scaling_fit.hpp"
#include "records/bench_record.hpp"

namespace attn::bench {

inline constexpr std::int64_t workspace_probe_n = 16384;  // the memory target is stated at this n

struct Row {  // one n of one family: its median run
  std::int64_t n = 0;
  double time_ms = 0;
  const BenchRun* run = nullptr;
  double counter(const std::string& name) const { return run->counter(name); }
};

struct FamilyResult {
  const FamilySpec* family = nullptr;
  std::vector<Row> rows;  // ascending n
  std::optional<PowerLawFit> fit;
  std::optional<double> bigo_coefficient_ms, bigo_rms;
  std::vector<std::string> errors;
};

// The runs (which must outlive the result) grouped by the families, each fitted over n >= fit_min_n.
std::vector<FamilyResult> collect(const std::vector<FamilySpec>& families, const std::vector<BenchRun>& runs, std::int64_t fit_min_n);

// The section's "fits" entry of a family that ran (rows or errors); none for a family the filter left out.
std::optional<BenchFit> to_bench_fit(const FamilyResult& result, std::int64_t fit_min_n);

// What the GPU side of a run measured and how (only filled when a GPU family runs).
struct GpuRun {
  L2Mode l2 = L2Mode::cold;
  std::vector<GemmPrecision> precisions;  // of the GPU families the filter selects: the GEMM peaks measured
  std::optional<GpuPeaks> peaks;
  std::string timing;               // GpuTimer::method()
  std::vector<std::string> errors;  // the GPU could not be set up, or its peaks not measured
};

// The "gpu" entry of the attnbench section: the device (or why there is none), the L2 mode, the
// timing method, the peaks, the skipped implementations and any setup error.
nlohmann::json gpu_section(const DeviceStatus& device, const GpuRun& gpu, const std::vector<std::string>& skipped);

// The summary table and the fits, printed after Google Benchmark's own lines.
void print_table(const std::vector<FamilyResult>& results, const GpuRun& gpu);
void print_fits(const std::vector<FamilyResult>& results, std::int64_t fit_min_n);

}  // namespace attn::bench

#pragma once
// What Google Benchmark reports, kept as typed runs (records/bench_record.hpp): the reporter
// forwards everything to the display reporter Google Benchmark would have used (so
// --benchmark_format and --benchmark_color keep working), converts every run into a BenchRun
// and Google Benchmark's context into the "context" block its JSONReporter would write, and
// after every benchmark calls `on_runs` (which rewrites the result file, so a run that dies
// keeps every benchmark that finished). The JSON itself is written from those records, never
// from Google Benchmark's text.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "benchmarks/bench.hpp"
#include "records/bench_record.hpp"

namespace attn::bench {

// AddCustomContext, remembered: Google Benchmark keeps its custom context to itself, and the
// JSON's context block needs it.
class CustomContext {
 public:
  void add(const std::string& key, const std::string& value);
  const std::vector<std::pair<std::string, std::string>>& items() const { return items_; }

 private:
  std::vector<std::pair<std::string, std::string>> items_;
};

// One Google Benchmark run as the bench file records it. `n` comes from the run's "n:N"
// argument (Benchmark::ArgName("n")); complexity rows have none.
BenchRun to_bench_run(const benchmark::BenchmarkReporter::Run& run);

class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  // on_runs(reporter, name): after each benchmark's runs are collected and displayed; name is
  // empty for a family's complexity rows.
  CollectingReporter(const CustomContext& custom, std::function<void(const CollectingReporter&, const std::string& name)> on_runs,
                     const std::vector<BenchObserver*>& observers);
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override;
  void Finalize() override;

  const std::vector<BenchRun>& runs() const { return runs_; }
  // Google Benchmark's "context" block as its JSONReporter writes it, then the custom context.
  const nlohmann::ordered_json& context() const { return context_; }

 private:
  benchmark::BenchmarkReporter* inner_;
  const CustomContext& custom_;
  std::function<void(const CollectingReporter&, const std::string&)> on_runs_;
  const std::vector<BenchObserver*>& observers_;
  std::vector<BenchRun> runs_;
  nlohmann::ordered_json context_ = nlohmann::ordered_json::object();
};

}  // namespace attn::bench

#include "benchmarks/bench_reporter.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <sstream>

#include <fmt/format.h>

namespace attn::bench {
namespace {

using Run = benchmark::BenchmarkReporter::Run;

const char* time_unit_name(benchmark::TimeUnit unit) {
  switch (unit) {
    case benchmark::kNanosecond: return "ns";
    case benchmark::kMicrosecond: return "us";
    case benchmark::kMillisecond: return "ms";
    case benchmark::kSecond: return "s";
  }
  return "ns";
}

// Google Benchmark's date: local time with its offset, "2026-11-26T19:30:00+00:00".
std::string local_date() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char buffer[40];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S%z", &tm);
  std::string date = buffer;
  if (date.size() > 2) date.insert(date.size() - 2, ":");
  return date;
}

// The complexity of a BigO row as Google Benchmark names it.
std::string big_o_name(benchmark::BigO complexity) {
  switch (complexity) {
    case benchmark::oN: return "N";
    case benchmark::oNSquared: return "N^2";
    case benchmark::oNCubed: return "N^3";
    case benchmark::oLogN: return "lgN";
    case benchmark::oNLogN: return "NlgN";
    case benchmark::o1: return "(1)";
    default: return "f(N)";
  }
}

}  // namespace

void CustomContext::add(const std::string& key, const std::string& value) {
  benchmark::AddCustomContext(key, value);
  items_.emplace_back(key, value);
}

BenchRun to_bench_run(const Run& run) {
  BenchRun r;
  r.name = run.benchmark_name();
  r.run_name = run.run_name.str();
  r.family = run.run_name.function_name;
  if (const auto at = run.run_name.args.find("n:"); at != std::string::npos) r.n = std::stoll(run.run_name.args.substr(at + 2));
  r.family_index = run.family_index;
  r.per_family_instance_index = run.per_family_instance_index;
  r.aggregate = run.run_type == Run::RT_Aggregate;
  r.aggregate_name = run.aggregate_name;
  if (r.aggregate) r.aggregate_unit = run.aggregate_unit == benchmark::kPercentage ? "percentage" : "time";
  r.repetitions = run.repetitions;
  r.repetition_index = run.repetition_index;
  r.threads = run.threads;
  r.iterations = run.iterations;
  r.time_unit = time_unit_name(run.time_unit);
  if (run.error_occurred) r.error = run.error_message;
  if (run.report_big_o) {
    r.big_o = big_o_name(run.complexity);
    r.real_time = run.GetAdjustedRealTime();
    r.cpu_time = run.GetAdjustedCPUTime();
  } else if (run.report_rms) {
    r.rms = run.GetAdjustedCPUTime();  // relative: the time unit does not apply
  } else {
    r.real_time = run.GetAdjustedRealTime();
    r.cpu_time = run.GetAdjustedCPUTime();
  }
  r.label = run.report_label;
  for (const auto& [name, counter] : run.counters) r.counters[name] = counter.value;
  return r;
}

CollectingReporter::CollectingReporter(const CustomContext& custom, std::function<void(const CollectingReporter&, const std::string&)> on_runs,
                                       const std::vector<BenchObserver*>& observers)
    : inner_(benchmark::CreateDefaultDisplayReporter()), custom_(custom), on_runs_(std::move(on_runs)), observers_(observers) {}
// CreateDefaultDisplayReporter returns the library's own process-wide instance: not ours to
// delete (deleting it breaks the next run in the same process).

bool CollectingReporter::ReportContext(const Context& context) {
  // Debian's libbenchmark is compiled without NDEBUG, so its console reporter warns "Library
  // was built as DEBUG. Timings may be affected." That build leaves the library's internal
  // checks on, which run between timed batches; the timed loop is inlined from the library's
  // headers into this build (compiler_flags). The warning is replaced by what it means here.
  // The console reporter prints the context on its error stream.
  std::ostream& out = inner_->GetErrorStream();
  std::ostringstream text;
  inner_->SetErrorStream(&text);
  const bool ok = inner_->ReportContext(context);
  inner_->SetErrorStream(&out);
  bool debug_library = false;
  std::istringstream lines(text.str());
  for (std::string line; std::getline(lines, line);) {
    if (line.find("Library was built as DEBUG") != std::string::npos) {
      debug_library = true;
      line = "note: Google Benchmark's library (Debian's package) was built without NDEBUG; its checks run between timed batches, "
             "while the timed loop and the kernels are this build's (compiler_flags above): the timings are not a debug build's";
    }
    out << line << '\n';
  }
  out.flush();

  // The keys and order of Google Benchmark's JSONReporter (1.7), so compare.py reads the file.
  const benchmark::CPUInfo& cpu = context.cpu_info;
  nlohmann::ordered_json c{{"date", local_date()}, {"host_name", context.sys_info.name}};
  if (Context::executable_name != nullptr) c["executable"] = Context::executable_name;
  c["num_cpus"] = cpu.num_cpus;
  c["mhz_per_cpu"] = static_cast<std::int64_t>(cpu.cycles_per_second / 1e6 + 0.5);
  if (cpu.scaling != benchmark::CPUInfo::UNKNOWN) c["cpu_scaling_enabled"] = cpu.scaling == benchmark::CPUInfo::ENABLED;
  c["caches"] = nlohmann::ordered_json::array();
  for (const auto& cache : cpu.caches)
    c["caches"].push_back({{"type", cache.type}, {"level", cache.level}, {"size", cache.size}, {"num_sharing", cache.num_sharing}});
  c["load_avg"] = cpu.load_avg;
  c["library_build_type"] = debug_library ? "debug" : "release";
  for (const auto& [key, value] : custom_.items()) c[key] = value;
  context_ = std::move(c);
  return ok;
}

void CollectingReporter::ReportRuns(const std::vector<Run>& runs) {
  for (const Run& run : runs) runs_.push_back(to_bench_run(run));
  for (BenchObserver* observer : observers_) observer->before_console_line();
  inner_->ReportRuns(runs);
  // A size's repetitions arrive in one report, their mean, median, stddev and cv in a second,
  // and a family's O(n^2) fit (BigO and RMS rows) in one of its own: only the first is a
  // benchmark finished.
  const bool aggregates = std::all_of(runs.begin(), runs.end(), [](const Run& r) { return r.run_type == Run::RT_Aggregate; });
  if (on_runs_ && !runs.empty()) on_runs_(*this, aggregates ? std::string() : runs.front().benchmark_name());
}

void CollectingReporter::Finalize() {
  for (BenchObserver* observer : observers_) observer->before_console_line();
  inner_->Finalize();
}

}  // namespace attn::bench

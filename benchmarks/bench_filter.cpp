#include "benchmarks/bench_filter.hpp"

#include <regex>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "benchmarks/bench_bodies.hpp"
#include "core/error.hpp"

namespace attn::bench {

void initialise_benchmark_library(const std::vector<std::string>& benchmark_flags, bool smoke) {
  std::vector<std::string> args{"attnbench bench"};
  // A machine shared with others slows down for seconds at a time. Sizes timed one after the
  // other then carry the slowdown into a run of neighbouring sizes of one family, and the
  // fitted exponent bends with it; repetitions interleaved at random spread it over every size
  // and family, and each size's median leaves a slow repetition out. Before the user's flags,
  // which Google Benchmark reads in order: a later one wins.
  if (!smoke)
    for (std::string flag : {fmt::format("--benchmark_repetitions={}", timed_repetitions), std::string("--benchmark_enable_random_interleaving=true"),
                             fmt::format("--benchmark_min_time={}", repetition_seconds)})
      args.push_back(std::move(flag));
  for (const auto& flag : benchmark_flags) {
    if (flag.rfind("--benchmark_", 0) != 0)
      throw InputError(fmt::format("unknown option '{}' (Google Benchmark flags start with --benchmark_ and take '=VALUE')", flag));
    if (flag.rfind("--benchmark_out=", 0) == 0 || flag.rfind("--benchmark_out_format", 0) == 0)
      throw InputError(fmt::format("'{}': use --json PATH for the JSON output", flag));
    args.push_back(flag);
  }
  // Google Benchmark keeps argv[0] (the "executable" of its context) as a pointer: it must
  // outlive the run. The flags it copies.
  static std::string program_name = "attnbench bench";
  std::vector<char*> argv{program_name.data()};
  for (std::size_t i = 1; i < args.size(); ++i) argv.push_back(args[i].data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  benchmark::Initialize(&argc, argv.data());
  if (argc > 1) {
    std::vector<std::string> unknown(argv.begin() + 1, argv.begin() + argc);
    throw InputError(fmt::format("Google Benchmark did not accept: {}", fmt::join(unknown, " ")));
  }
}

std::size_t selected_sizes(const FamilySpec& family, bool smoke) {
  std::string spec = benchmark::GetBenchmarkFilter();
  if (spec.empty() || spec == "all") return family.sizes.size();
  const bool negative = spec[0] == '-';
  if (negative) spec.erase(0, 1);
  try {
    const std::regex re(spec, std::regex::extended);
    std::size_t count = 0;
    for (std::int64_t n : family.sizes)
      if (std::regex_search(fmt::format("{}/n:{}{}/{}", family.name(), n, smoke ? "/iterations:1" : "",
                                        uses_manual_time(*family.implementation) ? "manual_time" : "real_time"),
                            re) != negative)
        ++count;
    return count;
  } catch (const std::regex_error&) {
    return family.sizes.size();
  }
}

}  // namespace attn::bench

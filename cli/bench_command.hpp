#pragma once
// `attnbench bench`: benchmarks implementations with Google Benchmark (benchmarks/bench.hpp);
// --benchmark_* flags pass through. Registered by main.cpp.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "benchmarks/bench.hpp"
#include "impls/registry.hpp"

namespace attn::cli {

class BenchCommand {
 public:
  explicit BenchCommand(CLI::App& app);
  bool parsed() const { return command_->parsed(); }
  // 0 when every benchmark ran, 1 when one reported an error or --peers failed
  // (bench::run_bench); throws attn::InputError (exit 2) on bad options or an unknown
  // implementation.
  int run(const Registry& registry);

 private:
  CLI::App* command_;
  bench::BenchOptions options_;
  std::vector<std::string> implementations_;
  std::string shard_;
};

}  // namespace attn::cli

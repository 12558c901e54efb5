// attnbench: the command line. Each subcommand parses its options and calls into the folders
// that do the work; nothing here computes anything of its own.
//
// Exit codes: 0 every supported case passed (bench: every benchmark ran; properties: every
// property held, or was a finding, n/a or gave up), 1 a case failed (bench: a benchmark reported
// an error, or the --peers command failed; properties: one failed), 2 bad usage or bad input.
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "benchmarks/bench.hpp"
#include "cli/cases_command.hpp"
#include "cli/check_command.hpp"
#include "cli/gate_command.hpp"
#include "cli/list_command.hpp"
#include "cli/properties_command.hpp"
#include "cli/report_command.hpp"
#include "cli/select_implementations.hpp"
#include "cli/validate_command.hpp"
#include "cli/verify_command.hpp"
#include "core/case_sets.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "impls/registry.hpp"
#include "reports/context.hpp"
#include "reports/progress.hpp"
#include "reports/results.hpp"

namespace {

constexpr int exit_pass = 0, exit_fail = 1, exit_usage = 2;

int run_bench(const attn::Registry& registry, const std::vector<std::string>& names, attn::bench::BenchOptions options,
              const std::string& shard) {
  options.implementations = attn::cli::select_implementations(registry, names);
  if (!shard.empty()) {
    const attn::Shard s = attn::parse_shard(shard);
    options.shard = std::pair{s.index, s.count};
  }
  options.context = attn::run_context(options.threads > 0 ? options.threads : attn::default_thread_count());
  attn::Progress progress("bench", 0, stdout, attn::Progress::stdout_is_terminal());
  options.progress = {[&](std::size_t total) { progress.set_total(total); }, [&] { progress.clear(); },
                      [&](const std::string& name) { progress.step(name); }, [&] { progress.finish(); }};
  return attn::bench::run_bench(options);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnbench: verify and benchmark scaled dot-product attention implementations"};
  app.require_subcommand(1);

  const attn::cli::VerifyCommand verify(app);
  const attn::cli::ListCommand list(app);
  const attn::cli::PropertiesCommand properties(app);

  attn::bench::BenchOptions bench_args;
  std::vector<std::string> bench_impls;
  auto* bench = app.add_subcommand("bench", "Benchmark implementations (Google Benchmark): time, GFLOP/s, fraction of the "
                                            "measured peak, memory, and the fitted O(n^2) exponent; --benchmark_* flags pass through");
  bench->add_option("--impl", bench_impls, "Implementation to benchmark (repeatable; default: all)");
  bench->add_option("--dtype", bench_args.dtypes, "Dtypes, comma-separated (default: f32; --smoke: every dtype each accepts)")->delimiter(',');
  bench->add_option("--masks", bench_args.masks, "Masks, comma-separated: none, causal (top-left), bottom_right")->delimiter(',')->capture_default_str();
  bench->add_option("--d", bench_args.head_dims, "Head dimensions d_k = d_v, comma-separated")->delimiter(',')->capture_default_str();
  bench->add_option("--heads", bench_args.heads, "Heads (h_q = h_kv)")->capture_default_str();
  bench->add_option("--batch", bench_args.batch, "Batch size")->capture_default_str();
  bench->add_option("--threads", bench_args.threads, "Threads for the implementations and the peak probes (default: all cores)");
  bench->add_option("--min-n", bench_args.min_n, "Smallest sequence length (a power of two)")->capture_default_str();
  bench->add_option("--max-n", bench_args.max_n, "Largest sequence length (a power of two)")->capture_default_str();
  bench->add_option("--naive-max-n", bench_args.naive_max_n, "Largest n for cpu_naive (single-threaded, n^2 memory)")->capture_default_str();
  bench->add_option("--fit-min-n", bench_args.fit_min_n, "Smallest n in the log-log exponent fit")->capture_default_str();
  bench->add_option("--json", bench_args.json_path, "Google Benchmark JSON output ('' to skip)")->capture_default_str();
  bench->add_flag("--smoke", bench_args.smoke, "Tiny sizes (n = 16..64), one iteration each, short peak probes: for CTest");
  bench->add_option("--peers", bench_args.peers_command,
                    "Afterwards run COMMAND through /bin/sh (a peers script, e.g. '.venv/bin/python benchmarks/peers/cpu_peers.py' or "
                    "'python3 benchmarks/peers/torch_sdpa.py') with --min-n --max-n --threads --masks --batch --heads --d --dtype "
                    "[--l2] --out appended, and compare its medians with ours per (dtype, d, mask, n)");
  bench->add_option("--l2", bench_args.l2,
                    "GPU families: cold (flush L2 before every timed iteration) or hot (no flush); part of their names")
      ->capture_default_str();
  std::string bench_shard;
  bench->add_option("--shard", bench_shard, "Run part I of N of the families (I/N: family position modulo N; each family's n-sweep "
                                            "stays whole), e.g. for a CI matrix; `attnbench report` merges the shards");
  bench->allow_extras();

  const attn::cli::GateCommand gate(app);
  const attn::cli::ReportCommand report(app);
  const attn::cli::CasesCommand cases(app);
  const attn::cli::CheckCommand check(app);
  const attn::cli::ValidateCommand validate(app);

  // CLI11 would only say "a subcommand is required"; name the word it did not know.
  auto is_subcommand = [&](const char* word) {
    try {
      return app.get_subcommand(word) != nullptr;
    } catch (const CLI::OptionNotFound&) {
      return false;
    }
  };
  if (argc > 1 && argv[1][0] != '-' && !is_subcommand(argv[1])) {
    std::vector<std::string> known;
    for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) known.push_back(sub->get_name());
    fmt::print(stderr, "attnbench: error: unknown subcommand '{}' (known: {}; see --help)\n", argv[1], fmt::join(known, ", "));
    return exit_usage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? exit_pass : exit_usage;
  }

  try {
    attn::Registry registry;
    attn::register_builtin_implementations(registry);
    if (verify.parsed()) return verify.run(registry);
    if (list.parsed()) return list.run(registry);
    if (gate.parsed()) return gate.run();
    if (report.parsed()) return report.run();
    if (cases.parsed()) return cases.run();
    if (check.parsed()) return check.run();
    if (validate.parsed()) return validate.run();
    if (properties.parsed()) return properties.run(registry);
    if (bench->parsed()) {
      bench_args.benchmark_flags = bench->remaining();
      return run_bench(registry, bench_impls, bench_args, bench_shard);
    }
  } catch (const attn::InputError& e) {
    fmt::print(stderr, "attnbench: error: {}\n", e.what());
    return exit_usage;
  } catch (const std::exception& e) {
    fmt::print(stderr, "attnbench: internal error: {}\n", e.what());
    return exit_fail;
  }
  return exit_usage;
}

#include "cli/validate_command.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "benchmarks/bench.hpp"
#include "core/case_sets.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "impls/plugin/plugin_implementation.hpp"
#include "properties/property_suite.hpp"
#include "reports/context.hpp"
#include "reports/progress.hpp"
#include "reports/properties_report.hpp"
#include "reports/report.hpp"
#include "reports/results.hpp"
#include "reports/verify_report.hpp"

namespace attn::cli {
namespace {

std::string join_path(const std::string& dir, const char* file) { return (std::filesystem::path(dir) / file).string(); }

}  // namespace

ValidateCommand::ValidateCommand(CLI::App& app) {
  command_ = app.add_subcommand("validate",
                                "Validate a third-party kernel (a shared library implementing impls/plugin/attnbench_plugin.h): verify "
                                "cases, the property suite and optionally benchmarks, each call isolated in a worker process");
  command_->add_option("--plugin", plugin_path_, "The plugin's shared library (PATH.so)")->required();
  auto* cases = command_->add_option("--cases", cases_, "Case set: default, quick, or a file of repro strings")->capture_default_str();
  command_->add_option("--case", single_case_, "Verify exactly one case, given as its repro string")->excludes(cases);
  command_->add_option("--properties", properties_, "Property numbers to check, comma-separated (default: all)")->delimiter(',');
  command_->add_option("--property-cases", property_cases_, "Successful cases per property (0: skip the property suite)")->capture_default_str();
  command_->add_option("--seed", seed_, "RapidCheck seed for the property suite (default: a fresh one, printed)");
  command_->add_flag("--no-shrink", no_shrink_, "Report a property's first counterexample without shrinking it (each shrink step is a call)");
  command_->add_flag("--masked-nonfinite-safe", masked_nonfinite_safe_,
                     "Declare that the plugin keeps NaN/Inf in masked K/V rows out of every output (ABI version 1 cannot say it): "
                     "property 13 then fails instead of reporting a finding");
  command_->add_flag("--bench", bench_, "Also benchmark the plugin (times measured inside the worker: the plugin's calls alone)");
  command_->add_option("--bench-dtype", bench_dtypes_, "Benchmark dtypes, comma-separated (default: f32)")->delimiter(',');
  command_->add_option("--bench-max-n", bench_max_n_, "Largest benchmark sequence length (a power of two)")->capture_default_str();
  command_->add_option("--timeout", timeout_seconds_, "Seconds a single plugin call may take before it is killed and fails its case")
      ->capture_default_str();
  command_->add_option("--out", out_dir_, "Directory for verify.json, properties.json, bench.json and report.{md,html}")->capture_default_str();
}

int ValidateCommand::run() const {
  if (!(timeout_seconds_ > 0)) throw InputError("--timeout must be positive");
  if (property_cases_ < 0) throw InputError("--property-cases must not be negative");
  const auto& suite = property_suite();
  for (int number : properties_)
    if (number < 1 || number > int(suite.size())) throw InputError(fmt::format("--properties {}: there are properties 1 to {}", number, suite.size()));
  std::vector<Problem> cases = single_case_.empty() ? load_cases(cases_) : std::vector<Problem>{parse_problem(single_case_)};
  for (const auto& p : cases) p.validate();

  plugin::PluginOptions options;
  options.timeout_seconds = timeout_seconds_;
  options.masked_nonfinite_safe = masked_nonfinite_safe_;
  const auto plugin = plugin::PluginImplementation::load(plugin_path_, options);
  const plugin::PluginInfo& info = plugin->info();
  fmt::print("attnbench validate: plugin {} {} (ABI version {}) from {}\n  {}\n", info.name, info.version, info.abi_version, info.path,
             info.description);
  for (const auto& line : plugin::describe_capabilities(info)) fmt::print("  {}\n", line);
  if (!plugin->unavailable_reason().empty()) fmt::print("  unavailable here: {} (every case is skipped)\n", plugin->unavailable_reason());
  fmt::print("  isolation: each call in a worker process (attnbench-plugin-host), timeout {:g} s, guard pages after every buffer\n\n",
             timeout_seconds_);
  std::fflush(stdout);

  std::filesystem::create_directories(out_dir_);
  const auto context = run_context(default_thread_count());
  std::vector<std::string> written;
  bool all_held = true;
  bool nothing_ran = false;  // every verify case skipped (unsupported, or no device)

  // Verify: saved after every case, so a run that dies keeps what it measured.
  {
    const std::string path = join_path(out_dir_, "verify.json");
    VerifyOptions verify_options;
    fmt::print("verify: {} case(s)\n", cases.size());
    print_verify_header(std::cout);
    Progress progress("verify", cases.size(), stdout, Progress::stdout_is_terminal());
    const VerifyRun run = verify({plugin.get()}, cases, verify_options, [&](const VerifyRun& so_far, const Record& record) {
      progress.clear();
      print_verify_row(std::cout, record);
      std::cout.flush();
      progress.step(fmt::format("case {}", record.context->index));
      write_json_file(path, verify_to_json(so_far, verify_options, context));
    });
    progress.finish();
    write_json_file(path, verify_to_json(run, verify_options, context));
    print_verify_summary(std::cout, run, [&](const Record& r) {
      return fmt::format("attnbench validate --plugin {} --case '{}'", plugin_path_, r.context->problem.repro());
    });
    written.push_back(path);
    all_held = all_held && run.failed() == 0;
    nothing_ran = run.passed() + run.failed() == 0;
  }

  // A plugin that cannot run here (a CUDA plugin without a device) has every case skipped; the
  // property suite and the benchmarks would only report that again.
  const bool runnable = plugin->unavailable_reason().empty();
  if (!runnable && (property_cases_ > 0 || bench_)) fmt::print("\nproperties and benchmarks not run: {}\n", plugin->unavailable_reason());

  // The property suite, each of its many calls isolated like verify's.
  if (runnable && property_cases_ > 0) {
    const std::string path = join_path(out_dir_, "properties.json");
    PropertyOptions property_options;
    property_options.cases = property_cases_;
    property_options.seed = seed_;
    property_options.shrink = !no_shrink_;
    PropertiesJson results(property_options, context);
    int failed = 0, findings = 0, gave_up = 0;
    fmt::print("\nproperties: {} case(s) each\n", property_cases_);
    for (const Property& property : suite) {
      if (!properties_.empty() && std::find(properties_.begin(), properties_.end(), property.number) == properties_.end()) continue;
      const PropertyVerdict v = check_property(property, *plugin, property_options);
      using Kind = PropertyVerdict::Kind;
      switch (v.kind) {
        case Kind::held:
          fmt::print("  {:>2} held on {} cases{}: {}\n", property.number, v.cases,
                     v.projected > 0 ? fmt::format(" ({} projected onto what it accepts)", v.projected) : "", property.name);
          break;
        case Kind::not_applicable: fmt::print("  {:>2} n/a: {}: {}\n", property.number, v.message, property.name); break;
        case Kind::gave_up:
          // Too few problems it accepts to run the cases asked for: not a pass, and not a failure.
          ++gave_up;
          fmt::print("  {:>2} gave up after {} of {} cases: {} ({})\n", property.number, v.cases, property_cases_, property.name, v.message);
          break;
        case Kind::finding:
        case Kind::failed:
          ++(v.kind == Kind::failed ? failed : findings);
          fmt::print("  {:>2} {}: {}\n{}", property.number, v.kind == Kind::failed ? "FAILED" : "FINDING (not a failure)", property.name,
                     describe_failure(v));
          // The lines above name the registry's commands; a plugin is rerun through validate.
          if (!v.repro.empty())
            fmt::print("  for this plugin: attnbench validate --plugin {} --case '{}'\n", plugin_path_, v.repro);
          break;
      }
      std::fflush(stdout);
      results.add(v, property, *plugin);
      write_json_file(path, results.to_json());
    }
    results.complete = true;
    write_json_file(path, results.to_json());
    fmt::print("properties: {} failed, {} finding(s), {} gave up\n", failed, findings, gave_up);
    written.push_back(path);
    all_held = all_held && failed == 0;
  }

  if (runnable && bench_) {
    bench::BenchOptions bench_options;
    bench_options.implementations = {plugin.get()};
    bench_options.dtypes = bench_dtypes_;
    bench_options.max_n = bench_max_n_;
    bench_options.min_n = std::min<std::int64_t>(128, bench_max_n_);
    bench_options.fit_min_n = std::min<std::int64_t>(512, bench_max_n_);
    bench_options.json_path = join_path(out_dir_, "bench.json");
    bench_options.context = context;
    fmt::print("\nbench (the plugin's calls timed inside its worker):\n");
    std::fflush(stdout);
    const int rc = bench::run_bench(bench_options);
    written.push_back(bench_options.json_path);
    all_held = all_held && rc == 0;
  }

  std::vector<ResultFile> files;
  for (const auto& path : written) files.push_back(load_result_file(path));
  const auto [markdown, html] = write_report(render_report(merge_results(files)), out_dir_);
  fmt::print("\nresults: {}\nreport: {}, {}\nworker processes started: {} (one more after each crash or hang)\n", fmt::join(written, ", "),
             markdown, html, plugin->workers_started());
  fmt::print("attnbench validate: {}\n", !all_held ? "FAILED" : nothing_ran ? "nothing failed, nothing ran (every case skipped)" : "PASSED");
  return all_held ? 0 : 1;
}

}  // namespace attn::cli

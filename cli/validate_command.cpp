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
#include "core/result_file.hpp"
#include "impls/plugin/plugin_implementation.hpp"
#include "impls/plugin/worker_process.hpp"
#include "cli/run_output.hpp"
#include "records/context.hpp"
#include "reports/report.hpp"
#include "reports/results.hpp"

namespace attn::cli {
namespace {

// Runs of a replayed case (validate --case): as many as property 10 makes of one problem.
constexpr std::size_t replay_runs = 8;

std::string join_path(const std::string& dir, const char* file) { return (std::filesystem::path(dir) / file).string(); }

// One line per property, numbered; a failure with its counterexample and the commands that replay it.
class ValidateProperties final : public PropertiesObserver {
 public:
  ValidateProperties(int cases, bool replay, std::string rerun_prefix) : cases_(cases), replay_(replay), rerun_prefix_(std::move(rerun_prefix)) {}
  void not_run(const Property& property, const Implementation&, const std::string& why) override {
    fmt::print("  {:>2} not run: {}: {}\n", property.number, why, property.name);
  }
  void verdict_made(const PropertyVerdict& v, const Property& property, const Implementation&) override {
    using Kind = PropertyVerdict::Kind;
    switch (v.kind) {
      case Kind::held:
        fmt::print("  {:>2} held on {} cases{}: {}\n", property.number, v.cases,
                   v.projected > 0 ? fmt::format(" ({} projected onto what it accepts)", v.projected) : "", property.name);
        break;
      case Kind::not_applicable: fmt::print("  {:>2} n/a: {}: {}\n", property.number, v.message, property.name); break;
      case Kind::gave_up:
        // Too few problems it accepts to run the cases asked for: not a pass, and not a failure.
        fmt::print("  {:>2} gave up after {} of {} cases: {} ({})\n", property.number, v.cases, cases_, property.name, v.message);
        break;
      case Kind::finding:
      case Kind::failed:
        fmt::print("  {:>2} {}: {}\n  {}\n  counterexample: {}\n", property.number,
                   v.kind == Kind::failed ? "FAILED" : "FINDING (not a failure: see --masked-nonfinite-safe)", property.name, v.message, v.repro);
        if (!v.repro.empty())
          fmt::print("  {}: {} --case '{}' --property {}\n", v.kind == Kind::failed ? "rerun" : "replay the finding", rerun_prefix_, v.repro,
                     property.number);
        if (!replay_ && v.kind == Kind::failed)
          fmt::print("  the same draws: {} --property {} --seed {}\n", rerun_prefix_, property.number, v.seed);
        break;
    }
    std::fflush(stdout);
  }

 private:
  int cases_;
  bool replay_;
  std::string rerun_prefix_;
};

}  // namespace

ValidateCommand::ValidateCommand(CLI::App& app) {
  command_ = app.add_subcommand("validate",
                                "Validate a third-party kernel (a shared library implementing impls/plugin/attnbench_plugin.h): verify "
                                "cases, the property suite and optionally benchmarks, each call isolated in a worker process");
  command_->add_option("--plugin", plugin_path_, "The plugin's shared library (PATH.so)")->required();
  auto* cases = command_->add_option("--cases", cases_, "Case set: default, quick, or a file of repro strings")->capture_default_str();
  command_->add_option("--case", single_case_,
                       "Exactly one case, given as its repro string: verified alone, or with --property checked by those properties "
                       "(how a printed failure replays)")
      ->excludes(cases);
  command_->add_flag("--backward", backward_,
                     "Verify the backward pass on each case (op=backward), as verify --backward does: the plugin's forward, then "
                     "its backward fed that forward's O and LSE, its dQ, dK and dV judged against the reference's gradients (the "
                     "property suite still checks the forward pass)");
  command_->add_option("--properties,--property", properties_, "Property numbers to check, comma-separated (default: all)")->delimiter(',');
  command_->add_option("--property-cases", property_cases_, "Successful cases per property (0: skip the property suite)")->capture_default_str();
  command_->add_option("--seed", seed_, "RapidCheck seed for the property suite (default: a fresh one, printed); with --property, "
                                        "replays that property's draws");
  command_->add_flag("--no-shrink", no_shrink_, "Report a property's first counterexample without shrinking it (each shrink step is a call)");
  command_->add_flag("--bench", bench_, "Also benchmark the plugin (times measured inside the worker: the plugin's calls alone)");
  command_->add_option("--bench-dtype", bench_dtypes_, "Benchmark dtypes, comma-separated (default: f32)")->delimiter(',');
  command_->add_option("--bench-max-n", bench_max_n_, "Largest benchmark sequence length (a power of two)")->capture_default_str();
  command_->add_option("--timeout", timeout_seconds_, "Seconds a single plugin call may take before it is killed and fails its case")
      ->capture_default_str();
  command_->add_option("--plugin-memory-limit", memory_limit_,
                       "The worker's address-space limit (RLIMIT_AS), e.g. 8G or 512M (binary units), or none; a runaway allocation "
                       "then fails its case, naming the limit (default: half of this machine's memory)")
      ->type_name("SIZE");
  command_->add_option("--sandbox", sandbox_,
                       "on: the worker runs the plugin in the sandbox (its own PID and network namespaces, seccomp, Landlock: no "
                       "signal to another process, no new process, no network, writes only to a scratch directory; each refused "
                       "call fails its case, named); off: with the harness's rights, for a kernel that needs more")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  command_->add_option("--out", out_dir_, "Directory for verify.json, properties.json, bench.json and report.{md,html}")->capture_default_str();
  command_->add_flag("--allow-empty", allow_empty_, "Exit 0 even when no case and no property ran (default: that fails)");
  command_->add_flag("--masked-nonfinite-safe", masked_nonfinite_safe_,
                     "Declare that the kernel keeps masked K/V rows out entirely (NaN/Inf there never reach an output): property 13 "
                     "(the check of it) then fails instead of reporting a finding (ABI version 1 has no field for it)");
  command_->add_option("--matmul-unit-roundoff", matmul_unit_roundoff_,
                       "Declare the unit roundoff of the kernel's matrix products when coarser than the dtype's: 0.00048828125 = "
                       "2^-11 (TF32 or f16 products) or 0.00390625 = 2^-8 (bf16 products); the pass rule and the properties' "
                       "tolerances scale by it (ABI version 1 has no field for it)");
  command_->add_option("--accumulation-unit-roundoff", accumulation_unit_roundoff_,
                       "Declare the unit roundoff of the kernel's accumulators when coarser than the working precision's (f32 for "
                       "f16/bf16/f32 data): 0.00048828125 = 2^-11 (an f16 accumulator) or 0.00390625 = 2^-8 (bf16); the pass rule "
                       "scales by the coarser of this and the products' (ABI version 1 has no field for it; version 2's "
                       "accumulation_bits says it)");
}

std::string ValidateCommand::rerun_prefix() const {
  std::string command = fmt::format("attnbench validate --plugin {}", plugin_path_);
  if (masked_nonfinite_safe_) command += " --masked-nonfinite-safe";
  if (matmul_unit_roundoff_ != 0) command += fmt::format(" --matmul-unit-roundoff {}", matmul_unit_roundoff_);
  if (accumulation_unit_roundoff_ != 0) command += fmt::format(" --accumulation-unit-roundoff {}", accumulation_unit_roundoff_);
  if (timeout_seconds_ != 60) command += fmt::format(" --timeout {}", timeout_seconds_);
  if (!memory_limit_.empty()) command += fmt::format(" --plugin-memory-limit {}", memory_limit_);
  if (sandbox_ == "off") command += " --sandbox=off";
  return command;
}

int ValidateCommand::run() const {
  if (!(timeout_seconds_ > 0)) throw InputError("--timeout must be positive");
  if (property_cases_ < 0) throw InputError("--property-cases must not be negative");
  // A declared unit roundoff (0: none given), read as a precision or refused naming the flag.
  auto precision_flag = [](double u, std::string_view flag, std::string_view hint) -> std::optional<MatmulPrecision> {
    if (u == 0) return std::nullopt;
    try {
      return matmul_precision_of(u);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}{}", flag, e.what(), hint));
    }
  };
  const std::optional<MatmulPrecision> matmul_precision = precision_flag(matmul_unit_roundoff_, "--matmul-unit-roundoff", "");
  const std::optional<MatmulPrecision> accumulation_precision =
      precision_flag(accumulation_unit_roundoff_, "--accumulation-unit-roundoff", " (here: 2^-11 = an f16 accumulator, 2^-8 = bf16)");
  properties_numbered(properties_, "--properties");  // a bad number is bad input before the plugin loads
  std::vector<Problem> cases = single_case_ ? std::vector<Problem>{parse_problem(*single_case_)} : load_cases(cases_);
  for (auto& p : cases) {
    if (backward_) p.operation = Operation::backward;
    p.validate();
    check_case_memory(p, {});
  }
  // Every file it writes, checked before the plugin is loaded: a bad --out is bad input, not a
  // failure after minutes of cases.
  prepare_result_dir(out_dir_, "--out");
  for (const char* file : {"verify.json", "properties.json", "bench.json", "report.md", "report.html"})
    prepare_result_path(join_path(out_dir_, file), "--out");

  plugin::PluginOptions options;
  options.timeout_seconds = timeout_seconds_;
  options.masked_nonfinite_safe = masked_nonfinite_safe_;
  options.matmul_precision = matmul_precision;
  options.accumulation_precision = accumulation_precision;
  if (!memory_limit_.empty()) {
    options.memory_limit_bytes = plugin::parse_byte_size(memory_limit_);
    if (!options.memory_limit_bytes)
      throw InputError(fmt::format("--plugin-memory-limit {}: not a size (e.g. 8G, 512M, 1073741824, or none)", memory_limit_));
  }
  options.sandbox = sandbox_ != "off";
  const auto plugin = plugin::PluginImplementation::load(plugin_path_, options);
  const plugin::PluginInfo& info = plugin->info();
  fmt::print("attnbench validate: plugin {} {} (ABI version {}) from {}\n  {}\n", info.name, info.version, info.abi_version, info.path,
             info.description);
  for (const auto& line : plugin::describe_capabilities(info)) fmt::print("  {}\n", line);
  if (!plugin->unavailable_reason().empty()) fmt::print("  unavailable here: {} (every case is skipped)\n", plugin->unavailable_reason());
  fmt::print("  isolation: each call in a worker process (attnbench-plugin-host) leading its own process group, timeout {:g} s "
             "(after {} in a row the plugin gets no more calls), guard pages after every buffer, its output kept on failure\n"
             "  memory limit: {}\n"
             "  sandbox: {}\n\n",
             timeout_seconds_, plugin::timeouts_before_giving_up, plugin->memory_limit_description(), plugin->sandbox_description());
  std::fflush(stdout);

  auto context = run_context(default_thread_count());
  context["plugin_worker"] = {{"sandbox", plugin->sandbox_json()}, {"memory_limit", plugin->memory_limit_description()}};
  std::vector<std::string> written;
  bool all_held = true;
  int ran = 0;  // verify cases and property draws that ran: none is not a pass
  // --case with --property replays a property's counterexample: that problem, those properties.
  const bool replay_property = single_case_ && !properties_.empty();

  // Verify: saved after every case, so a run that dies keeps what it measured.
  if (!replay_property) {
    const std::string path = join_path(out_dir_, "verify.json");
    VerifyRequest request;
    request.implementations = {plugin.get()};
    if (single_case_) {
      // A replay runs the case several times, all as case 0 (one layout): a failure that depends
      // on the plugin's earlier calls (state kept between calls, a race lost now and then) shows
      // again, where one call would pass.
      request.cases.assign(replay_runs, cases.front());
      request.options.case_numbers.assign(replay_runs, 0);
      fmt::print("verify: the one case, {} times\n", replay_runs);
    } else {
      request.cases = cases;
      fmt::print("verify: {} case(s)\n", cases.size());
    }
    VerifyConsole console({.progress_label = "verify", .name_implementation = false});
    VerifyResultsFile results(path, [&](const VerifyRun& run) { return verify_to_json(run, request.options, context, "validate"); });
    const VerifyRun run = run_verify(request, {&console, &results});
    print_verify_summary(std::cout, run, [&](const Record& r) { return fmt::format("{} --case '{}'", rerun_prefix(), r.context->problem.repro()); });
    written.push_back(path);
    all_held = all_held && run.failed() == 0;
    ran += run.passed() + run.failed();
  }

  // A plugin that cannot run here (a CUDA plugin without a device) has every case skipped; the
  // property suite and the benchmarks would only report that again. So has one that hung twice in
  // a row: each further call would cost a timeout.
  auto stopped = [&] { return !plugin->unavailable_reason().empty() ? plugin->unavailable_reason() : plugin->given_up_reason(); };
  bool runnable = stopped().empty();
  const bool check_properties = replay_property || (!single_case_ && property_cases_ > 0);
  if (!runnable && (check_properties || bench_)) fmt::print("\nproperties and benchmarks not run: {}\n", stopped());

  // The property suite, each of its many calls isolated like verify's.
  if (runnable && check_properties) {
    const std::string path = join_path(out_dir_, "properties.json");
    PropertiesRequest request;
    request.implementations = {plugin.get()};
    // In the suite's order, each once, however --properties lists them.
    std::vector<int> numbers = properties_;
    std::sort(numbers.begin(), numbers.end());
    numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
    request.properties = properties_numbered(numbers, "--properties");
    request.options.cases = property_cases_;
    request.options.seed = seed_;
    request.options.shrink = !no_shrink_;
    if (replay_property) {
      // A replayed property is checked up to replay_runs times on its problem, for the same reason
      // a replayed case runs several times: a failure may depend on the plugin's earlier calls.
      request.single_case = cases.front();
      request.rounds = int(replay_runs);
      fmt::print("\nproperties on the one case '{}'\n", cases.front().repro());
    } else {
      fmt::print("\nproperties: {} case(s) each\n", property_cases_);
    }
    request.stopped = [&](const Implementation&) { return plugin->given_up_reason(); };
    ValidateProperties console(property_cases_, replay_property, rerun_prefix());
    PropertiesResultsFile results(path, PropertiesJson(request.options, context));
    const PropertiesOutcome outcome = run_properties(request, {&console, &results});
    ran += outcome.cases + outcome.findings;  // a finding ran its property (a replayed one ran nothing else)
    fmt::print("properties: {} failed, {} finding(s), {} gave up\n", outcome.failed, outcome.findings, outcome.gave_up);
    written.push_back(path);
    all_held = all_held && outcome.failed == 0;
  }

  if (runnable && !stopped().empty() && bench_) fmt::print("\nbenchmarks not run: {}\n", stopped());
  runnable = stopped().empty();
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
  if (!all_held) {
    fmt::print("attnbench validate: FAILED\n");
    return 1;
  }
  if (ran == 0) {
    fmt::print("attnbench validate: {}: no case and no property ran (every case skipped{})\n", allow_empty_ ? "nothing failed" : "FAILED",
               runnable ? "" : ": " + stopped());
    return allow_empty_ ? 0 : 1;
  }
  fmt::print("attnbench validate: PASSED\n");
  return 0;
}

}  // namespace attn::cli

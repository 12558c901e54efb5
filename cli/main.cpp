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

#include "cli/bench_command.hpp"
#include "cli/cases_command.hpp"
#include "cli/check_command.hpp"
#include "cli/gate_command.hpp"
#include "cli/report_command.hpp"
#include "cli/validate_command.hpp"
#include "core/case_sets.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/result_file.hpp"
#include "impls/registry.hpp"
#include "properties/property_suite.hpp"
#include "records/context.hpp"
#include "records/progress.hpp"
#include "reports/properties_report.hpp"
#include "reports/results.hpp"
#include "reports/verify_report.hpp"

namespace {

constexpr int exit_pass = 0, exit_fail = 1, exit_usage = 2;

struct VerifyArgs {
  std::vector<std::string> implementations;
  std::string cases = "default";
  std::optional<std::string> single_case;  // given, even empty: exactly that case (an empty one is refused)
  std::optional<std::uint64_t> seed;
  std::string json_path = "results/verify.json";
  double k = attn::PassRule{}.k;
  double floor_ulps = attn::PassRule{}.floor_ulps;
  int threads = 0;
  std::string shard;  // --shard I/N
  bool no_diagnosis = false;
  bool no_projection = false;
  bool allow_empty = false;
  std::optional<double> sample_rows_above;  // multiply-adds; unset: every row of every case
};

std::vector<const attn::Implementation*> select(const attn::Registry& registry, const std::vector<std::string>& names) {
  if (names.empty()) return registry.all();
  std::vector<const attn::Implementation*> chosen;
  for (const auto& name : names) {
    const auto* impl = registry.find(name);
    if (impl == nullptr)
      throw attn::InputError(fmt::format("unknown implementation '{}' (known: {})", name, fmt::join(registry.names(), ", ")));
    chosen.push_back(impl);
  }
  return chosen;
}

int run_verify(const attn::Registry& registry, const VerifyArgs& args) {
  auto implementations = select(registry, args.implementations);
  std::vector<attn::Problem> cases = args.single_case ? std::vector<attn::Problem>{attn::parse_problem(*args.single_case)}
                                                     : attn::load_cases(args.cases);
  if (args.seed)
    for (auto& p : cases) p.seed = *args.seed;
  if (!(args.k >= 0) || !(args.floor_ulps >= 0)) throw attn::InputError("--k and --floor-ulps must be non-negative");

  attn::VerifyOptions options;
  options.rule = {args.k, args.floor_ulps};
  options.reference.threads = args.threads;
  if (args.sample_rows_above) {
    if (!(*args.sample_rows_above >= 0)) throw attn::InputError("--sample-rows-above must be a non-negative number of multiply-adds");
    options.reference.max_work = *args.sample_rows_above;
  }
  options.diagnosis.threads = args.threads;
  options.diagnosis.enabled = !args.no_diagnosis;
  options.project = !args.no_projection;
  std::optional<attn::Shard> shard;
  if (!args.shard.empty()) {
    shard = attn::parse_shard(args.shard);
    const std::size_t total = cases.size();
    std::vector<attn::Problem> mine;
    for (std::size_t position : attn::shard_positions(total, *shard)) {
      mine.push_back(cases[position]);
      options.case_numbers.push_back(position);
    }
    cases = std::move(mine);
    fmt::print("attnbench verify: shard {}/{}: {} of the {} cases (case index modulo {})\n", shard->index, shard->count, cases.size(), total,
               shard->count);
  }
  // Before any case runs: a --json that cannot be written, or a case too large for this machine,
  // must not cost the run (or end it in std::bad_alloc).
  if (!args.json_path.empty()) attn::prepare_result_path(args.json_path, "--json");
  for (const auto& p : cases) attn::check_case_memory(p, options.reference, implementations);
  const auto context = attn::run_context(args.threads > 0 ? args.threads : attn::default_thread_count());
  auto to_json = [&](const attn::VerifyRun& run) {
    auto doc = attn::verify_to_json(run, options, context);
    if (shard) doc["shard"] = shard->to_json();
    return doc;
  };

  fmt::print("attnbench verify: {} implementation(s) x {} case(s); pass rule: max abs error <= {} x naive + {} ulps\n\n",
             implementations.size(), cases.size(), args.k, args.floor_ulps);
  attn::print_verify_header(std::cout);
  // Save after every case, so a run that dies keeps what it measured.
  attn::ResultsFile results(args.json_path);
  attn::Progress progress("verify", implementations.size() * cases.size(), stdout, attn::Progress::stdout_is_terminal());
  auto on_record = [&](const attn::VerifyRun& run, const attn::Record& record) {
    progress.clear();
    attn::print_verify_row(std::cout, record);
    std::cout.flush();
    progress.step(fmt::format("{} case {}", record.implementation, record.context->index));
    const bool case_done = record.implementation == implementations.back()->name();
    if (case_done && !args.json_path.empty()) results.save(to_json(run));
  };
  const attn::VerifyRun run = attn::verify(implementations, cases, options, on_record);
  progress.finish();
  if (!args.json_path.empty()) results.finish(to_json(run));
  attn::print_verify_summary(std::cout, run);
  if (!args.json_path.empty()) fmt::print("results: {}\n", args.json_path);
  if (run.failed() > 0) return exit_fail;
  // Nothing ran is not a pass: an implementation asked for by name that ran no case (no device,
  // nothing it supports), or a run in which no implementation ran anything.
  if (!args.allow_empty) {
    std::vector<std::string> idle;
    for (const auto* impl : implementations)
      if (run.ran(impl->name()) == 0 && (!args.implementations.empty() || run.passed() == 0)) idle.push_back(impl->name());
    if (!idle.empty()) {
      fmt::print("attnbench verify: FAILED: no case ran for {} (every case skipped; the reasons are above). "
                 "--allow-empty accepts that.\n",
                 fmt::join(idle, ", "));
      return exit_fail;
    }
  }
  return exit_pass;
}

struct PropertiesArgs {
  std::vector<std::string> implementations;
  std::vector<int> properties;
  int cases = 40;
  std::uint64_t seed = 0;
  std::optional<std::string> single_case;
  bool large = false;
  std::string json_path;  // --json: the property summary (schema attnbench.properties)
};

// The property suite against the chosen implementations: RapidCheck draws the problems, or
// --case runs every chosen property on exactly that problem (how a printed failure reruns).
int run_properties(const attn::Registry& registry, const PropertiesArgs& args) {
  const auto implementations = select(registry, args.implementations);
  const auto& suite = attn::property_suite();
  std::vector<const attn::Property*> chosen;
  for (int number : args.properties) {
    if (number < 1 || number > int(suite.size()))
      throw attn::InputError(fmt::format("--property {}: there are properties 1 to {}", number, suite.size()));
    chosen.push_back(&suite[std::size_t(number - 1)]);
  }
  if (chosen.empty())
    for (const auto& property : suite) chosen.push_back(&property);
  if (args.cases < 1) throw attn::InputError("--cases must be positive");
  std::optional<attn::Problem> problem;
  if (args.single_case) {
    problem = attn::parse_problem(*args.single_case);
    problem->validate();
    attn::check_case_memory(*problem, {}, implementations);
  }
  if (!args.json_path.empty()) attn::prepare_result_path(args.json_path, "--json");
  attn::PropertyOptions options;
  options.cases = args.cases;
  options.seed = args.seed;
  options.large = args.large;
  int failed = 0, findings = 0, gave_up = 0;
  // Saved after every (property, implementation), so a run that dies keeps what it checked.
  attn::PropertiesJson results(options, attn::run_context(attn::default_thread_count()));
  attn::ResultsFile file(args.json_path);
  if (problem) results.single_case = problem->repro();
  for (const attn::Property* property : chosen) {
    fmt::print("property {}: {}\n", property->number, property->name);
    for (const attn::Implementation* impl : implementations) {
      const attn::PropertyVerdict v =
          problem ? attn::check_property_on(*property, *impl, *problem) : attn::check_property(*property, *impl, options);
      using Kind = attn::PropertyVerdict::Kind;
      switch (v.kind) {
        case Kind::held:
          fmt::print("  {:<14} held{}\n", impl->name(),
                     problem ? "" : fmt::format(" on {} cases{} (RapidCheck seed {})", v.cases,
                                                v.projected > 0 ? fmt::format(", {} projected onto what it accepts", v.projected) : "", v.seed));
          break;
        case Kind::not_applicable: fmt::print("  {:<14} n/a: {}\n", impl->name(), v.message); break;
        case Kind::gave_up:
          // Neither a pass nor a failure: too few problems it accepts for the cases asked.
          ++gave_up;
          fmt::print("  {:<14} gave up after {} of {} cases: {} (RapidCheck seed {})\n", impl->name(), v.cases, args.cases, v.message, v.seed);
          break;
        case Kind::finding:
        case Kind::failed:
          ++(v.kind == Kind::failed ? failed : findings);
          fmt::print("  {:<14} {}\n", impl->name(), v.kind == Kind::failed ? "FAILED" : "FINDING (not a failure)");
          if (problem)
            fmt::print("    {}\n", v.message);
          else
            fmt::print("{}", attn::describe_failure(v));
          break;
      }
      std::fflush(stdout);
      results.add(v, *property, *impl);
      if (!args.json_path.empty()) file.save(results.to_json());
    }
  }
  if (!args.json_path.empty()) {
    results.complete = true;
    file.finish(results.to_json());
  }
  fmt::print("\n{} failed, {} finding(s), {} gave up\n", failed, findings, gave_up);
  if (!args.json_path.empty()) fmt::print("results: {}\n", args.json_path);
  return failed > 0 ? exit_fail : exit_pass;
}

int run_list(const attn::Registry& registry) {
  for (const auto* impl : registry.all()) {
    const auto caps = impl->describe();
    std::vector<std::string> dtypes;
    for (auto d : caps.dtypes) dtypes.emplace_back(attn::to_string(d));
    fmt::print("{}\n  {}\n  device: {}; dtypes: {}; returns LSE: {}; returns weights: {}; deterministic: {}; fully masked rows: {}\n",
               impl->name(), caps.summary, caps.device, fmt::join(dtypes, ", "), caps.returns_lse ? "yes" : "no",
               caps.returns_weights ? "yes" : "no", caps.deterministic ? "yes" : "no", attn::to_string(caps.fully_masked));
  }
  return exit_pass;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnbench: verify and benchmark scaled dot-product attention implementations"};
  app.require_subcommand(1);

  VerifyArgs verify_args;
  auto* verify = app.add_subcommand("verify", "Run implementations on a case set against the high-precision reference");
  verify->add_option("--impl", verify_args.implementations, "Implementation to verify (repeatable; default: all)");
  verify->add_option("--cases", verify_args.cases, "Case set: default, quick, or a file of repro strings")->capture_default_str();
  verify->add_option("--case", verify_args.single_case, "Run exactly one case, given as its repro string");
  verify->add_option("--seed", verify_args.seed, "Override every case's seed (draws new data)");
  verify->add_option("--json", verify_args.json_path, "Where to write the JSON results ('' to skip)")->capture_default_str();
  verify->add_option("--k", verify_args.k, "Pass rule: allowed multiple of the naive same-precision error")->capture_default_str();
  verify->add_option("--floor-ulps", verify_args.floor_ulps, "Pass rule: ulp floor of the tolerance")->capture_default_str();
  verify->add_option("--threads", verify_args.threads, "Threads for the reference (default: all cores)");
  verify->add_flag("--no-diagnosis", verify_args.no_diagnosis, "Do not test known mistakes against failing outputs");
  verify->add_flag("--no-projection", verify_args.no_projection,
                   "Skip a case an implementation does not support (default: run its projection onto what it declares)");
  verify->add_flag("--allow-empty", verify_args.allow_empty,
                   "Exit 0 even when an implementation asked for by name ran no case (default: that fails)");
  verify->add_option("--sample-rows-above", verify_args.sample_rows_above,
                     "On a case whose reference would take more than twice WORK multiply-adds (n_k (d_k + d_v) per row), compare "
                     "a seeded sample of about WORK's worth of rows (at least 48; the first and last always); the report marks "
                     "such cases [checked/total rows]. Default: every row of every case")
      ->type_name("WORK");
  verify->add_option("--shard", verify_args.shard, "Run part I of N of the cases (I/N: case index modulo N), e.g. for a CI matrix; "
                                                  "`attnbench report` merges the shards");
  verify->get_option("--case")->excludes(verify->get_option("--cases"));

  auto* list = app.add_subcommand("list", "List the implementations and what each supports");

  PropertiesArgs properties_args;
  auto* properties = app.add_subcommand("properties", "Check the invariants of attention (RapidCheck property suite) on implementations");
  properties->add_option("--impl", properties_args.implementations, "Implementation to check (repeatable; default: all)");
  properties->add_option("--property", properties_args.properties, "Property number (repeatable; default: all)");
  properties->add_option("--cases", properties_args.cases, "Successful cases per property and implementation")->capture_default_str();
  properties->add_option("--seed", properties_args.seed, "RapidCheck seed (default: a fresh one, printed)");
  properties->add_option("--case", properties_args.single_case, "Check exactly this problem (a repro string), as a failure prints it");
  properties->add_flag("--large", properties_args.large, "The slow sweep: 16x the work per problem, longer sequences more often");
  properties->add_option("--json", properties_args.json_path, "Also write the verdicts as JSON (schema attnbench.properties)");

  attn::cli::BenchCommand bench(app);
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
    if (verify->parsed()) return run_verify(registry, verify_args);
    if (list->parsed()) return run_list(registry);
    if (gate.parsed()) return gate.run();
    if (report.parsed()) return report.run();
    if (cases.parsed()) return cases.run();
    if (check.parsed()) return check.run();
    if (validate.parsed()) return validate.run();
    if (properties->parsed()) return run_properties(registry, properties_args);
    if (bench.parsed()) return bench.run(registry);
  } catch (const attn::InputError& e) {
    fmt::print(stderr, "attnbench: error: {}\n", e.what());
    return exit_usage;
  } catch (const std::exception& e) {
    fmt::print(stderr, "attnbench: internal error: {}\n", e.what());
    return exit_fail;
  }
  return exit_usage;
}

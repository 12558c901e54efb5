// attnbench: the command line. Each subcommand parses its options and calls into the folders
// that do the work; nothing here computes anything of its own.
//
// Exit codes: 0 every supported case passed (bench: every benchmark ran; properties: every
// property held, or was a finding, n/a or gave up), 1 a case failed (bench: a benchmark reported
// an error, or the --peers command failed; properties: one failed), 2 bad usage or bad input.
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/bench_command.hpp"
#include "cli/cases_command.hpp"
#include "cli/check_command.hpp"
#include "cli/gate_command.hpp"
#include "cli/list_command.hpp"
#include "cli/properties_command.hpp"
#include "cli/report_command.hpp"
#include "cli/validate_command.hpp"
#include "cli/verify_command.hpp"
#include "core/error.hpp"
#include "impls/registry.hpp"
#include "records/context.hpp"

namespace {

constexpr int exit_pass = 0, exit_fail = 1, exit_usage = 2;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnbench: verify and benchmark scaled dot-product attention implementations"};
  app.require_subcommand(1);
  app.set_version_flag("--version", fmt::format("attnbench {} (git {})", ATTN_VERSION, attn::build_revision()),
                       "Print the version and the git revision of this build, then exit");

  const attn::cli::VerifyCommand verify(app);
  const attn::cli::ListCommand list(app);
  const attn::cli::PropertiesCommand properties(app);
  attn::cli::BenchCommand bench(app);
  const attn::cli::GateCommand gate(app);
  const attn::cli::ReportCommand report(app);
  const attn::cli::CasesCommand cases(app);
  const attn::cli::CheckCommand check(app);
  const attn::cli::ValidateCommand validate(app);

  // Every --help states its command's exit codes (2 is always bad usage or bad input, named).
  const std::map<std::string, std::string> exit_codes{
      {"verify", "0 every supported case passed; 1 a case failed, or an implementation ran no case (--allow-empty accepts that)"},
      {"list", "0 listed"},
      {"properties", "0 every property held (or was a finding, n/a or gave up); 1 a property failed"},
      {"bench", "0 every benchmark ran; 1 a benchmark reported an error, or the --peers command failed"},
      {"gate", "0 every gated case passed (or --write-baseline wrote it); 1 the gate failed"},
      {"report", "0 both files written; 1 written, but a file is of a run that did not finish (--allow-incomplete exits 0)"},
      {"cases", "0 the cases directory was written"},
      {"check", "0 every case passed; 1 a case failed, or none was checked (--allow-empty accepts that)"},
      {"validate", "0 every case passed, every property held and every benchmark ran; 1 one did not (a crash or a hang included)"},
  };
  app.footer("Exit codes: 0 success, 1 something failed (see each command's --help), 2 bad usage or bad input (the message names it)");
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    if (const auto it = exit_codes.find(sub->get_name()); it != exit_codes.end())
      sub->footer(fmt::format("Exit codes: {}; 2 bad usage or bad input (the message names it).", it->second));

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

#include "cli/properties_command.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "cli/run_output.hpp"
#include "cli/select_implementations.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/result_file.hpp"
#include "records/context.hpp"
#include "verification/verify.hpp"

namespace attn::cli {
namespace {

// One line per (property, implementation); a failure with its counterexample and rerun commands.
class PropertiesConsole final : public PropertiesObserver {
 public:
  PropertiesConsole(int cases, bool single_case) : cases_(cases), single_case_(single_case) {}
  void property_started(const Property& property) override { fmt::print("property {}: {}\n", property.number, property.name); }
  void verdict_made(const PropertyVerdict& v, const Property&, const Implementation& impl) override {
    using Kind = PropertyVerdict::Kind;
    switch (v.kind) {
      case Kind::held:
        fmt::print("  {:<14} held{}\n", impl.name(),
                   single_case_ ? "" : fmt::format(" on {} cases{} (RapidCheck seed {})", v.cases,
                                                  v.projected > 0 ? fmt::format(", {} projected onto what it accepts", v.projected) : "", v.seed));
        break;
      case Kind::not_applicable: fmt::print("  {:<14} n/a: {}\n", impl.name(), v.message); break;
      case Kind::gave_up:
        // Neither a pass nor a failure: too few problems it accepts for the cases asked.
        fmt::print("  {:<14} gave up after {} of {} cases: {} (RapidCheck seed {})\n", impl.name(), v.cases, cases_, v.message, v.seed);
        break;
      case Kind::finding:
      case Kind::failed:
        fmt::print("  {:<14} {}\n", impl.name(), v.kind == Kind::failed ? "FAILED" : "FINDING (not a failure)");
        if (single_case_)
          fmt::print("    {}\n", v.message);
        else
          fmt::print("{}", describe_failure(v));
        break;
    }
    std::fflush(stdout);
  }

 private:
  int cases_;
  bool single_case_;
};

}  // namespace

PropertiesCommand::PropertiesCommand(CLI::App& app) {
  command_ = app.add_subcommand("properties", "Check the invariants of attention (RapidCheck property suite) on implementations");
  command_->add_option("--impl", implementations_, "Implementation to check (repeatable; default: all)");
  command_->add_option("--properties,--property", properties_, "Property numbers, comma-separated or repeated (default: all)")->delimiter(',');
  command_->add_option("--property-cases", cases_, "Successful cases per property and implementation")->capture_default_str();
  // --cases is a case set in every other command: here it is refused, naming what it became.
  command_->add_option("--cases", cases_given_as_count_)->group("");
  command_->add_option("--seed", seed_, "RapidCheck seed (default: a fresh one, printed)");
  command_->add_option("--case", single_case_, "Check exactly this problem (a repro string), as a failure prints it");
  command_->add_flag("--large", large_, "The slow sweep: 16x the work per problem, longer sequences more often");
  command_->add_option("--json", json_path_, "Also write the verdicts as JSON (schema attnbench.properties)");
}

int PropertiesCommand::run(const Registry& registry) const {
  PropertiesRequest request;
  request.implementations = select_implementations(registry, implementations_);
  request.properties = properties_numbered(properties_, "--property");
  if (cases_given_as_count_)
    throw InputError(fmt::format("properties: --cases is a case set in every command; the number of successful cases per property is "
                                 "--property-cases {}",
                                 *cases_given_as_count_));
  if (cases_ < 1) throw InputError("--property-cases must be positive");
  if (single_case_) {
    request.single_case = parse_problem(*single_case_);
    request.single_case->validate();
    check_case_memory(*request.single_case, {}, request.implementations);
  }
  if (!json_path_.empty()) prepare_result_path(json_path_, "--json");
  request.options.cases = cases_;
  request.options.seed = seed_;
  request.options.large = large_;
  PropertiesJson json(request.options, run_context(default_thread_count()));
  if (request.single_case) json.single_case = request.single_case->repro();
  PropertiesConsole console(cases_, request.single_case.has_value());
  PropertiesResultsFile results(json_path_, std::move(json));
  const PropertiesOutcome outcome = run_properties(request, {&console, &results});
  fmt::print("\n{} failed, {} finding(s), {} gave up\n", outcome.failed, outcome.findings, outcome.gave_up);
  if (!json_path_.empty()) fmt::print("results: {}\n", json_path_);
  return outcome.failed > 0 ? 1 : 0;
}

}  // namespace attn::cli

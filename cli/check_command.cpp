#include "cli/check_command.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <stdexcept>

#include <fmt/format.h>

#include "core/case_files.hpp"
#include "core/given_case.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/result_file.hpp"
#include "cli/run_output.hpp"
#include "impls/file_outputs/file_outputs.hpp"
#include "verification/given_outputs.hpp"
#include "records/context.hpp"
#include "records/progress.hpp"
#include "reports/verify_report.hpp"

namespace attn::cli {

CheckCommand::CheckCommand(CLI::App& app)
    : command_(app.add_subcommand("check", "Verify outputs another program wrote (out_NNNN.npy) for a cases directory, or for your "
                                           "own tensors (--inputs), against the reference, as verify does")),
      k_(PassRule{}.k),
      floor_ulps_(PassRule{}.floor_ulps) {
  auto* cases = command_->add_option("--cases", cases_dir_, "The cases directory (`attnbench cases --out`)");
  auto* inputs = command_->add_option("--inputs", inputs_dirs_,
                                      "A directory of your own tensors: q.npy, k.npy, v.npy, settings.json, optional mask.npy, bias.npy, "
                                      "valid_lens.npy, and out.npy (optional lse.npy; keep.npy with settings' dropout) to judge (repeatable; cli/README.md)");
  cases->excludes(inputs);
  inputs->excludes(cases);
  command_->add_option("--outputs", outputs_dirs_,
                       "With --cases: the directory of out_NNNN.npy (and optional lse_NNNN.npy; keep_NNNN.npy for a dropout case; dq_NNNN.npy, "
                       "dk_NNNN.npy and dv_NNNN.npy for a backward case) files. "
                       "With --inputs: where out.npy (and lse.npy, keep.npy) are, once per --inputs in the same order (default: the "
                       "inputs directory)");
  command_->add_option("--json", json_path_, "Where to write the JSON results ('' to skip)")->capture_default_str();
  command_->add_option("--k", k_, "Pass rule: allowed multiple of the naive same-precision error")->capture_default_str();
  command_->add_option("--floor-ulps", floor_ulps_, "Pass rule: ulp floor of the tolerance")->capture_default_str();
  command_->add_option("--threads", threads_, "Threads for the reference (default: all cores)");
  command_->add_flag("--allow-empty", allow_empty_, "Exit 0 even when no case was checked (default: that fails)");
  command_->add_option("--declare", declaration_,
                       "The kernel's capabilities declaration (JSON; default: the one `cases --declare` kept in the manifest): a case "
                       "outside it is skipped with the reason or checked as its projection, fully masked rows by its policy");
}

int CheckCommand::run() const {
  if (!(k_ >= 0) || !(floor_ulps_ >= 0)) throw InputError("--k and --floor-ulps must be non-negative");
  if (!json_path_.empty()) prepare_result_path(json_path_, "--json");
  if (!inputs_dirs_.empty()) return run_given();
  if (cases_dir_.empty()) throw InputError("check: --cases DIR (with --outputs DIR) or --inputs DIR is required");
  if (outputs_dirs_.size() != 1) throw InputError("check --cases: exactly one --outputs DIR is required");
  const std::string& outputs_dir = outputs_dirs_.front();
  const CaseDirectory directory = read_case_directory(cases_dir_);
  // A manifest's case too large for this machine is refused before its inputs are generated.
  for (const auto& entry : directory.cases) check_case_memory(entry.problem, {});
  // The inputs on disk (a backward case's dO too) must be the ones the reference will regenerate,
  // or the check means nothing.
  for (const auto& entry : directory.cases) check_case_inputs(directory, entry, generate_inputs(entry.problem));

  const FileRouteCheck plan = plan_file_route_check(directory, declaration_);
  const std::vector<Problem>& cases = plan.cases;
  VerifyOptions options;
  options.rule = {k_, floor_ulps_};
  options.reference.threads = threads_;
  options.project = plan.project;
  options.case_numbers = plan.case_numbers;
  const FileOutputs outputs(outputs_dir, directory.cases, plan.declared);
  const auto context = run_context(threads_ > 0 ? threads_ : default_thread_count());

  fmt::print("attnbench check: {} case(s) of {} against {}; pass rule: max abs error <= {} x naive + {} ulps\n", cases.size(), cases_dir_,
             outputs_dir, k_, floor_ulps_);
  if (plan.declared) fmt::print("declared by {}: fully masked rows {}\n", plan.declared_by, to_string(plan.declared->fully_masked));
  fmt::print("\n");
  VerifyRequest request{{&outputs}, cases, options};
  VerifyConsole console({.progress_label = "check", .name_implementation = false});
  VerifyResultsFile results(json_path_, [&](const VerifyRun& run) { return verify_to_json(run, request.options, context, "check"); });
  const VerifyRun run = run_verify(request, {&console, &results});
  // check has no --case: the whole directory is rerun, and a case repeats with its repro string.
  print_verify_summary(std::cout, run, [&](const Record& r) {
    return fmt::format("attnbench check --cases {} --outputs {} (this case alone: attnbench cases --out DIR --case '{}')", cases_dir_,
                       outputs_dir, r.context->problem.repro());
  });
  if (!json_path_.empty()) fmt::print("results: {}\n", json_path_);
  if (run.failed() > 0) return 1;
  if (run.passed() == 0 && !allow_empty_) {
    fmt::print("attnbench check: FAILED: no case was checked (every case skipped; --allow-empty accepts that)\n");
    return 1;
  }
  return 0;
}

int CheckCommand::run_given() const {
  if (!outputs_dirs_.empty() && outputs_dirs_.size() != inputs_dirs_.size())
    throw InputError(fmt::format("check --inputs: {} --outputs for {} --inputs (give one per --inputs, in the same order, or none)",
                                 outputs_dirs_.size(), inputs_dirs_.size()));
  if (!json_path_.empty()) prepare_result_path(json_path_, "--json");
  // Everything is read first: a bad file is bad input before any reference is computed.
  std::vector<GivenCase> given;
  for (std::size_t n = 0; n < inputs_dirs_.size(); ++n)
    given.push_back(read_given_case(inputs_dirs_[n], outputs_dirs_.empty() ? std::filesystem::path{} : std::filesystem::path(outputs_dirs_[n])));

  // The LSE is judged for all or none (verify asks an implementation for it on every case or on none).
  for (std::size_t n = 1; n < given.size(); ++n)
    if (given[n].lse.has_value() != given[0].lse.has_value()) {
      const std::size_t with = given[n].lse ? n : 0, without = given[n].lse ? 0 : n;
      throw InputError(fmt::format("check --inputs: {} has an lse.npy and {} has none: give one for every --inputs or for none",
                                   given[with].source, given[without].source));
    }

  VerifyOptions options;
  options.rule = {k_, floor_ulps_};
  options.reference.threads = threads_;
  const GivenOutputs outputs(given, "inputs", "outputs of your own tensors (check --inputs)");
  const VerifyRequest request = given_outputs_request(outputs, options);
  const std::vector<Problem>& cases = request.cases;
  // The reference and the yardstick of a capture too large for this machine are refused up front.
  for (const Problem& p : cases) check_case_memory(p, {});
  const auto context = run_context(threads_ > 0 ? threads_ : default_thread_count());

  fmt::print("attnbench check: {} case(s) of your own tensors ({}); pass rule: max abs error <= {} x naive + {} ulps\n\n", cases.size(),
             fmt::join(inputs_dirs_, ", "), k_, floor_ulps_);
  VerifyConsole console({.progress_label = std::nullopt, .name_implementation = true, .extra = [](const Record& record) { return fmt::format("{:<22}inputs: {}\n", "", record.context->inputs_from); }});
  VerifyResultsFile results(json_path_, [&](const VerifyRun& run) { return verify_to_json(run, request.options, context, "check"); });
  const VerifyRun run = run_verify(request, {&console, &results});
  // The repro string describes the case's shapes only; the rerun is the same directories.
  print_verify_summary(std::cout, run, [&](const Record& r) {
    const std::size_t n = r.context->index;
    return fmt::format("attnbench check --inputs {}{} (the case is {}; its repro string cannot regenerate them)", inputs_dirs_.at(n),
                       outputs_dirs_.empty() ? "" : " --outputs " + outputs_dirs_.at(n), r.context->inputs_from);
  });
  if (!json_path_.empty()) fmt::print("results: {}\n", json_path_);
  return run.failed() > 0 ? 1 : 0;
}

}  // namespace attn::cli

#include "cli/check_command.hpp"

#include <iostream>

#include <fmt/format.h>

#include "core/case_files.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/result_file.hpp"
#include "impls/file_outputs/file_outputs.hpp"
#include "reports/context.hpp"
#include "reports/progress.hpp"
#include "reports/verify_report.hpp"

namespace attn::cli {

CheckCommand::CheckCommand(CLI::App& app)
    : command_(app.add_subcommand("check", "Verify outputs another program wrote (out_NNNN.npy) for a cases directory against the "
                                           "reference, as verify does")),
      k_(PassRule{}.k),
      floor_ulps_(PassRule{}.floor_ulps) {
  command_->add_option("--cases", cases_dir_, "The cases directory (`attnbench cases --out`)")->required();
  command_->add_option("--outputs", outputs_dir_, "The directory of out_NNNN.npy (and optional lse_NNNN.npy) files")->required();
  command_->add_option("--json", json_path_, "Where to write the JSON results ('' to skip)")->capture_default_str();
  command_->add_option("--k", k_, "Pass rule: allowed multiple of the naive same-precision error")->capture_default_str();
  command_->add_option("--floor-ulps", floor_ulps_, "Pass rule: ulp floor of the tolerance")->capture_default_str();
  command_->add_option("--threads", threads_, "Threads for the reference (default: all cores)");
  command_->add_flag("--allow-empty", allow_empty_, "Exit 0 even when no case was checked (default: that fails)");
}

int CheckCommand::run() const {
  if (!(k_ >= 0) || !(floor_ulps_ >= 0)) throw InputError("--k and --floor-ulps must be non-negative");
  if (!json_path_.empty()) prepare_result_path(json_path_, "--json");
  const CaseDirectory directory = read_case_directory(cases_dir_);
  // A manifest's case too large for this machine is refused before its inputs are generated.
  for (const auto& entry : directory.cases) check_case_memory(entry.problem, {});
  // The inputs on disk must be the ones the reference will regenerate, or the check means nothing.
  for (const auto& entry : directory.cases) check_case_inputs(directory, entry, generate_inputs(entry.problem));

  std::vector<Problem> cases;
  VerifyOptions options;
  options.rule = {k_, floor_ulps_};
  options.reference.threads = threads_;
  options.project = false;  // the outputs answer the named cases exactly
  for (const auto& entry : directory.cases) {
    cases.push_back(entry.problem);
    options.case_numbers.push_back(entry.index);
  }
  const FileOutputs outputs(outputs_dir_, directory.cases);
  const auto context = run_context(threads_ > 0 ? threads_ : default_thread_count());

  fmt::print("attnbench check: {} case(s) of {} against {}; pass rule: max abs error <= {} x naive + {} ulps\n\n", cases.size(),
             cases_dir_, outputs_dir_, k_, floor_ulps_);
  print_verify_header(std::cout);
  // Save after every case, so a run that dies keeps what it measured.
  Progress progress("check", cases.size(), stdout, Progress::stdout_is_terminal());
  ResultsFile results(json_path_);
  auto on_record = [&](const VerifyRun& run, const Record& record) {
    progress.clear();
    print_verify_row(std::cout, record);
    std::cout.flush();
    progress.step(fmt::format("case {}", record.context->index));
    if (!json_path_.empty()) results.save(verify_to_json(run, options, context, "check"));
  };
  const VerifyRun run = verify({&outputs}, cases, options, on_record);
  progress.finish();
  if (!json_path_.empty()) results.finish(verify_to_json(run, options, context, "check"));
  // check has no --case: the whole directory is rerun, and a case repeats with its repro string.
  print_verify_summary(std::cout, run, [&](const Record& r) {
    return fmt::format("attnbench check --cases {} --outputs {} (this case alone: attnbench cases --out DIR --case '{}')", cases_dir_,
                       outputs_dir_, r.context->problem.repro());
  });
  if (!json_path_.empty()) fmt::print("results: {}\n", json_path_);
  if (run.failed() > 0) return 1;
  if (run.passed() == 0 && !allow_empty_) {
    fmt::print("attnbench check: FAILED: no case was checked (every case skipped; --allow-empty accepts that)\n");
    return 1;
  }
  return 0;
}

}  // namespace attn::cli

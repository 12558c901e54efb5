#include "cli/verify_command.hpp"

#include <iostream>

#include <fmt/format.h>

#include "cli/run_output.hpp"
#include "cli/select_implementations.hpp"
#include "core/case_sets.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/result_file.hpp"
#include "records/context.hpp"
#include "reports/results.hpp"

namespace attn::cli {

VerifyCommand::VerifyCommand(CLI::App& app) {
  command_ = app.add_subcommand("verify", "Run implementations on a case set against the high-precision reference");
  command_->add_option("--impl", implementations_, "Implementation to verify (repeatable; default: all)");
  command_->add_option("--cases", cases_, "Case set: default, quick, or a file of repro strings")->capture_default_str();
  command_->add_option("--case", single_case_, "Run exactly one case, given as its repro string");
  command_->add_option("--seed", seed_, "Override every case's seed (draws new data)");
  command_->add_option("--json", json_path_, "Where to write the JSON results ('' to skip)")->capture_default_str();
  command_->add_option("--k", k_, "Pass rule: allowed multiple of the naive same-precision error")->capture_default_str();
  command_->add_option("--floor-ulps", floor_ulps_, "Pass rule: ulp floor of the tolerance")->capture_default_str();
  command_->add_option("--threads", threads_, "Threads for the reference (default: all cores)");
  command_->add_flag("--backward", backward_,
                     "Verify the backward pass on each case (op=backward): each implementation's forward, then its backward fed that "
                     "forward's O and LSE, its dQ, dK and dV (and the sinks' and the bias's gradients where the case has them and it declares them) judged "
                     "against the reference's gradients");
  command_->add_flag("--no-diagnosis", no_diagnosis_, "Do not test known mistakes against failing outputs");
  command_->add_flag("--no-projection", no_projection_,
                     "Skip a case an implementation does not support (default: run its projection onto what it declares)");
  command_->add_flag("--allow-empty", allow_empty_, "Exit 0 even when an implementation asked for by name ran no case (default: that fails)");
  command_->add_option("--sample-rows-above", sample_rows_above_,
                       "On a case whose reference would take more than twice WORK multiply-adds (n_k (d_k + d_v) per row), compare "
                       "a seeded sample of about WORK's worth of rows (at least 48; the first and last always); the report marks "
                       "such cases [checked/total rows]. Default: every row of every case")
      ->type_name("WORK");
  command_->add_option("--shard", shard_, "Run part I of N of the cases (I/N: case index modulo N), e.g. for a CI matrix; "
                                          "`attnbench report` merges the shards");
  command_->get_option("--case")->excludes(command_->get_option("--cases"));
}

int VerifyCommand::run(const Registry& registry) const {
  VerifyRequest request;
  request.implementations = select_implementations(registry, implementations_);
  request.cases = single_case_ ? std::vector<Problem>{parse_problem(*single_case_)} : load_cases(cases_);
  if (seed_)
    for (auto& p : request.cases) p.seed = *seed_;
  if (backward_)
    for (auto& p : request.cases) p.operation = Operation::backward;
  if (!(k_ >= 0) || !(floor_ulps_ >= 0)) throw InputError("--k and --floor-ulps must be non-negative");

  VerifyOptions& options = request.options;
  options.rule = {k_, floor_ulps_};
  options.reference.threads = threads_;
  if (sample_rows_above_) {
    if (!(*sample_rows_above_ >= 0)) throw InputError("--sample-rows-above must be a non-negative number of multiply-adds");
    options.reference.max_work = *sample_rows_above_;
  }
  options.diagnosis.threads = threads_;
  options.diagnosis.enabled = !no_diagnosis_;
  options.project = !no_projection_;
  std::optional<Shard> shard;
  if (!shard_.empty()) {
    shard = parse_shard(shard_);
    const std::size_t total = request.cases.size();
    std::vector<Problem> mine;
    for (std::size_t position : shard_positions(total, *shard)) {
      mine.push_back(request.cases[position]);
      options.case_numbers.push_back(position);
    }
    request.cases = std::move(mine);
    fmt::print("attnbench verify: shard {}/{}: {} of the {} cases (case index modulo {})\n", shard->index, shard->count, request.cases.size(),
               total, shard->count);
  }
  // Before any case runs: a --json that cannot be written, or a case too large for this machine,
  // must not cost the run (or end it in std::bad_alloc).
  if (!json_path_.empty()) prepare_result_path(json_path_, "--json");
  for (const auto& p : request.cases) check_case_memory(p, options.reference, request.implementations);
  const auto context = run_context(threads_ > 0 ? threads_ : default_thread_count());

  fmt::print("attnbench verify: {} implementation(s) x {} case(s); pass rule: max abs error <= {} x naive + {} ulps\n\n",
             request.implementations.size(), request.cases.size(), k_, floor_ulps_);
  VerifyConsole console({.progress_label = "verify", .name_implementation = true});
  VerifyResultsFile results(json_path_, [&](const VerifyRun& run) {
    auto doc = verify_to_json(run, options, context);
    if (shard) doc["shard"] = shard->to_json();
    return doc;
  });
  const VerifyRun run = run_verify(request, {&console, &results});
  print_verify_summary(std::cout, run);
  if (!json_path_.empty()) fmt::print("results: {}\n", json_path_);
  if (run.failed() > 0) return 1;
  // Nothing ran is not a pass: an implementation asked for by name that ran no case (no device,
  // nothing it supports), or a run in which no implementation ran anything.
  if (!allow_empty_ && (!implementations_.empty() || run.passed() == 0)) {
    const std::vector<std::string> idle = idle_implementations(run, request.implementations);
    if (!idle.empty()) {
      fmt::print("attnbench verify: FAILED: no case ran for {} (every case skipped; the reasons are above). "
                 "--allow-empty accepts that.\n",
                 fmt::join(idle, ", "));
      return 1;
    }
  }
  return 0;
}

}  // namespace attn::cli

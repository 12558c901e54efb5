#include "cli/cases_command.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "core/case_files.hpp"
#include "core/case_sets.hpp"
#include "core/memory.hpp"
#include "properties/verify.hpp"

namespace attn::cli {

CasesCommand::CasesCommand(CLI::App& app)
    : command_(app.add_subcommand("cases", "Write a case set's inputs as .npy files (q, k, v, mask, bias) with DIR/manifest.json, for a "
                                           "program that cannot be linked; `attnbench check` verifies what it writes")) {
  command_->add_option("--out", out_dir_, "Directory to write (created; an earlier cases directory there is replaced)")->required();
  auto* set = command_->add_option("--cases", cases_, "Case set: default, quick, or a file of repro strings")->capture_default_str();
  command_->add_option("--case", single_case_, "Write exactly one case, given as its repro string")->excludes(set);
  command_->add_option("--seed", seed_, "Override every case's seed (draws new data)");
}

int CasesCommand::run() const {
  std::vector<Problem> cases = single_case_ ? std::vector<Problem>{parse_problem(*single_case_)} : load_cases(cases_);
  if (seed_)
    for (auto& p : cases) p.seed = *seed_;
  // Generating a case holds its inputs and their .npy copy; a size typed by mistake is refused first.
  for (const auto& p : cases) check_memory_fits(2.0 * case_memory(p, {}).inputs, fmt::format("writing case '{}'", p.repro()));
  write_case_directory(out_dir_, cases, {}, [&](const CaseFileEntry& entry) {
    fmt::print("case {:>4}: {}\n", entry.index, entry.problem.label());
    std::fflush(stdout);
  });
  fmt::print("{} case(s) written to {} (manifest: {}/manifest.json)\n", cases.size(), out_dir_, out_dir_);
  return 0;
}

}  // namespace attn::cli

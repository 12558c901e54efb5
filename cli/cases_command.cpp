#include "cli/cases_command.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/case_files.hpp"
#include "core/case_sets.hpp"
#include "impls/capability_declaration.hpp"
#include "impls/capability_space.hpp"
#include "impls/file_outputs/file_outputs.hpp"
#include "core/memory.hpp"
#include "verification/verify.hpp"

namespace attn::cli {
namespace {

// A kernel known only by its declaration: resolve() then projects exactly as verify does for a
// kernel whose supports() accepts everything it declares, so check finds these projections.
class Declared final : public Implementation {
 public:
  explicit Declared(Capabilities caps) : caps_(std::move(caps)) {}
  std::string name() const override { return "declared"; }
  Capabilities describe() const override { return caps_; }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem&) const override { return 0; }
  void run(const RunArgs&) const override { throw std::logic_error("a declaration does not run"); }

 private:
  Capabilities caps_;
};

}  // namespace

CasesCommand::CasesCommand(CLI::App& app)
    : command_(app.add_subcommand("cases", "Write a case set's inputs as .npy files (q, k, v, mask, bias; d_o for a backward case) with "
                                           "DIR/manifest.json, for a program that cannot be linked; `attnbench check` verifies what it writes")) {
  command_->add_option("--out", out_dir_, "Directory to write (created; an earlier cases directory there is replaced)")->required();
  auto* set = command_->add_option("--cases", cases_, "Case set: default, quick, or a file of repro strings")->capture_default_str();
  command_->add_option("--case", single_case_, "Write exactly one case, given as its repro string")->excludes(set);
  command_->add_option("--seed", seed_, "Override every case's seed (draws new data)");
  command_->add_flag("--backward", backward_,
                     "Write each case as a backward case (op=backward), as verify --backward runs it: with its dO (d_o_NNNN.npy); the "
                     "program writes its own forward's out (and lse) and its backward's dq, dk and dv (and, optionally, d_sink and d_bias "
                     "where the case has sinks or a bias), which check judges");
  auto* declare = command_->add_option("--declare", declaration_,
                                       "The kernel's capabilities declaration (JSON; impls/capability_declaration.hpp): a case outside it "
                                       "is written as its projection onto it, or skipped with the reason; kept in the manifest for check");
  command_->add_flag("--no-projection", no_projection_, "With --declare: skip a case outside the declaration instead of projecting it")
      ->needs(declare);
}

int CasesCommand::run() const {
  std::vector<Problem> cases = single_case_ ? std::vector<Problem>{parse_problem(*single_case_)} : load_cases(cases_);
  if (seed_)
    for (auto& p : cases) p.seed = *seed_;
  if (backward_)
    for (auto& p : cases) p.operation = Operation::backward;
  // Generating a case holds its inputs and their .npy copy; a size typed by mistake is refused first.
  for (const auto& p : cases) check_memory_fits(2.0 * case_memory(p, {}).inputs, fmt::format("writing case '{}'", p.repro()));
  auto print_case = [](const CaseFileEntry& entry) {
    fmt::print("case {:>4}: {}\n", entry.index, entry.problem.label());
    if (!entry.projected_from.empty()) fmt::print("           projected ({}) from {}\n", entry.projection, entry.projected_from);
    std::fflush(stdout);
  };
  if (declaration_.empty()) {
    write_case_directory(out_dir_, cases, {}, print_case);
    fmt::print("{} case(s) written to {} (manifest: {}/manifest.json)\n", cases.size(), out_dir_, out_dir_);
    return 0;
  }

  const Declared declared(file_route_capabilities(read_capabilities_file(declaration_), declaration_));
  const Capabilities caps = declared.describe();
  CaseDeclaration declaration;
  declaration.capabilities_json = capabilities_to_json(caps).dump();
  declaration.fully_masked = std::string(to_string(caps.fully_masked));
  std::vector<Problem> written;
  std::vector<std::size_t> numbers;
  std::vector<CaseProjection> projections;
  for (std::size_t index = 0; index < cases.size(); ++index) {
    const Problem& p = cases[index];
    p.validate();
    Resolution r;
    const bool declares_forward = std::find(caps.operations.begin(), caps.operations.end(), Operation::forward) != caps.operations.end();
    if (p.operation == Operation::backward && !declares_forward) {
      // As verify skips it (verify.cpp, plan_for): the backward is fed the program's own forward's O and LSE.
      r.skip_reason = "its backward pass is fed its own forward's O and LSE, and it declares no forward pass";
    } else if (no_projection_) {
      const Support s = covers(caps, p);
      if (s.ok)
        r.problem = p;
      else
        r.skip_reason = s.reason;
    } else {
      r = resolve(declared, p);
    }
    if (!r.problem) {
      declaration.skipped.push_back({index, p.repro(), r.skip_reason});
      continue;
    }
    written.push_back(*r.problem);
    numbers.push_back(index);
    projections.push_back(r.projected ? CaseProjection{p.repro(), r.changes} : CaseProjection{});
  }
  write_case_directory(out_dir_, written, numbers, print_case, &declaration, projections);
  for (const auto& s : declaration.skipped) fmt::print("case {:>4}: skipped: {} ({})\n", s.index, s.reason, s.repro);
  const auto projected = std::count_if(projections.begin(), projections.end(), [](const auto& p) { return !p.projected_from.empty(); });
  fmt::print("{} case(s) written to {} ({} projected onto {}, {} skipped; manifest: {}/manifest.json)\n", written.size(), out_dir_, projected,
             declaration_, declaration.skipped.size(), out_dir_);
  return 0;
}

}  // namespace attn::cli

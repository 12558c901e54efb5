#include "impls/file_outputs/file_outputs.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "impls/capability_declaration.hpp"

namespace attn {

Capabilities file_route_capabilities(Capabilities declared, const std::string& where) {
  if (declared.layouts != std::vector<Layout>{Layout::bhsd})
    throw InputError(fmt::format("{}: 'layouts' must be [\"bhsd\"] or left out: the file route's files are BHSD", where));
  declared.device = "cpu";  // the outputs are read on the host, whatever computed them
  return declared;
}

FileRouteCheck plan_file_route_check(const CaseDirectory& directory, const std::filesystem::path& declaration_file) {
  FileRouteCheck plan;
  if (!declaration_file.empty()) {
    plan.declared_by = declaration_file.string();
    plan.declared = file_route_capabilities(read_capabilities_file(declaration_file), plan.declared_by);
  } else if (!directory.declaration_json.empty()) {
    plan.declared_by = (directory.dir / "manifest.json").string() + " (its declaration)";
    plan.declared = file_route_capabilities(capabilities_from_json(nlohmann::json::parse(directory.declaration_json), plan.declared_by),
                                            plan.declared_by);
  }
  if (!plan.declared) {
    for (const auto& entry : directory.cases) {
      plan.cases.push_back(entry.problem);
      plan.case_numbers.push_back(entry.index);
    }
    return plan;  // the outputs answer the named cases exactly
  }
  plan.project = true;
  for (auto& [index, problem] : named_cases(directory)) {
    plan.cases.push_back(std::move(problem));
    plan.case_numbers.push_back(index);
  }
  return plan;
}

FileOutputs::FileOutputs(std::filesystem::path outputs_dir, std::vector<CaseFileEntry> cases, std::optional<Capabilities> declared)
    : dir_(std::move(outputs_dir)), cases_(std::move(cases)), declared_(std::move(declared)), served_(cases_.size(), false) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir_, ec)) throw InputError(fmt::format("{}: no such directory (the outputs)", dir_.string()));
  if (declared_) {
    has_lse_ = declared_->returns_lse;
    has_parameter_gradients_ = declared_->parameter_gradients;
    return;
  }
  // A backward case's lse is not judged (only its gradients are), so it asks nothing of the others'.
  for (const auto& c : cases_) {
    if (c.problem.operation == Operation::forward && !c.lse.empty() && std::filesystem::exists(dir_ / c.lse, ec)) has_lse_ = true;
    for (const std::string* file : {&c.d_sink, &c.d_bias})
      if (!file->empty() && std::filesystem::exists(dir_ / *file, ec)) has_parameter_gradients_ = true;
  }
}

std::string FileOutputs::name() const { return "files:" + dir_.string(); }

Capabilities FileOutputs::describe() const {
  if (declared_) {
    Capabilities caps = *declared_;
    caps.summary = fmt::format("outputs another program wrote as .npy files into {}; {}", dir_.string(), declared_->summary);
    return caps;
  }
  Capabilities caps;
  caps.summary = fmt::format("outputs another program wrote as .npy files into {}", dir_.string());
  caps.device = "cpu";
  declare_every_dtype(caps);
  declare_every_mask_and_shape(caps);
  caps.returns_lse = has_lse_;
  caps.parameter_gradients = has_parameter_gradients_;
  caps.fully_masked = FullyMaskedPolicy::zeros;
  // Undeclared, the outputs answer the named cases exactly, soft-capped ones as named, backward
  // ones with their own forward's files beside the gradients.
  caps.score_modifications.assign(all_score_modifications.begin(), all_score_modifications.end());
  caps.operations = {Operation::forward, Operation::backward};
  return caps;
}

namespace {

// The problem a forward call for the case runs: the case's, or a backward case's own forward.
bool forward_call_of(const CaseFileEntry& entry, const Problem& problem) {
  if (entry.problem.operation != Operation::backward) return entry.problem == problem;
  Problem forward = entry.problem;
  forward.operation = Operation::forward;
  return forward == problem;
}

}  // namespace

const CaseFileEntry* FileOutputs::entry_for(const Problem& problem) const {
  // A backward call reads the files of the case whose forward was called last (verify runs a
  // backward case's forward first): each backward call of a case, however many, reads that case's.
  if (problem.operation == Operation::backward) {
    if (last_forward_ && cases_[*last_forward_].problem == problem) return &cases_[*last_forward_];
    for (const auto& c : cases_)
      if (c.problem == problem) return &c;
    return nullptr;
  }
  // A forward call starts the next case of its problem, forward or backward (cases with equal
  // problems are run in the manifest's order); once each was served, the last is read again.
  std::optional<std::size_t> seen;
  for (std::size_t i = 0; i < cases_.size(); ++i) {
    if (!forward_call_of(cases_[i], problem)) continue;
    if (!served_[i]) {
      served_[i] = true;
      seen = i;
      break;
    }
    seen = i;
  }
  last_forward_ = seen;
  return seen ? &cases_[*seen] : nullptr;
}

Support FileOutputs::supports(const Problem& problem) const {
  for (const auto& c : cases_)
    if (c.problem == problem) return Support::yes();
  return Support::no("not a case of the cases directory's manifest");
}

void FileOutputs::run(const RunArgs& args) const {
  const CaseFileEntry* entry = entry_for(args.problem);
  if (entry == nullptr) throw InputError(fmt::format("no case of the manifest is {}", args.problem.repro()));
  if (args.problem.operation == Operation::backward) {
    // The gradients the program's backward computed, fed its own forward's O and LSE: the ones
    // verify hands this call are what the forward call read from out and lse, so nothing differs.
    for (Role role : {Role::dq, Role::dk, Role::dv, Role::d_sink, Role::d_bias}) {
      Tensor* gradient = args.tensors.output(role);
      if (gradient == nullptr) continue;  // d_sink, d_bias: asked for where the problem has them and they are computed
      const std::string& file = entry->gradient_file(role);
      if (file.empty()) throw InputError(fmt::format("case {}: the manifest names no {} file", entry->index, to_string(role)));
      read_gradient_file(dir_ / file, args.problem, role, *gradient);
    }
    return;
  }
  read_output_file(dir_ / entry->out, args.problem, args.tensors.required_output(Role::o));
  if (Tensor* lse = args.tensors.output(Role::lse)) {
    if (entry->lse.empty()) throw InputError(fmt::format("case {}: the manifest names no lse file", entry->index));
    // A backward case's own forward: its O and LSE are what its backward was fed, never judged,
    // so its lse is read where the program wrote one and otherwise not asked for.
    std::error_code ec;
    const bool optional = entry->problem.operation == Operation::backward;
    if (!optional || std::filesystem::exists(dir_ / entry->lse, ec)) read_lse_file(dir_ / entry->lse, args.problem, *lse);
  }
  // Dropout: the keep mask the program drew (keep_NNNN.npy), which the output is judged given.
  if (Tensor* keep = args.tensors.output(Role::keep)) {
    if (entry->keep.empty()) throw InputError(fmt::format("case {}: the manifest names no keep file for its dropout", entry->index));
    read_keep_file(dir_ / entry->keep, args.problem, *keep);
  }
}

}  // namespace attn

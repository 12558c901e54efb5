#include "impls/file_outputs/file_outputs.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {

FileOutputs::FileOutputs(std::filesystem::path outputs_dir, std::vector<CaseFileEntry> cases)
    : dir_(std::move(outputs_dir)), cases_(std::move(cases)), served_(cases_.size(), false) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir_, ec)) throw InputError(fmt::format("{}: no such directory (the outputs)", dir_.string()));
  for (const auto& c : cases_)
    if (!c.lse.empty() && std::filesystem::exists(dir_ / c.lse, ec)) has_lse_ = true;
}

std::string FileOutputs::name() const { return "files:" + dir_.string(); }

Capabilities FileOutputs::describe() const {
  Capabilities caps;
  caps.summary = fmt::format("outputs another program wrote as .npy files into {}", dir_.string());
  caps.device = "cpu";
  caps.dtypes = {DType::f64, DType::f32, DType::f16, DType::bf16};
  caps.returns_lse = has_lse_;
  caps.fully_masked = FullyMaskedPolicy::zeros;
  return caps;
}

const CaseFileEntry* FileOutputs::entry_for(const Problem& problem) const {
  const CaseFileEntry* seen = nullptr;
  for (std::size_t i = 0; i < cases_.size(); ++i) {
    if (!(cases_[i].problem == problem)) continue;
    if (!served_[i]) {
      served_[i] = true;
      return &cases_[i];
    }
    seen = &cases_[i];
  }
  return seen;
}

Support FileOutputs::supports(const Problem& problem) const {
  for (const auto& c : cases_)
    if (c.problem == problem) return Support::yes();
  return Support::no("not a case of the cases directory's manifest");
}

void FileOutputs::run(const RunArgs& args) const {
  const CaseFileEntry* entry = entry_for(args.problem);
  if (entry == nullptr) throw InputError(fmt::format("no case of the manifest is {}", args.problem.repro()));
  read_output_file(dir_ / entry->out, args.problem, args.out);
  if (args.lse != nullptr) {
    if (entry->lse.empty()) throw InputError(fmt::format("case {}: the manifest names no lse file", entry->index));
    read_lse_file(dir_ / entry->lse, args.problem, *args.lse);
  }
}

}  // namespace attn

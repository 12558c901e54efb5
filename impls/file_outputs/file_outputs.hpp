#pragma once
// Outputs written by another program, served as an Implementation so that `attnbench check`
// verifies them through attn::verify exactly as `attnbench verify` verifies a kernel: run()
// reads the case's out_NNNN.npy (and lse_NNNN.npy) from the outputs directory into the
// poisoned output tensors. A missing, malformed, truncated or mis-shaped file makes run()
// throw, naming the file and the fault, which verify records as that case's failure.
// Not in the built-in registry: the check command makes one per outputs directory.
#include <filesystem>
#include <vector>

#include "core/case_files.hpp"
#include "impls/implementation.hpp"

namespace attn {

class FileOutputs : public Implementation {
 public:
  // The LSE is checked when the outputs directory holds any lse file named in the manifest;
  // then every case must have one.
  FileOutputs(std::filesystem::path outputs_dir, std::vector<CaseFileEntry> cases);

  std::string name() const override;
  Capabilities describe() const override;
  Support supports(const Problem& problem) const override;
  std::size_t workspace_bytes(const Problem&) const override { return 0; }
  void run(const RunArgs& args) const override;

 private:
  const CaseFileEntry* entry_for(const Problem& problem) const;

  std::filesystem::path dir_;
  std::vector<CaseFileEntry> cases_;
  bool has_lse_ = false;
  // Cases with equal problems read their own files in turn (verify runs cases in order).
  mutable std::vector<bool> served_;
};

}  // namespace attn

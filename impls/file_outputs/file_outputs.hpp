#pragma once
// Outputs written by another program, served as an Implementation so that `attnbench check`
// verifies them through attn::verify exactly as `attnbench verify` verifies a kernel: run()
// reads the case's out_NNNN.npy (and lse_NNNN.npy, keep_NNNN.npy) from the outputs directory
// into the poisoned output tensors; for a backward case (op=backward) its forward call reads
// those and its backward call dq_NNNN.npy, dk_NNNN.npy and dv_NNNN.npy into the gradients (and
// d_sink_NNNN.npy, d_bias_NNNN.npy where the case has sinks or a bias and they are asked for). A
// missing, malformed, truncated or mis-shaped file makes run() throw, naming the file and the
// fault, which verify records as that case's failure. Its outputs are given (outputs_given()):
// verify reads each once and never reruns it (no determinism run, no isolation on the reference's
// O and LSE: the program ran once, before check).
// Not in the built-in registry: the check command makes one per outputs directory.
#include <filesystem>
#include <optional>
#include <vector>

#include "core/case_files.hpp"
#include "impls/implementation.hpp"

namespace attn {

// A declaration (impls/capability_declaration.hpp) made fit for the file route, whose files are
// BHSD: an InputError naming `where` if it declares another layout.
Capabilities file_route_capabilities(Capabilities declared, const std::string& where);

// What `attnbench check` verifies for a cases directory. Without a declaration: the manifest's
// cases exactly, each expected. With one (check's --declare, else the manifest's): the cases as
// the set named them, projected onto the declaration as verify projects them (which finds the
// projections `cases --declare` wrote), and skipped with the reason where the declaration
// leaves nothing to run.
struct FileRouteCheck {
  std::vector<Problem> cases;
  std::vector<std::size_t> case_numbers;
  bool project = false;
  std::optional<Capabilities> declared;
  std::string declared_by;  // the file, or the manifest; empty without a declaration
};
FileRouteCheck plan_file_route_check(const CaseDirectory& directory, const std::filesystem::path& declaration_file);

class FileOutputs : public Implementation {
 public:
  // Without a declaration the LSE is checked when the outputs directory holds any forward case's
  // lse file named in the manifest (a backward case's is not judged), the parameters' gradients
  // (d_sink, d_bias) when it holds any backward case's file of them, and fully masked rows must
  // be zeros. With one, it says all three, and what is
  // outside it is not supported (verify skips it with the reason, or runs its projection).
  FileOutputs(std::filesystem::path outputs_dir, std::vector<CaseFileEntry> cases, std::optional<Capabilities> declared = std::nullopt);

  std::string name() const override;
  Capabilities describe() const override;
  Support supports(const Problem& problem) const override;
  std::size_t workspace_bytes(const Problem&) const override { return 0; }
  void run(const RunArgs& args) const override;
  bool outputs_given() const override { return true; }

 private:
  const CaseFileEntry* entry_for(const Problem& problem) const;

  std::filesystem::path dir_;
  std::vector<CaseFileEntry> cases_;
  std::optional<Capabilities> declared_;
  bool has_lse_ = false;
  bool has_parameter_gradients_ = false;
  // Cases with equal problems read their own files in turn (verify runs cases in order): each
  // forward call serves the next case of its problem, and a backward call reads the files of the
  // case the last forward call served (last_forward_), a backward case's forward running first.
  mutable std::vector<bool> served_;
  mutable std::optional<std::size_t> last_forward_;
};

}  // namespace attn

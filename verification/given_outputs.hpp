#pragma once
// Outputs that were captured with their inputs (a user's own tensors: `attnbench check --inputs`,
// the Python package's judge()) judged by verify exactly as a kernel's are: the same reference,
// pass rule, diagnosis and records. GivenOutputs stands for whoever produced them (it is never
// run: verify judges GivenInputs::out where it lies), and given_outputs_request hands verify each
// case's tensors, borrowed, so nothing the size of a capture is copied.
#include <string>
#include <vector>

#include "core/given_case.hpp"
#include "verification/run.hpp"

namespace attn {

class GivenOutputs final : public Implementation {
 public:
  // `cases` must outlive this object and every run of its request.
  GivenOutputs(const std::vector<GivenCase>& cases, std::string name, std::string summary);
  std::string name() const override { return name_; }
  Capabilities describe() const override;
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem&) const override { return 0; }
  void run(const RunArgs&) const override;  // throws: verify judges the given outputs instead
  bool outputs_given() const override { return true; }
  const std::vector<GivenCase>& cases() const { return cases_; }

 private:
  const std::vector<GivenCase>& cases_;
  std::string name_, summary_;
};

// One case per given case, in order, with options.given_inputs set to hand over its tensors.
VerifyRequest given_outputs_request(const GivenOutputs& outputs, VerifyOptions options);

}  // namespace attn

#include "verification/given_outputs.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace attn {
GivenOutputs::GivenOutputs(const std::vector<GivenCase>& cases, std::string name, std::string summary)
    : cases_(cases), name_(std::move(name)), summary_(std::move(summary)) {}

Capabilities GivenOutputs::describe() const {
  Capabilities caps;
  caps.summary = summary_;
  declare_every_dtype(caps);
  declare_every_mask_and_shape(caps);  // the outputs answer the given problem, whatever it is
  // The LSE is judged for all cases or none (verify asks an implementation for it on every case).
  caps.returns_lse = !cases_.empty() && std::all_of(cases_.begin(), cases_.end(), [](const GivenCase& c) { return c.lse.has_value(); });
  caps.fully_masked = FullyMaskedPolicy::zeros;
  // The outputs answer the given problem as it is, soft-capped when settings.json says so.
  caps.score_modifications.assign(all_score_modifications.begin(), all_score_modifications.end());
  return caps;
}

void GivenOutputs::run(const RunArgs&) const {
  throw std::logic_error("GivenOutputs::run: given outputs are judged where they lie (GivenInputs::out), never run");
}

VerifyRequest given_outputs_request(const GivenOutputs& outputs, VerifyOptions options) {
  const std::vector<GivenCase>& cases = outputs.cases();
  options.given_inputs = [&cases](const Problem&, std::size_t number) {
    const GivenCase& c = cases.at(number);
    GivenInputs given{CaseInputs{c.inputs.q.alias(), c.inputs.k.alias(), c.inputs.v.alias(), c.inputs.mask}, c.source, c.out.alias(),
                      std::nullopt, std::nullopt};
    if (c.lse) given.lse = c.lse->alias();
    if (c.keep) given.keep = c.keep->alias();
    return given;
  };
  std::vector<Problem> problems;
  for (const GivenCase& c : cases) problems.push_back(c.problem);
  return VerifyRequest{{&outputs}, std::move(problems), std::move(options)};
}

}  // namespace attn

#pragma once
// A Python callable as an Implementation: verify, the property suite and the diagnosis run it
// exactly as they run a built-in kernel or a plugin. The Python side (attnbench/_conventions.py)
// adapts a user's function to one call, `invoke(problem, inputs, want_lse) -> (o, lse or None[,
// keep])` (keep: dropout's keep mask [b, h_q, n_q, n_k] as float32 0/1, on a dropout case), where
// inputs is a dict of NumPy arrays that the call owns (copies: a kernel that writes into its
// inputs cannot change what it is judged against) and the mask in its parts; run() copies what
// invoke returns into the poisoned outputs, refusing a wrong shape or dtype by name. A backward
// pass (op=backward) is one more argument, `invoke(problem, inputs, want_lse, fed) -> (dq, dk,
// dv)`, fed = {"d_o", "o", "lse" or None}: the upstream gradient and the forward's outputs the
// harness feeds it, BHSD (verification/README.md, "The backward pass").
#include <optional>
#include <string>

#include <nanobind/nanobind.h>

#include "impls/implementation.hpp"
#include "verification/verify.hpp"

namespace attn::python {

namespace nb = nanobind;

class CallableImplementation final : public Implementation {
 public:
  // What a convention can say beyond a capabilities declaration: the callable takes no scale
  // (it always uses 1/sqrt(d_k)), or computes causal attention only. Cases outside are skipped
  // with the reason (no projection adds or removes a scale or a causal mask).
  struct Limits {
    bool alibi_only = false;            // the only bias it takes is ALiBi's (slopes, FlashAttention's)
    std::optional<Align> alignment;     // the one diagonal alignment its windows have (matters where n_q != n_k)
    // Its gradients come from autograd through its own forward, which each backward call recomputes:
    // it cannot be fed another forward's O and LSE (restate_isolation).
    bool autograd_backward = false;
    // Reads {"alibi_only": bool, "alignment": "top_left"|"bottom_right"|null, "autograd_backward":
    // bool}. A fixed scale and causal-only are the declaration's ("default_scale_only",
    // "causal_only"): projected onto.
    static Limits from_json(const std::string& text);
  };
  // `declaration`: what the callable supports, as a capabilities declaration (JSON text;
  // impls/capability_declaration.hpp).
  CallableImplementation(std::string name, const std::string& declaration, Limits limits, nb::object invoke);
  ~CallableImplementation() override;
  std::string name() const override { return name_; }
  Capabilities describe() const override { return caps_; }
  Support supports(const Problem& problem) const override;
  std::size_t workspace_bytes(const Problem&) const override { return 0; }
  // Takes the GIL for the call: the caller releases it around verify and the property suite.
  void run(const RunArgs& args) const override;
  const Limits& limits() const { return limits_; }

 private:
  void run_backward(const RunArgs& args) const;
  std::string name_;
  Capabilities caps_;
  Limits limits_;
  nb::object* invoke_;  // released with the GIL held (the destructor takes it)
};

// The arrays of a case's inputs and mask, as invoke receives them (also make_inputs()).
// The score modifications' settings a problem uses, by name (core/score_pipeline.hpp): a float
// each, an int for an integer setting (a seed).
nb::dict settings_dict(const Problem& problem);
nb::dict inputs_dict(const Problem& problem, const CaseInputs& inputs);

// A failed backward record of an autograd callable: verify's rerun on the reference's O and LSE
// ran the same autograd again, which ignores the O and LSE it is fed, so the record's isolation
// (and its reason) is restated as what that rerun cannot tell.
void restate_isolation(Record& record);

}  // namespace attn::python

#include "impls/cpu_naive/cpu_naive.hpp"
#include "impls/registry.hpp"

// cpu_naive as a registered Implementation. The algorithm (cpu_naive.cpp) is a CPU-only library
// of its own, attn_cpu_naive, because the judge (judge/) runs it as the pass rule's yardstick and
// is installed for consumers that link no implementation and no CUDA.
namespace attn {
namespace {

class CpuNaive final : public Implementation {
 public:
  std::string name() const override { return "cpu_naive"; }
  Capabilities describe() const override {
    Capabilities c;
    c.summary = "textbook softmax(QK^T * scale + mask) V with the score matrix materialised; f64, or f32 for f32/f16/bf16";
    // Its backward (cpu_naive.hpp) materialises P and dP of a head: the judge's yardstick of gradients.
    c.operations = {Operation::forward, Operation::backward};
    c.parameter_gradients = true;  // dσ and dBias from the same materialised P and dS
    declare_every_dtype(c);  // each tensor is read and written in its own dtype
    declare_every_mask_and_shape(c);
    c.returns_lse = true;
    c.returns_weights = true;
    // Masked keys never reach P V (skipped, not multiplied by 0): NaN or Inf there stays out.
    c.masked_nonfinite_safe = true;
    c.score_modifications = {ScoreModification::softcap, ScoreModification::sink, ScoreModification::dropout};  // core/score_pipeline.hpp
    return c;
  }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem& p) const override { return naive_workspace_bytes(p); }
  void run(const RunArgs& args) const override { naive_attention(args); }
};

}  // namespace

void register_cpu_naive(Registry& registry) { registry.add(std::make_unique<CpuNaive>()); }

}  // namespace attn

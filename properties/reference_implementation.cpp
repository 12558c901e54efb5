#include "properties/reference_implementation.hpp"

#include <optional>

#include "core/score_pipeline.hpp"
#include "reference/reference.hpp"

namespace attn {
namespace {

class ReferenceImplementation final : public Implementation {
 public:
  std::string name() const override { return "reference_float128"; }
  Capabilities describe() const override {
    Capabilities c;
    c.summary = "the float128 reference, every row, rounded once to the dtype (property tests only)";
    c.dtypes = {DType::f64, DType::f32, DType::f16, DType::bf16};
    declare_every_mask_and_shape(c);
    c.returns_lse = true;
    c.returns_weights = true;
    c.score_modifications.assign(all_score_modifications.begin(), all_score_modifications.end());  // the whole pipeline
    return c;
  }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem&) const override { return 0; }
  void run(const RunArgs& a) const override {
    const Problem& p = a.problem;
    Tensor& out = a.tensors.required_output(Role::o);
    Tensor* lse = a.tensors.output(Role::lse);
    Tensor* weights = a.tensors.output(Role::weights);
    ReferenceOptions options;
    // Enough work for every row (compute_reference samples rows beyond max_work).
    options.max_work = 4.0 * double(p.rows()) * double(p.n_k) * double(p.d_k + p.d_v) + 1;
    options.weights = weights != nullptr;
    options.threads = a.threads;
    // Dropout: the built-in stream's keep mask (core/score_pipeline.hpp), reported and computed with.
    std::optional<CaseInputs> with_keep;
    if (p.dropout.enabled()) {
      const Tensor keep = builtin_keep_mask(p, a.inputs.mask);
      with_keep.emplace(CaseInputs{a.inputs.q.alias(), a.inputs.k.alias(), a.inputs.v.alias(), a.inputs.mask.with_keep(keep)});
      if (Tensor* reported = a.tensors.output(Role::keep)) *reported = keep;
    }
    const ReferenceResult ref = compute_reference(p, with_keep ? *with_keep : a.inputs, options);
    for (std::size_t r = 0; r < ref.rows.size(); ++r) {
      const std::int64_t row = ref.rows[r];
      for (std::int64_t c = 0; c < p.d_v; ++c) out.set(row * p.d_v + c, ref.out[r * std::size_t(p.d_v) + std::size_t(c)]);
      if (lse) lse->set(row, ref.lse[r]);
      if (weights)
        for (std::int64_t j = 0; j < p.n_k; ++j) weights->set(row * p.n_k + j, ref.weights[r * std::size_t(p.n_k) + std::size_t(j)]);
    }
  }
};

}  // namespace

std::unique_ptr<Implementation> make_reference_implementation() { return std::make_unique<ReferenceImplementation>(); }

}  // namespace attn

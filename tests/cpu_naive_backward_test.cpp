// cpu_naive's backward pass (impls/cpu_naive/cpu_naive.hpp) against the backward reference
// (reference/reference_backward.hpp): through every step of the score pipeline, dQ, dK and dV
// agree with the 113-bit gradients to the working precision's accuracy (f64: 1e-11 of the
// largest gradient; f32, f16 and bf16 inputs, computed in f32 and rounded to their dtype: a few
// of the dtype's unit roundoffs), fully masked rows get dQ = 0 and keys masked in every row dK =
// dV = 0 exactly, and a wrong gradient would show (the check is not vacuous: dV against dK's
// reference fails).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/inputs.hpp"
#include "core/precision.hpp"
#include "core/problem.hpp"
#include "core/score_pipeline.hpp"
#include "impls/cpu_naive/cpu_naive.hpp"
#include "reference/reference_backward.hpp"
#include "tests/gradient_accuracy.hpp"

namespace attn {
namespace {

using testing::allowed_relative_error;
using testing::relative_error;

Gradients naive_backward(const Problem& p, const CaseInputs& in, const Tensor& d_o) {
  Gradients g = make_gradients(p);
  std::vector<std::byte> workspace(naive_workspace_bytes(p));
  naive_attention(RunArgs{p, in, RoleTensors::backward(in, d_o, g.dq, g.dk, g.dv), workspace});
  return g;
}

TEST(CpuNaiveBackward, AgreesWithTheBackwardReferenceThroughThePipeline) {
  for (const char* repro : {
           "op=backward b=2 hq=4 hkv=2 nq=17 nk=23 dk=16 dv=8 dtype=f64 causal=bottom_right regime=diffuse seed=1",
           "op=backward b=1 hq=2 hkv=1 nq=33 nk=20 dk=32 dv=32 dtype=f32 causal=top_left regime=peaked seed=2",
           "op=backward b=2 hq=2 hkv=2 nq=16 nk=29 dk=8 dv=8 dtype=f32 window=5,2@bottom_right softcap=3 bias=1@bh regime=peaked seed=3",
           "op=backward b=1 hq=4 hkv=2 nq=12 nk=19 dk=16 dv=16 dtype=f16 causal=none bias=alibi regime=diffuse seed=4",
           "op=backward b=2 hq=2 hkv=1 nq=10 nk=14 dk=8 dv=8 dtype=bf16 causal=none pad=9,14 sinks=0.5,-1 regime=diffuse seed=5",
           "op=backward b=1 hq=2 hkv=2 nq=15 nk=18 dk=8 dv=8 dtype=f32 causal=bottom_right sink=1 dropout=0.25 regime=diffuse seed=6",
           "op=backward b=1 hq=2 hkv=1 nq=9 nk=21 dk=8 dv=4 dtype=f64 causal=none bool=0.5@bh softcap=1 regime=large seed=7",
           "op=backward b=1 hq=3 hkv=3 nq=8 nk=8 dk=8 dv=8 dtype=f32 causal=none regime=uniform01 seed=8",
       }) {
    SCOPED_TRACE(repro);
    const Problem p = parse_problem(repro);
    const CaseInputs in = generate_inputs(p);
    const Tensor d_o = generate_d_o(p);
    const Gradients g = naive_backward(p, in, d_o);
    // The reference of the same keep mask (the built-in stream's, which cpu_naive draws).
    const CaseInputs judged = p.dropout.enabled() ? CaseInputs{in.q, in.k, in.v, in.mask.with_keep(builtin_keep_mask(p, in.mask))} : in;
    const BackwardReference want = compute_reference_backward(p, judged, d_o);
    EXPECT_LE(relative_error(g.dq, want.dq), allowed_relative_error(p)) << "dQ";
    EXPECT_LE(relative_error(g.dk, want.dk), allowed_relative_error(p)) << "dK";
    EXPECT_LE(relative_error(g.dv, want.dv), allowed_relative_error(p)) << "dV";
    // Not vacuous: another tensor's reference is far off.
    if (want.dk.size() == want.dv.size()) {
      EXPECT_GT(relative_error(g.dv, want.dk), 0.05) << "dV against dK's reference";
    }
  }
}

TEST(CpuNaiveBackward, MaskedKeysAndFullyMaskedRowsGetExactlyZero) {
  const Problem p = parse_problem("op=backward b=2 hq=2 hkv=1 nq=5 nk=9 dk=4 dv=3 dtype=f32 causal=top_left padq=0,3,9,2,0,5,1,0,7,9 regime=diffuse seed=9");
  const CaseInputs in = generate_inputs(p);
  const Gradients g = naive_backward(p, in, generate_d_o(p));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t j = p.n_q; j < p.n_k; ++j) {
      for (std::int64_t t = 0; t < p.d_k; ++t) EXPECT_EQ(g.dk.get(g.dk.offset(b, 0, j, t)), 0.0);
      for (std::int64_t c = 0; c < p.d_v; ++c) EXPECT_EQ(g.dv.get(g.dv.offset(b, 0, j, c)), 0.0);
    }
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i)
        if (const auto [lo, hi] = in.mask.key_range(b, i); lo == hi) {
          for (std::int64_t t = 0; t < p.d_k; ++t) EXPECT_EQ(g.dq.get(g.dq.offset(b, h, i, t)), 0.0);
        }
}

}  // namespace
}  // namespace attn

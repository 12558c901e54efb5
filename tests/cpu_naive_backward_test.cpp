// cpu_naive's backward pass (impls/cpu_naive/cpu_naive.hpp) against the backward reference
// (reference/reference_backward.hpp): through every step of the score pipeline, dQ, dK and dV
// agree with the 113-bit gradients to the working precision's accuracy (f64: 1e-11 of the
// largest gradient; f32, f16 and bf16 inputs, computed in f32 and rounded to their dtype: a few
// of the dtype's unit roundoffs), fully masked rows get dQ = 0 and keys masked in every row dK =
// dV = 0 exactly, and a wrong gradient would show (the check is not vacuous: dV against dK's
// reference fails). dσ and dBias (every broadcast of the bias) agree with the reference's too, a
// fully masked row and a masked pair adding nothing to dBias.
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
  Gradients g = make_gradients(p, in.mask);
  std::vector<std::byte> workspace(naive_workspace_bytes(p));
  naive_attention(RunArgs{p, in, RoleTensors::backward(in, d_o, g), workspace});
  return g;
}

// The parameters' gradients are rounded to their tensors' dtypes (the sinks' f32 whatever the
// problem's): a few of that unit roundoff too.
double allowed_for(const Problem& p, const Tensor& gradient) {
  return std::max(allowed_relative_error(p), 4 * std::ldexp(1.0, -significand_bits(gradient.dtype())));
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
           "op=backward b=2 hq=4 hkv=2 nq=11 nk=13 dk=8 dv=8 dtype=f32 causal=top_left bias=1@shared sink=0.5 regime=diffuse seed=21",
           "op=backward b=3 hq=3 hkv=1 nq=7 nk=10 dk=8 dv=8 dtype=f64 causal=none bias=0.5@b sinks=1,-1,0 regime=peaked seed=22",
           "op=backward b=2 hq=2 hkv=2 nq=9 nk=9 dk=8 dv=8 dtype=bf16 causal=none bias=1@h softcap=2 regime=diffuse seed=23",
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
    ASSERT_EQ(g.holds(Role::d_sink), p.sinks.enabled);
    ASSERT_EQ(g.holds(Role::d_bias), p.bias.enabled);
    if (p.sinks.enabled) {
      EXPECT_LE(relative_error(g.d_sink, want.d_sink), allowed_for(p, g.d_sink)) << "dσ";
      std::vector<double> flipped = want.d_sink;
      for (double& x : flipped) x = -x;
      EXPECT_GT(relative_error(g.d_sink, flipped), 0.5) << "dσ against its negation";
    }
    if (p.bias.enabled) {
      EXPECT_LE(relative_error(g.d_bias, want.d_bias), allowed_for(p, g.d_bias)) << "dBias";
      EXPECT_GT(relative_error(g.d_bias, std::vector<double>(want.d_bias.size(), 0.0)), 0.5) << "dBias against zeros";
    }
  }
}

// Asked for nothing more, it writes nothing more: the slots stay empty and dQ, dK, dV keep their bits.
TEST(CpuNaiveBackward, ThePlainCallComputesTheSameDqDkDv) {
  const Problem p = parse_problem("op=backward b=2 hq=2 hkv=1 nq=6 nk=7 dk=8 dv=8 dtype=f32 causal=none bias=1@shared sink=0 regime=diffuse seed=24");
  const CaseInputs in = generate_inputs(p);
  const Tensor d_o = generate_d_o(p);
  Gradients plain = make_gradients(p);
  std::vector<std::byte> workspace(naive_workspace_bytes(p));
  naive_attention(RunArgs{p, in, RoleTensors::backward(in, d_o, plain), workspace});
  const Gradients with = naive_backward(p, in, d_o);
  EXPECT_EQ(plain.roles(), (std::vector<Role>{Role::dq, Role::dk, Role::dv}));
  EXPECT_EQ(with.roles(), (std::vector<Role>{Role::dq, Role::dk, Role::dv, Role::d_sink, Role::d_bias}));
  for (Role role : {Role::dq, Role::dk, Role::dv}) EXPECT_EQ(plain.of(role), with.of(role)) << to_string(role);
}

// A row that sees no key and a masked pair contribute nothing to dBias: exactly 0 where the pair
// is masked (a per-batch, per-head bias: nothing else is summed into the element).
TEST(CpuNaiveBackward, MaskedPairsAndFullyMaskedRowsAddNothingToDBias) {
  const Problem p = parse_problem(
      "op=backward b=2 hq=2 hkv=1 nq=5 nk=9 dk=4 dv=3 dtype=f32 causal=top_left padq=0,3,9,2,0,5,1,0,7,9 bias=1@bh regime=diffuse seed=9");
  const CaseInputs in = generate_inputs(p);
  const Gradients g = naive_backward(p, in, generate_d_o(p));
  std::int64_t zeros = 0;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i)
        for (std::int64_t j = 0; j < p.n_k; ++j)
          if (!in.mask.visible(b, h, i, j)) {
            EXPECT_EQ(g.d_bias.get(g.d_bias.offset(b, h, i, j)), 0.0) << b << " " << h << " " << i << " " << j;
            ++zeros;
          }
  EXPECT_GT(zeros, 0);
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

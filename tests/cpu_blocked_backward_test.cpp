// cpu_blocked's backward pass (impls/cpu_blocked/cpu_blocked_backward.hpp) against the backward
// reference (reference/reference_backward.hpp), fed the O and LSE of cpu_blocked's own forward:
// through every step of the score pipeline, dQ, dK and dV agree with the 113-bit gradients to the
// working precision's accuracy (as cpu_naive's backward, tests/cpu_naive_backward_test.cpp), on
// lengths that cross the tiles, the chunks of queries and the slots; every element is written,
// fully masked rows get dQ = 0 and keys masked in every row dK = dV = 0 exactly, NaN in a masked
// key's K and V reaches no gradient, and the results are the same bits for any thread count.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/inputs.hpp"
#include "core/problem.hpp"
#include "core/score_pipeline.hpp"
#include "impls/registry.hpp"
#include "reference/reference_backward.hpp"
#include "tests/gradient_accuracy.hpp"

namespace attn {
namespace {
using testing::allowed_relative_error;
using testing::masked_gradients_are_zero;
using testing::MaskedZeros;
using testing::relative_error;

const Implementation& blocked() {
  static Registry registry = [] {
    Registry r;
    register_builtin_implementations(r);
    return r;
  }();
  const Implementation* impl = registry.find("cpu_blocked");
  if (impl == nullptr) throw std::runtime_error("cpu_blocked is not registered");
  return *impl;
}

struct Forward {
  Tensor o, lse;
};

// cpu_blocked's forward pass of the problem: what its backward is given.
Forward forward(const Problem& backward_problem, const CaseInputs& in) {
  Problem p = backward_problem;
  p.operation = Operation::forward;
  Forward f{make_output(p), make_lse(p)};
  std::vector<std::byte> workspace(blocked().workspace_bytes(p));
  blocked().run(RunArgs{p, in, RoleTensors::forward(in, f.o, &f.lse), workspace});
  return f;
}

Gradients backward(const Problem& p, const CaseInputs& in, const Tensor& d_o, const Forward& f, int threads = 0) {
  Gradients g = make_gradients(p);
  std::vector<std::byte> workspace(blocked().workspace_bytes(p));
  blocked().run(RunArgs{p, in, RoleTensors::backward(in, d_o, g.dq, g.dk, g.dv, &f.o, &f.lse), workspace, threads});
  return g;
}

std::int64_t poisoned(const Tensor& t) {
  std::int64_t count = 0;
  for (std::int64_t e = 0; e < t.numel(); ++e) count += t.is_poisoned(e);
  return count;
}

// The inputs the reference judges with: dropout's keep mask as cpu_blocked drew it (the
// built-in stream), attached to the mask as the yardstick and the reference take it.
CaseInputs judged_inputs(const Problem& p, const CaseInputs& in) {
  return p.dropout.enabled() ? CaseInputs{in.q, in.k, in.v, in.mask.with_keep(builtin_keep_mask(p, in.mask))} : in;
}

TEST(CpuBlockedBackward, AgreesWithTheBackwardReferenceThroughThePipeline) {
  for (const char* repro : {
           "op=backward b=2 hq=4 hkv=2 nq=17 nk=23 dk=16 dv=8 dtype=f64 causal=bottom_right regime=diffuse seed=1",
           "op=backward b=1 hq=2 hkv=1 nq=33 nk=20 dk=32 dv=32 dtype=f32 causal=top_left regime=peaked seed=2",
           "op=backward b=2 hq=2 hkv=2 nq=16 nk=29 dk=8 dv=8 dtype=f32 window=5,2@bottom_right softcap=3 bias=1@bh regime=peaked seed=3",
           "op=backward b=1 hq=4 hkv=2 nq=12 nk=19 dk=16 dv=16 dtype=f16 causal=none bias=alibi regime=diffuse seed=4",
           "op=backward b=2 hq=2 hkv=1 nq=10 nk=14 dk=8 dv=8 dtype=bf16 causal=none pad=9,14 sinks=0.5,-1 regime=diffuse seed=5",
           "op=backward b=1 hq=2 hkv=2 nq=15 nk=18 dk=8 dv=8 dtype=f32 causal=bottom_right sink=1 dropout=0.25 regime=diffuse seed=6",
           "op=backward b=1 hq=2 hkv=1 nq=9 nk=21 dk=8 dv=4 dtype=f64 causal=none bool=0.5@bh softcap=1 regime=large seed=7",
           "op=backward b=1 hq=3 hkv=3 nq=8 nk=8 dk=8 dv=8 dtype=f32 causal=none regime=uniform01 seed=8",
           "op=backward b=2 hq=2 hkv=1 nq=20 nk=30 dk=16 dv=24 dtype=f32 causal=top_left pad=17,30 layout=bshd regime=diffuse seed=9",
           // Past one tile of 64 queries and 128 keys, with a partial last tile of each; past
           // one step of 512 queries; head dims that are not a multiple of the vector width.
           "op=backward b=1 hq=2 hkv=1 nq=385 nk=513 dk=24 dv=8 dtype=f32 causal=none regime=diffuse seed=10",
           "op=backward b=1 hq=1 hkv=1 nq=385 nk=513 dk=16 dv=16 dtype=f32 window=300,0@bottom_right regime=peaked seed=11",
           "op=backward b=1 hq=2 hkv=1 nq=600 nk=200 dk=7 dv=9 dtype=f64 causal=top_left bool=0.3@bh dropout=0.1 regime=diffuse seed=12",
       }) {
    SCOPED_TRACE(repro);
    const Problem p = parse_problem(repro);
    const CaseInputs in = generate_inputs(p);
    const Tensor d_o = generate_d_o(p);
    const CaseInputs judged = judged_inputs(p, in);
    const Gradients g = backward(p, judged, d_o, forward(p, in));
    EXPECT_EQ(poisoned(g.dq) + poisoned(g.dk) + poisoned(g.dv), 0) << "elements left unwritten";
    const BackwardReference want = compute_reference_backward(p, judged, d_o);
    EXPECT_LE(relative_error(g.dq, want.dq), allowed_relative_error(p)) << "dQ";
    EXPECT_LE(relative_error(g.dk, want.dk), allowed_relative_error(p)) << "dK";
    EXPECT_LE(relative_error(g.dv, want.dv), allowed_relative_error(p)) << "dV";
    if (want.dk.size() == want.dv.size()) {
      EXPECT_GT(relative_error(g.dv, want.dk), 0.05) << "dV against dK's reference";
    }
  }
}

// Queries of valid length 0 see no key (dQ = 0) and keys past every row's valid length get
// nothing (dK = dV = 0), exactly; NaN in the K and V rows of those keys changes no gradient.
TEST(CpuBlockedBackward, MaskedKeysAndRowsGetExactlyZeroAndMaskedNaNStaysOut) {
  // Per-query valid lengths: every seventh row none, the others up to 250 keys (batch 0) or
  // 131 (batch 1) of 300.
  const std::int64_t n_q = 70, limit[] = {250, 131};
  std::string lengths;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t i = 0; i < n_q; ++i)
      lengths += (lengths.empty() ? "" : ",") + std::to_string(i % 7 == 0 ? 0 : limit[b] - (i * 37) % 90);
  const Problem p = parse_problem("op=backward b=2 hq=2 hkv=1 nq=" + std::to_string(n_q) + " nk=300 dk=16 dv=8 dtype=f32 causal=none padq=" +
                                  lengths + " regime=diffuse seed=13");
  const CaseInputs in = generate_inputs(p);
  const Tensor d_o = generate_d_o(p);
  const Forward f = forward(p, in);
  const Gradients g = backward(p, in, d_o, f);
  MaskedZeros zeros;
  EXPECT_TRUE(masked_gradients_are_zero(p, in, g, zeros));
  EXPECT_GT(zeros.fully_masked_rows, 0) << "the case has no fully masked row";
  EXPECT_GT(zeros.unseen_keys, 0) << "the case has no key that every row masks";

  CaseInputs poisoned_keys = in;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t j = limit[b]; j < p.n_k; ++j) {
      for (std::int64_t t = 0; t < p.d_k; ++t) poisoned_keys.k.set(poisoned_keys.k.offset(b, 0, j, t), std::numeric_limits<double>::quiet_NaN());
      for (std::int64_t c = 0; c < p.d_v; ++c) poisoned_keys.v.set(poisoned_keys.v.offset(b, 0, j, c), std::numeric_limits<double>::quiet_NaN());
    }
  const Gradients with_nan = backward(p, poisoned_keys, d_o, f);
  auto same_values = [](const Tensor& a, const Tensor& b, const char* what) {
    for (std::int64_t e = 0; e < a.numel(); ++e)
      if (!(a.get(e) == b.get(e))) return ::testing::AssertionFailure() << what << " element " << e << ": " << a.get(e) << " vs " << b.get(e);
    return ::testing::AssertionSuccess();
  };
  EXPECT_TRUE(same_values(g.dq, with_nan.dq, "dQ"));
  EXPECT_TRUE(same_values(g.dk, with_nan.dk, "dK"));
  EXPECT_TRUE(same_values(g.dv, with_nan.dv, "dV"));
}

// The same bits on every run and for any thread count: each key tile belongs to one slot, each
// slot's dQ partial sums its tiles in order, and the partials are summed in slot order.
TEST(CpuBlockedBackward, ResultsAreBitwiseIdenticalAcrossRunsAndThreadCounts) {
  for (const char* repro : {"op=backward b=1 hq=4 hkv=2 nq=700 nk=900 dk=32 dv=32 dtype=f32 causal=bottom_right regime=diffuse seed=14",
                            "op=backward b=3 hq=2 hkv=1 nq=40 nk=300 dk=16 dv=16 dtype=bf16 causal=none softcap=5 dropout=0.2 regime=peaked seed=15"}) {
    SCOPED_TRACE(repro);
    const Problem p = parse_problem(repro);
    const CaseInputs in = generate_inputs(p);
    const Tensor d_o = generate_d_o(p);
    const Forward f = forward(p, in);
    const Gradients first = backward(p, in, d_o, f);
    for (int threads : {0, 1, 2, 3, 7}) {
      const Gradients again = backward(p, in, d_o, f, threads);
      EXPECT_TRUE(first.dq == again.dq) << threads << " threads";
      EXPECT_TRUE(first.dk == again.dk) << threads << " threads";
      EXPECT_TRUE(first.dv == again.dv) << threads << " threads";
    }
  }
}

// The workspace holds tiles, per-head accumulators and per-slot partial rows: it grows with n,
// linearly, and stays far below a materialised P and dP.
TEST(CpuBlockedBackward, WorkspaceGrowsLinearlyWithTheSequence) {
  auto bytes = [](std::int64_t n) {
    return blocked().workspace_bytes(parse_problem("op=backward b=1 hq=8 hkv=8 nq=" + std::to_string(n) + " nk=" + std::to_string(n) +
                                                   " dk=64 dv=64 dtype=f32 causal=none regime=diffuse seed=1"));
  };
  const double big = double(bytes(16384));
  EXPECT_LE(big, 2.0 * 16384 * 16384 * 4 / 64);
  EXPECT_LE(double(bytes(32768)), 2.0 * big);
  EXPECT_GT(double(bytes(32768)), 1.2 * big);
}

}  // namespace
}  // namespace attn

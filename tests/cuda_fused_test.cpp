// cuda_fused on a GPU (label gpu). Every test skips, with the reason, where no device is. With
// one: verify on the quick case set in f32, f16 and bf16 passes; edge shapes and every mask kind
// in every head dimension pass against the reference, and so do other head dimensions and d_k !=
// d_v (zero-padded), whose bits are the unpadded kernel's; 250 repeated runs are bitwise identical;
// b * h_q > 65535 runs (a 1-D grid); a NaN or Inf in a masked key's V changes no output bit
// while a visible one reaches exactly its rows; a prepared run checks its output and holds a
// workspace independent of n. The backward pass (verify op=backward, end to end on its own
// forward): the quick set's supported cases, edge shapes with causality, padding, GQA and padded
// head dimensions pass against the backward reference; fully masked rows get dQ = 0 and unseen
// keys dK = dV = 0 exactly; 20 runs are bitwise identical; refusals name what is missing; a
// prepared backward run checks its gradients. Small sizes, so that compute-sanitizer (memcheck,
// racecheck, synccheck) runs this binary in minutes (ci/gpu-suite.sh).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/case_sets.hpp"
#include "core/inputs.hpp"
#include "impls/cuda_support/cuda_support.hpp"
#include "impls/cuda_support/device_resources.hpp"
#include "impls/registry.hpp"
#include "tests/gradient_accuracy.hpp"
#include "verification/verify.hpp"

namespace attn {
namespace {
using testing::masked_gradients_are_zero;
using testing::MaskedZeros;

class CudaFused : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_status().available) GTEST_SKIP() << cuda::device_status().reason;
    register_builtin_implementations(registry_);
    impl_ = registry_.find("cuda_fused");
    ASSERT_NE(impl_, nullptr);
  }
  Registry registry_;
  const Implementation* impl_ = nullptr;
};

std::string failures(const VerifyRun& run) {
  std::string text;
  for (const Record& r : run.records) {
    if (r.status == Status::pass) continue;
    text += fmt::format("\n  {} {} on {}: ", r.implementation, to_string(r.status), r.context->problem.repro());
    text += r.status == Status::skip ? r.skip_reason : "";
    for (const auto& reason : r.verdict.reasons) text += reason + "; ";
  }
  return text;
}

void expect_pass(const Implementation& impl, const std::vector<Problem>& cases) {
  ASSERT_FALSE(cases.empty());
  const VerifyRun run = verify({&impl}, cases, VerifyOptions{});
  EXPECT_EQ(run.failed(), 0) << failures(run);
  EXPECT_EQ(run.passed() + run.skipped(), int(cases.size())) << failures(run);
}

std::vector<Problem> quick_supported(const Implementation& impl, DType dtype) {
  std::vector<Problem> cases;
  for (const Problem& p : quick_cases())
    if (p.dtype == dtype && impl.supports(p).ok) cases.push_back(p);
  return cases;
}

TEST_F(CudaFused, QuickCasesPassInF32) { expect_pass(*impl_, quick_supported(*impl_, DType::f32)); }
TEST_F(CudaFused, QuickCasesPassInF16) { expect_pass(*impl_, quick_supported(*impl_, DType::f16)); }
TEST_F(CudaFused, QuickCasesPassInBf16) { expect_pass(*impl_, quick_supported(*impl_, DType::bf16)); }

Problem edge(DType dtype, std::int64_t d, std::int64_t n_q, std::int64_t n_k, std::uint64_t seed) {
  Problem p;
  p.batch = 2, p.h_q = 4, p.h_kv = 2, p.n_q = n_q, p.n_k = n_k, p.d_k = d, p.d_v = d, p.dtype = dtype, p.seed = seed;
  return p;
}

// Partial tiles (tile +- 1, primes, length 1, n_q != n_k both ways) and every mask kind, in every
// head dimension and dtype.
TEST_F(CudaFused, EdgeShapesAndEveryMaskKindPass) {
  std::vector<Problem> cases;
  std::uint64_t seed = 1;
  for (DType dtype : {DType::f16, DType::bf16, DType::f32})
    for (std::int64_t d : {32, 64, 96, 128, 256})
      for (auto [n_q, n_k] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {127, 129}, {129, 63}, {65, 200}, {31, 33}}) {
        Problem p = edge(dtype, d, n_q, n_k, seed++);
        cases.push_back(p);
        p.window = Window::of(Causal::top_left), p.seed = seed++;
        cases.push_back(p);
        p.window = Window::of(Causal::bottom_right), p.seed = seed++;
        cases.push_back(p);
        p.window = Window::of(Causal::none);
        p.padding = KeyPadding{KeyPadding::Kind::per_batch, {n_k / 2, 0}};  // batch 1 fully masked
        cases.push_back(p);
        p.padding = KeyPadding{};
        p.bool_mask = BoolMaskSpec{true, 0.6, Broadcast::per_batch_head};
        cases.push_back(p);
        p.bool_mask = BoolMaskSpec{};
        p.bias = BiasSpec{true, 2.0, Broadcast::per_head};
        p.window = Window::of(Causal::bottom_right);
        cases.push_back(p);
      }
  expect_pass(*impl_, cases);
}

// Head dimensions without a kernel of their own and d_k != d_v run zero-padded on the next kernel
// up: every dtype, both kernels (128/64 pads to the wgmma kernel's d on an H100 or H200), with masks.
TEST_F(CudaFused, PaddedHeadDimensionsPass) {
  std::vector<Problem> cases;
  std::uint64_t seed = 100;
  for (DType dtype : {DType::f16, DType::bf16, DType::f32})
    for (auto [d_k, d_v] : {std::pair<std::int64_t, std::int64_t>{128, 64}, {192, 128}, {16, 40}, {48, 48}, {64, 96}, {8, 8}, {80, 80}})
      for (auto [n_q, n_k] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {129, 63}, {65, 200}}) {
        Problem p = edge(dtype, d_k, n_q, n_k, seed++);
        p.d_v = d_v;
        cases.push_back(p);
        p.window = Window::of(Causal::bottom_right), p.seed = seed++;
        cases.push_back(p);
        p.bias = BiasSpec{true, 2.0, Broadcast::per_head}, p.seed = seed++;
        cases.push_back(p);
      }
  expect_pass(*impl_, cases);
}

// Padding is exact: a 128/64 problem's O and LSE are bit for bit the first 64 columns and the LSE
// of the 128/128 problem whose V starts with the same 64 columns (same kernel, same scores, output
// columns independent of each other).
TEST_F(CudaFused, PaddedValuesGiveTheUnpaddedKernelsBits) {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    Problem full = edge(dtype, 128, 150, 170, 21);
    full.window = Window::of(Causal::bottom_right);
    Problem narrow = full;
    narrow.d_v = 64;
    const CaseInputs full_in = generate_inputs(full);
    CaseInputs narrow_in = generate_inputs(narrow);
    narrow_in.q = full_in.q, narrow_in.k = full_in.k;
    for (std::int64_t h = 0; h < narrow.h_kv; ++h)
      for (std::int64_t b = 0; b < narrow.batch; ++b)
        for (std::int64_t j = 0; j < narrow.n_k; ++j)
          for (std::int64_t c = 0; c < 64; ++c) narrow_in.v.set_bits(narrow_in.v.offset(b, h, j, c), full_in.v.bits(full_in.v.offset(b, h, j, c)));
    Tensor full_out = make_output(full), full_lse = make_lse(full), narrow_out = make_output(narrow), narrow_lse = make_lse(narrow);
    impl_->run(RunArgs{full, full_in, RoleTensors::forward(full_in, full_out, &full_lse), {}});
    impl_->run(RunArgs{narrow, narrow_in, RoleTensors::forward(narrow_in, narrow_out, &narrow_lse), {}});
    ASSERT_TRUE(narrow_lse == full_lse) << to_string(dtype);
    for (std::int64_t b = 0; b < narrow.batch; ++b)
      for (std::int64_t h = 0; h < narrow.h_q; ++h)
        for (std::int64_t i = 0; i < narrow.n_q; ++i)
          for (std::int64_t c = 0; c < 64; ++c)
            ASSERT_EQ(narrow_out.bits(narrow_out.offset(b, h, i, c)), full_out.bits(full_out.offset(b, h, i, c)))
                << to_string(dtype) << " b=" << b << " h=" << h << " i=" << i << " c=" << c;
  }
}

TEST_F(CudaFused, RepeatedRunsAreBitwiseIdentical) {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    Problem p = edge(dtype, 128, 200, 300, 11);
    p.window = Window::of(Causal::bottom_right);
    const CaseInputs in = generate_inputs(p);
    const auto run = impl_->prepare_device_run(p, in);
    cuda::Stream stream;
    run->enqueue(stream.get());
    Tensor first = make_output(p), first_lse = make_lse(p);
    impl_->run(RunArgs{p, in, RoleTensors::forward(in, first, &first_lse), {}});
    for (int i = 0; i < 250; ++i) {
      Tensor out = make_output(p), lse = make_lse(p);
      impl_->run(RunArgs{p, in, RoleTensors::forward(in, out, &lse), {}});
      ASSERT_TRUE(out == first) << to_string(dtype) << ": run " << i << " differs";
      ASSERT_TRUE(lse == first_lse) << to_string(dtype) << ": LSE of run " << i << " differs";
    }
  }
}

TEST_F(CudaFused, BatchTimesHeadsBeyond65535) {
  Problem p;
  p.batch = 2, p.h_q = 35000, p.h_kv = 35000, p.n_q = 3, p.n_k = 5, p.d_k = 64, p.d_v = 64, p.dtype = DType::bf16, p.seed = 3;
  expect_pass(*impl_, {p});
}

TEST_F(CudaFused, NonFiniteValuesOfMaskedKeysChangeNoOutputBit) {
  // d = 128 in f16/bf16 is the wgmma kernel on an H100 or H200, d = 64 the mma.sync one.
  for (const auto& [dtype, d] : {std::pair{DType::f16, 64}, std::pair{DType::bf16, 64}, std::pair{DType::f32, 64},
                                 std::pair{DType::f16, 128}, std::pair{DType::bf16, 128}}) {
    Problem p = edge(dtype, d, 70, 90, 5);
    p.window = Window::of(Causal::top_left);  // row i sees keys 0..i: key 40 is masked for rows < 40, visible from 40
    const CaseInputs in = generate_inputs(p);
    Tensor clean = make_output(p);
    impl_->run(RunArgs{p, in, RoleTensors::forward(in, clean), {}});
    for (double poison : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
      CaseInputs poisoned = generate_inputs(p);
      for (std::int64_t c = 0; c < p.d_v; ++c) poisoned.v.set(poisoned.v.offset(0, 0, 40, c), poison);
      Tensor out = make_output(p);
      impl_->run(RunArgs{p, poisoned, RoleTensors::forward(poisoned, out), {}});
      for (std::int64_t h = 0; h < 2; ++h)  // query heads 0 and 1 read kv head 0
        for (std::int64_t i = 0; i < p.n_q; ++i)
          for (std::int64_t c = 0; c < p.d_v; ++c) {
            const double got = out.get(out.offset(0, h, i, c)), want = clean.get(clean.offset(0, h, i, c));
            if (i < 40)
              ASSERT_EQ(out.bits(out.offset(0, h, i, c)), clean.bits(clean.offset(0, h, i, c)))
                  << to_string(dtype) << " d = " << d << ": row " << i << " does not see key 40 (V = " << poison << ")";
            else
              ASSERT_FALSE(std::isfinite(got)) << to_string(dtype) << " d = " << d << ": row " << i << " sees key 40 (V = " << poison << "), got " << got
                                               << " (clean " << want << ")";
          }
    }
  }
}

TEST_F(CudaFused, PreparedRunChecksItsOutputAndItsWorkspaceIsIndependentOfN) {
  std::size_t first = 0;
  for (std::int64_t n : {128, 1024, 4096}) {
    Problem p = edge(DType::bf16, 128, n, n, 9);
    p.window = Window::of(Causal::top_left);
    const CaseInputs in = generate_inputs(p);
    const auto run = impl_->prepare_device_run(p, in);
    ASSERT_NE(run, nullptr);
    cuda::Stream stream;
    run->enqueue(stream.get());
    run->enqueue(stream.get());
    EXPECT_NO_THROW(run->check_output());
    if (n == 128) first = run->workspace_bytes();
    EXPECT_EQ(run->workspace_bytes(), first) << "n = " << n;
  }
  const Problem p = edge(DType::f16, 64, 40, 40, 2);
  const auto unenqueued = impl_->prepare_device_run(p, generate_inputs(p));
  EXPECT_THROW(unenqueued->check_output(), std::exception);
}

// --- The backward pass --------------------------------------------------------------------------

Problem backward_of(const Problem& p) { return p.with_operation(Operation::backward); }

// The forward's O and LSE, then the backward fed them, as verify runs it end to end.
struct ForwardOutputs {
  Tensor o, lse;
};
ForwardOutputs run_forward(const Implementation& impl, const Problem& backward, const CaseInputs& in) {
  Problem p = backward;
  p.operation = Operation::forward;
  ForwardOutputs f{make_output(p), make_lse(p)};
  impl.run(RunArgs{p, in, RoleTensors::forward(in, f.o, &f.lse), {}});
  return f;
}
Gradients run_backward(const Implementation& impl, const Problem& p, const CaseInputs& in, const Tensor& d_o, const ForwardOutputs& f) {
  Gradients g = make_gradients(p);
  impl.run(RunArgs{p, in, RoleTensors::backward(in, d_o, g.dq, g.dk, g.dv, &f.o, &f.lse), {}});
  return g;
}

TEST_F(CudaFused, BackwardQuickCasesPass) {
  std::vector<Problem> cases;
  for (const Problem& p : quick_cases())
    if (impl_->supports(backward_of(p)).ok) cases.push_back(backward_of(p));
  expect_pass(*impl_, cases);
}

// Partial tiles (tile +- 1, primes, length 1, n_q != n_k both ways), causality in both
// alignments, padding per batch (one batch fully masked) and per query (rows of no key), GQA
// (2 query heads per kv head) and MQA, d = 64 and 128 and padded ones (40; 128/64: V, dO, dV
// alone; 16/96: Q, K and V to different widths), the padded ones on two shapes.
TEST_F(CudaFused, BackwardEdgeShapesAndMasksPass) {
  using Pair = std::pair<std::int64_t, std::int64_t>;
  const std::vector<Pair> every_shape{{1, 1}, {127, 129}, {129, 63}, {65, 200}, {200, 65}, {31, 33}}, two_shapes{{127, 129}, {200, 65}};
  std::vector<Problem> cases;
  std::uint64_t seed = 300;
  for (DType dtype : {DType::f16, DType::bf16})
    for (auto [d_k, d_v] : {Pair{64, 64}, Pair{128, 128}, Pair{40, 40}, Pair{128, 64}, Pair{16, 96}})
      for (auto [n_q, n_k] : d_k == d_v && (d_k == 64 || d_k == 128) ? every_shape : two_shapes) {
        Problem p = backward_of(edge(dtype, d_k, n_q, n_k, seed++));
        p.d_v = d_v;
        cases.push_back(p);
        p.window = Window::of(Causal::top_left), p.seed = seed++;
        cases.push_back(p);
        p.window = Window::of(Causal::bottom_right), p.seed = seed++;
        cases.push_back(p);
        p.padding = KeyPadding{KeyPadding::Kind::per_batch, {n_k / 2, 0}}, p.seed = seed++;  // batch 1 fully masked
        cases.push_back(p);
        p.window = Window::of(Causal::none);
        std::vector<std::int64_t> lengths;
        for (std::int64_t i = 0; i < 2 * n_q; ++i) lengths.push_back(i % 5 == 0 ? 0 : (i * 37) % (n_k + 1));
        p.padding = KeyPadding{KeyPadding::Kind::per_query, lengths}, p.seed = seed++;
        cases.push_back(p);
      }
  Problem mqa = backward_of(edge(DType::bf16, 128, 150, 170, seed++));
  mqa.h_q = 8, mqa.h_kv = 1, mqa.window = Window::of(Causal::bottom_right);
  cases.push_back(mqa);
  expect_pass(*impl_, cases);
}

// Rows that see no key get dQ = 0 and keys that no row sees dK = dV = 0, exactly; every element
// is written.
TEST_F(CudaFused, BackwardFullyMaskedRowsAndUnseenKeysGetExactlyZero) {
  for (DType dtype : {DType::f16, DType::bf16})
    for (std::int64_t d : {64, 128}) {
      Problem p = backward_of(edge(dtype, d, 90, 150, 17));
      std::vector<std::int64_t> lengths;
      for (std::int64_t i = 0; i < 2 * p.n_q; ++i) lengths.push_back(i % 7 == 0 ? 0 : std::min<std::int64_t>(130, 20 + i));
      p.padding = KeyPadding{KeyPadding::Kind::per_query, lengths};
      const CaseInputs in = generate_inputs(p);
      const Tensor d_o = generate_d_o(p);
      const Gradients g = run_backward(*impl_, p, in, d_o, run_forward(*impl_, p, in));
      for (const Tensor* t : {&g.dq, &g.dk, &g.dv})
        for (std::int64_t e = 0; e < t->numel(); ++e) ASSERT_FALSE(t->is_poisoned(e)) << "element " << e << " left unwritten";
      MaskedZeros zeros;
      ASSERT_TRUE(masked_gradients_are_zero(p, in, g, zeros));
      EXPECT_GT(zeros.fully_masked_rows, 0);
      EXPECT_GT(zeros.unseen_keys, 0);
    }
}

// Deterministic as declared: no atomics, one writer per element, sums in fixed orders.
TEST_F(CudaFused, BackwardRepeatedRunsAreBitwiseIdentical) {
  for (DType dtype : {DType::bf16, DType::f16})
    for (std::int64_t d : {64, 128}) {
      Problem p = backward_of(edge(dtype, d, 200, 300, 12));
      p.window = Window::of(Causal::bottom_right);
      const CaseInputs in = generate_inputs(p);
      const Tensor d_o = generate_d_o(p);
      const ForwardOutputs f = run_forward(*impl_, p, in);
      const Gradients first = run_backward(*impl_, p, in, d_o, f);
      for (int i = 0; i < 20; ++i) {
        const Gradients again = run_backward(*impl_, p, in, d_o, f);
        ASSERT_TRUE(again.dq == first.dq) << to_string(dtype) << " d = " << d << ": dQ of run " << i << " differs";
        ASSERT_TRUE(again.dk == first.dk) << to_string(dtype) << " d = " << d << ": dK of run " << i << " differs";
        ASSERT_TRUE(again.dv == first.dv) << to_string(dtype) << " d = " << d << ": dV of run " << i << " differs";
      }
    }
}

// With a device, what the backward lacks is refused by supports() naming it.
TEST_F(CudaFused, BackwardRefusesWhatItLacksNamingIt) {
  Problem p = backward_of(edge(DType::f16, 64, 40, 40, 1));
  EXPECT_TRUE(impl_->supports(p).ok) << impl_->supports(p).reason;
  p.bias = BiasSpec{true, 1.0, Broadcast::per_head};
  EXPECT_NE(impl_->supports(p).reason.find("additive bias"), std::string::npos) << impl_->supports(p).reason;
  p.bias = BiasSpec{};
  p.bool_mask = BoolMaskSpec{true, 0.5, Broadcast::per_head};
  EXPECT_NE(impl_->supports(p).reason.find("boolean mask"), std::string::npos) << impl_->supports(p).reason;
  EXPECT_NE(impl_->supports(backward_of(edge(DType::f32, 64, 40, 40, 1))).reason.find("f32"), std::string::npos);
  EXPECT_NE(impl_->supports(backward_of(edge(DType::bf16, 256, 40, 40, 1))).reason.find("d = 64 and 128"), std::string::npos);
}

// A prepared backward run (its O and LSE from one forward at preparation) enqueues the backward
// alone, writes every gradient element, and its workspace does not grow with n beyond 8 bytes per
// query row (D and the base-2 LSE); unenqueued, its poisoned gradients fail the check.
TEST_F(CudaFused, PreparedBackwardRunChecksItsGradients) {
  std::size_t fixed = 0;
  for (std::int64_t n : {128, 1024}) {
    Problem p = backward_of(edge(DType::bf16, 128, n, n, 9));
    p.window = Window::of(Causal::top_left);
    const CaseInputs in = generate_inputs(p);
    const auto run = impl_->prepare_device_run(p, in);
    ASSERT_NE(run, nullptr);
    cuda::Stream stream;
    run->enqueue(stream.get());
    run->enqueue(stream.get());
    EXPECT_NO_THROW(run->check_output());
    const std::size_t beyond_rows = run->workspace_bytes() - std::size_t(8 * p.rows());
    if (n == 128) fixed = beyond_rows;
    EXPECT_EQ(beyond_rows, fixed) << "n = " << n;
  }
  const Problem p = backward_of(edge(DType::f16, 40, 40, 40, 2));  // padded: the gradients come back through d = 64 buffers
  const auto unenqueued = impl_->prepare_device_run(p, generate_inputs(p));
  EXPECT_THROW(unenqueued->check_output(), std::exception);
}

}  // namespace
}  // namespace attn

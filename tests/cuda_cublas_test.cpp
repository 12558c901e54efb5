// cuda_cublas on a GPU (label gpu). Every test skips, with the reason, where no device is.
// With one: verify on the quick case set in every dtype (and the TF32 variant in f32) passes,
// forward and backward; a prepared device run, forward or backward, enqueues and checks its
// output; repeated runs are bitwise equal, gradients too; a NaN in a masked key's V changes no
// output bit, and in a masked key's K and V no gradient bit; fully masked rows get dQ = 0 and
// keys no row sees dK = dV = 0, exactly; grouped heads' gradients pass; the guards catch a write
// outside O; a failed CUDA call becomes an exception naming the call. Small sizes, so that
// compute-sanitizer (memcheck, racecheck) runs this binary in a minute or two (ci/gpu-suite.sh).
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/case_sets.hpp"
#include "core/inputs.hpp"
#include "impls/cuda_support/device_resources.hpp"
#include "impls/cuda_support/cuda_support.hpp"
#include "impls/registry.hpp"
#include "tests/gradient_accuracy.hpp"
#include "verification/verify.hpp"

namespace attn {
namespace {
using testing::masked_gradients_are_zero;
using testing::MaskedZeros;

class CudaCublas : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_status().available) GTEST_SKIP() << cuda::device_status().reason;
    register_builtin_implementations(registry_);
  }
  const Implementation& impl(const char* name) const {
    const Implementation* found = registry_.find(name);
    if (!found) throw std::logic_error(std::string(name) + " is not registered");
    return *found;
  }
  Registry registry_;
};

Problem small(DType dtype) {
  Problem p;
  p.batch = 2, p.h_q = 4, p.h_kv = 2, p.n_q = 17, p.n_k = 33, p.d_k = 24, p.d_v = 16, p.dtype = dtype;
  p.window = Window::of(Causal::bottom_right);
  p.seed = 7;
  return p;
}

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

void expect_cases_pass(const Implementation& impl, const std::vector<Problem>& cases) {
  ASSERT_FALSE(cases.empty());
  const VerifyRun run = verify({&impl}, cases, VerifyOptions{});
  EXPECT_EQ(run.failed(), 0) << failures(run);
  EXPECT_EQ(run.skipped(), 0) << failures(run);
  EXPECT_EQ(run.passed(), int(cases.size())) << failures(run);
}

// The quick set's cases of one dtype, as the operation: a backward case runs end to end (verify
// feeds the backward its own forward's LSE, judges dQ, dK and dV, and runs it twice for the bits).
void expect_quick_cases_pass(const Implementation& impl, DType dtype, Operation operation = Operation::forward) {
  std::vector<Problem> cases;
  for (Problem p : quick_cases())
    if (p.dtype == dtype) {
      p.operation = operation;
      cases.push_back(p);
    }
  expect_cases_pass(impl, cases);
}

TEST_F(CudaCublas, QuickCasesPassInF32) { expect_quick_cases_pass(impl("cuda_cublas"), DType::f32); }
TEST_F(CudaCublas, QuickCasesPassInF16) { expect_quick_cases_pass(impl("cuda_cublas"), DType::f16); }
TEST_F(CudaCublas, QuickCasesPassInBf16) { expect_quick_cases_pass(impl("cuda_cublas"), DType::bf16); }
TEST_F(CudaCublas, QuickCasesPassInF64) { expect_quick_cases_pass(impl("cuda_cublas"), DType::f64); }
TEST_F(CudaCublas, Tf32QuickCasesPassUnderTheTf32Rule) { expect_quick_cases_pass(impl("cuda_cublas_tf32"), DType::f32); }

TEST_F(CudaCublas, BackwardQuickCasesPassInF32) { expect_quick_cases_pass(impl("cuda_cublas"), DType::f32, Operation::backward); }
TEST_F(CudaCublas, BackwardQuickCasesPassInF16) { expect_quick_cases_pass(impl("cuda_cublas"), DType::f16, Operation::backward); }
TEST_F(CudaCublas, BackwardQuickCasesPassInBf16) { expect_quick_cases_pass(impl("cuda_cublas"), DType::bf16, Operation::backward); }
TEST_F(CudaCublas, BackwardQuickCasesPassInF64) { expect_quick_cases_pass(impl("cuda_cublas"), DType::f64, Operation::backward); }
TEST_F(CudaCublas, Tf32BackwardQuickCasesPassUnderTheTf32Rule) {
  expect_quick_cases_pass(impl("cuda_cublas_tf32"), DType::f32, Operation::backward);
}

// dK and dV sum over the r * n_q query rows of each kv head's group inside one GEMM: GQA and MQA
// ratios, with n_q != n_k, d_k != d_v and every mask kind the backward takes.
TEST_F(CudaCublas, BackwardGroupedHeadsPass) {
  std::vector<Problem> cases;
  for (const char* repro : {
           "op=backward b=2 hq=8 hkv=2 nq=33 nk=47 dk=40 dv=24 dtype=bf16 causal=bottom_right bias=1@h regime=diffuse seed=21",
           "op=backward b=1 hq=6 hkv=1 nq=20 nk=65 dk=16 dv=16 dtype=f16 causal=none bool=0.5@bh regime=peaked seed=22",
           "op=backward b=3 hq=4 hkv=2 nq=31 nk=17 dk=8 dv=32 dtype=f32 causal=top_left pad=11,17,5 regime=uniform01 seed=23",
           "op=backward b=1 hq=9 hkv=3 nq=12 nk=12 dk=16 dv=8 dtype=f64 causal=none bias=alibi regime=large seed=24",
       })
    cases.push_back(parse_problem(repro));
  expect_cases_pass(impl("cuda_cublas"), cases);
}

struct ForwardOutputs {
  Tensor o, lse;
};

// The implementation's own forward pass of a backward problem: what its backward is fed.
ForwardOutputs forward_outputs(const Implementation& impl, const Problem& backward, const CaseInputs& in) {
  Problem p = backward;
  p.operation = Operation::forward;
  ForwardOutputs f{make_output(p), make_lse(p)};
  impl.run(RunArgs{p, in, RoleTensors::forward(in, f.o, &f.lse), {}});
  return f;
}

Gradients gradients(const Implementation& impl, const Problem& p, const CaseInputs& in, const Tensor& d_o, const ForwardOutputs& f) {
  Gradients g = make_gradients(p);
  impl.run(RunArgs{p, in, RoleTensors::backward(in, d_o, g.dq, g.dk, g.dv, &f.o, &f.lse), {}});
  return g;
}

std::int64_t poisoned(const Tensor& t) {
  std::int64_t count = 0;
  for (std::int64_t e = 0; e < t.numel(); ++e) count += t.is_poisoned(e);
  return count;
}

// Rows of valid length 0 see no key: LSE -inf, every P and dS exactly 0, so dQ = 0. Keys past every
// row's valid length get dK = dV = 0 exactly, and NaN or Inf in their K and V changes no gradient
// bit (K' keeps them out of dQ; their dP, NaN, is never read). Every dtype: f16 and bf16 widen and
// narrow, f32 and f64 do not.
TEST_F(CudaCublas, BackwardMaskedRowsAndKeysGetExactlyZeroAndMaskedNonFiniteStaysOut) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    SCOPED_TRACE(std::string(to_string(dtype)));
    const std::int64_t n_q = 21, limit[] = {40, 23};
    std::string lengths;
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t i = 0; i < n_q; ++i)
        lengths += (lengths.empty() ? "" : ",") + std::to_string(i % 5 == 0 ? 0 : limit[b] - (i * 7) % 13);
    const Problem p = parse_problem(
        fmt::format("op=backward b=2 hq=4 hkv=2 nq={} nk=48 dk=16 dv=8 dtype={} causal=none padq={} regime=diffuse seed=25", n_q,
                    to_string(dtype), lengths));
    const CaseInputs in = generate_inputs(p);
    const Tensor d_o = generate_d_o(p);
    const ForwardOutputs f = forward_outputs(impl("cuda_cublas"), p, in);
    const Gradients g = gradients(impl("cuda_cublas"), p, in, d_o, f);
    EXPECT_EQ(poisoned(g.dq) + poisoned(g.dk) + poisoned(g.dv), 0) << "elements left unwritten";
    MaskedZeros zeros;
    EXPECT_TRUE(masked_gradients_are_zero(p, in, g, zeros));
    EXPECT_GT(zeros.unseen_keys, 0) << "the case has no key that every row masks";
    EXPECT_GT(zeros.fully_masked_rows, 0) << "the case has no fully masked row";

    for (double poison : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
      CaseInputs poisoned_keys = generate_inputs(p);
      for (std::int64_t b = 0; b < p.batch; ++b)
        for (std::int64_t g_kv = 0; g_kv < p.h_kv; ++g_kv)
          for (std::int64_t j = limit[b]; j < p.n_k; ++j) {
            for (std::int64_t t = 0; t < p.d_k; ++t) poisoned_keys.k.set(poisoned_keys.k.offset(b, g_kv, j, t), poison);
            for (std::int64_t c = 0; c < p.d_v; ++c) poisoned_keys.v.set(poisoned_keys.v.offset(b, g_kv, j, c), poison);
          }
      const Gradients with_poison = gradients(impl("cuda_cublas"), p, poisoned_keys, d_o, f);
      EXPECT_TRUE(with_poison.dq == g.dq) << poison << " in masked keys changed dQ";
      EXPECT_TRUE(with_poison.dk == g.dk) << poison << " in masked keys changed dK";
      EXPECT_TRUE(with_poison.dv == g.dv) << poison << " in masked keys changed dV";
    }
  }
}

// No atomics anywhere (cuBLAS's disallowed, the kernels have none), the group sums inside one GEMM:
// two runs on the same inputs give the same bits.
TEST_F(CudaCublas, BackwardRepeatedRunsAreBitwiseEqual) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    SCOPED_TRACE(std::string(to_string(dtype)));
    Problem p = small(dtype);
    p.operation = Operation::backward;
    const CaseInputs in = generate_inputs(p);
    const Tensor d_o = generate_d_o(p);
    const ForwardOutputs f = forward_outputs(impl("cuda_cublas"), p, in);
    const Gradients first = gradients(impl("cuda_cublas"), p, in, d_o, f);
    const Gradients second = gradients(impl("cuda_cublas"), p, in, d_o, f);
    EXPECT_TRUE(first.dq == second.dq);
    EXPECT_TRUE(first.dk == second.dk);
    EXPECT_TRUE(first.dv == second.dv);
  }
}

// The property suite's 23 on peaked f16 rows, where many dS_ij lie below f16's smallest normal:
// dS is kept in f32, so doubling dO doubles every gradient exactly (an f16 dS would round 2x and
// 2 round(x) apart in its subnormals), except where the gradient itself is that small.
TEST_F(CudaCublas, BackwardDoublingDoDoublesEveryGradientExactly) {
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    SCOPED_TRACE(std::string(to_string(dtype)));
    Problem p = small(dtype);
    p.operation = Operation::backward;
    p.regime = Regime::peaked;
    const CaseInputs in = generate_inputs(p);
    const Tensor d_o = generate_d_o(p);
    Tensor doubled = d_o;
    for (std::int64_t e = 0; e < d_o.numel(); ++e) doubled.set(e, 2.0 * d_o.get(e));
    const ForwardOutputs f = forward_outputs(impl("cuda_cublas"), p, in);
    const Gradients once = gradients(impl("cuda_cublas"), p, in, d_o, f);
    const Gradients twice = gradients(impl("cuda_cublas"), p, in, doubled, f);
    const double exempt = 2.0 * min_normal(dtype);
    for (Role role : {Role::dq, Role::dk, Role::dv}) {
      const Tensor &a = once.of(role), &b = twice.of(role);
      std::int64_t differing = 0;
      for (std::int64_t e = 0; e < a.numel(); ++e) differing += !(b.get(e) == 2.0 * a.get(e)) && !(std::fabs(a.get(e)) < exempt);
      EXPECT_EQ(differing, 0) << to_string(role);
    }
  }
}

// P is recomputed from the forward's LSE: a backward call without it is refused, naming it.
TEST_F(CudaCublas, BackwardWithoutTheLseThrowsNamingIt) {
  Problem p = small(DType::f32);
  p.operation = Operation::backward;
  const CaseInputs in = generate_inputs(p);
  const Tensor d_o = generate_d_o(p);
  const ForwardOutputs f = forward_outputs(impl("cuda_cublas"), p, in);
  Gradients g = make_gradients(p);
  try {
    impl("cuda_cublas").run(RunArgs{p, in, RoleTensors::backward(in, d_o, g.dq, g.dk, g.dv, &f.o, nullptr), {}});
    FAIL() << "a backward without the LSE ran";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("LSE"), std::string::npos) << e.what();
  }
}

TEST_F(CudaCublas, PreparedRunEnqueuesAndChecksItsOutput) {
  const Problem p = small(DType::f16);
  const CaseInputs in = generate_inputs(p);
  const auto run = impl("cuda_cublas").prepare_device_run(p, in);
  ASSERT_NE(run, nullptr);
  EXPECT_GE(run->workspace_bytes(), std::size_t(p.rows() * p.n_k) * (4 + 2));  // S and P at least
  cuda::Stream stream;
  run->enqueue(stream.get());
  run->enqueue(stream.get());  // a benchmark enqueues many times
  EXPECT_NO_THROW(run->check_output());
}

// A backward problem's device run: its forward ran at preparation (untimed), each enqueue is the
// backward alone, and check_output judges dQ, dK and dV written and finite.
TEST_F(CudaCublas, PreparedBackwardRunEnqueuesAndChecksItsGradients) {
  Problem p = small(DType::bf16);
  p.operation = Operation::backward;
  const CaseInputs in = generate_inputs(p);
  const auto run = impl("cuda_cublas").prepare_device_run(p, in);
  ASSERT_NE(run, nullptr);
  EXPECT_GE(run->workspace_bytes(), std::size_t(p.rows() * p.n_k) * 2 * 4);  // S (then P) and dP (then dS) in f32 at least
  try {
    run->check_output();
    FAIL() << "a backward run that computed nothing passed its output check";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("never written"), std::string::npos) << e.what();
  }
  cuda::Stream stream;
  run->enqueue(stream.get());
  run->enqueue(stream.get());
  EXPECT_NO_THROW(run->check_output());
}

TEST_F(CudaCublas, UnenqueuedRunFailsItsCheck) {
  const Problem p = small(DType::f32);
  const CaseInputs in = generate_inputs(p);
  const auto run = impl("cuda_cublas").prepare_device_run(p, in);
  try {
    run->check_output();
    FAIL() << "a run that computed nothing passed its output check";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("never written"), std::string::npos) << e.what();
  }
}

TEST_F(CudaCublas, RepeatedRunsAreBitwiseEqual) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const Problem p = small(dtype);
    const CaseInputs in = generate_inputs(p);
    Tensor a = make_output(p), b = make_output(p), lse_a = make_lse(p), lse_b = make_lse(p);
    impl("cuda_cublas").run(RunArgs{p, in, RoleTensors::forward(in, a, &lse_a), {}});
    impl("cuda_cublas").run(RunArgs{p, in, RoleTensors::forward(in, b, &lse_b), {}});
    EXPECT_TRUE(a == b) << to_string(dtype);
    EXPECT_TRUE(lse_a == lse_b) << to_string(dtype);
  }
}

// The output GEMM multiplies every key's V by its weight; a masked key's weight is exactly 0,
// and without the finite-V pass 0 * NaN would put NaN into every row of that kv head.
TEST_F(CudaCublas, NonFiniteValuesOfMaskedKeysChangeNoOutputBit) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    Problem p = small(dtype);
    p.window = Window::of(Causal::top_left);  // query i sees keys 0..i
    const CaseInputs in = generate_inputs(p);
    Tensor clean = make_output(p);
    impl("cuda_cublas").run(RunArgs{p, in, RoleTensors::forward(in, clean), {}});
    for (double poison : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
      CaseInputs poisoned = generate_inputs(p);
      const std::int64_t last = p.n_k - 1;  // seen by no query (n_q < n_k) under top-left causality
      for (std::int64_t b = 0; b < p.batch; ++b)
        for (std::int64_t g = 0; g < p.h_kv; ++g)
          for (std::int64_t c = 0; c < p.d_v; ++c) poisoned.v.set(poisoned.v.offset(b, g, last, c), poison);
      Tensor out = make_output(p);
      impl("cuda_cublas").run(RunArgs{p, poisoned, RoleTensors::forward(poisoned, out), {}});
      EXPECT_TRUE(out == clean) << to_string(dtype) << ": V = " << poison << " in a masked key changed the output";
    }
    // A visible key's NaN does reach the rows that see it (and only those).
    CaseInputs visible = generate_inputs(p);
    visible.v.set(visible.v.offset(0, 0, 3, 0), std::numeric_limits<double>::quiet_NaN());
    Tensor out = make_output(p);
    impl("cuda_cublas").run(RunArgs{p, visible, RoleTensors::forward(visible, out), {}});
    EXPECT_FALSE(std::isnan(out.get(out.offset(0, 0, 2, 0)))) << to_string(dtype) << ": row 2 does not see key 3";
    EXPECT_TRUE(std::isnan(out.get(out.offset(0, 0, 3, 0)))) << to_string(dtype) << ": row 3 sees key 3";
    EXPECT_FALSE(std::isnan(out.get(out.offset(0, 0, 3, 1)))) << to_string(dtype) << ": column 1 of V is finite";
  }
}

TEST_F(CudaCublas, GuardsCatchWritesOutsideThePayload) {
  {
    cuda::GuardedBuffer intact(64, 256);
    cuda::check(cudaMemset(intact.data(), 0, intact.bytes()), "cudaMemset");
    EXPECT_NO_THROW(intact.check_guards("O"));
  }
  {
    cuda::GuardedBuffer after(64, 256);
    cuda::check(cudaMemset(static_cast<char*>(after.data()) + 64, 0, 4), "cudaMemset");
    try {
      after.check_guards("O");
      FAIL() << "a write past the end went unnoticed";
    } catch (const cuda::CudaError& e) {
      EXPECT_STREQ(e.what(), "wrote past the end of O (4 guard bytes changed after)");
    }
  }
  {
    cuda::GuardedBuffer before(64, 256);
    cuda::check(cudaMemset(static_cast<char*>(before.data()) - 3, 0, 3), "cudaMemset");
    try {
      before.check_guards("O");
      FAIL() << "a write before the start went unnoticed";
    } catch (const cuda::CudaError& e) {
      EXPECT_STREQ(e.what(), "wrote before the start of O (3 guard bytes changed before)");
    }
  }
}

TEST_F(CudaCublas, CudaErrorsBecomeExceptionsNamingTheCall) {
  try {
    cuda::DeviceBuffer absurd(std::size_t(1) << 62);
    FAIL() << "a 4 EiB allocation succeeded";
  } catch (const cuda::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("cudaMalloc failed"), std::string::npos) << e.what();
  }
  // The device is still usable afterwards (the error was not sticky).
  const Problem p = small(DType::f32);
  const CaseInputs in = generate_inputs(p);
  Tensor out = make_output(p);
  EXPECT_NO_THROW(impl("cuda_cublas").run(RunArgs{p, in, RoleTensors::forward(in, out), {}}));
}

}  // namespace
}  // namespace attn

// cuda_cublas on a GPU (label gpu). Every test skips, with the reason, where no device is.
// With one: verify on the quick case set in every dtype (and the TF32 variant in f32) passes;
// a prepared device run enqueues and checks its output; repeated runs are bitwise equal; a NaN
// in a masked key's V changes no output bit; the guards catch a write outside O; a failed CUDA
// call becomes an exception naming the call. Small sizes, so that compute-sanitizer (memcheck,
// racecheck) runs this binary in a minute or two (ci/gpu-suite.sh).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/case_sets.hpp"
#include "core/inputs.hpp"
#include "impls/cuda_support/device_resources.hpp"
#include "impls/cuda_support/cuda_support.hpp"
#include "impls/registry.hpp"
#include "verification/verify.hpp"

namespace attn {
namespace {

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

void expect_quick_cases_pass(const Implementation& impl, DType dtype) {
  std::vector<Problem> cases;
  for (const Problem& p : quick_cases())
    if (p.dtype == dtype) cases.push_back(p);
  ASSERT_FALSE(cases.empty());
  const VerifyRun run = verify({&impl}, cases, VerifyOptions{});
  EXPECT_EQ(run.failed(), 0) << failures(run);
  EXPECT_EQ(run.skipped(), 0) << failures(run);
  EXPECT_EQ(run.passed(), int(cases.size())) << failures(run);
}

TEST_F(CudaCublas, QuickCasesPassInF32) { expect_quick_cases_pass(impl("cuda_cublas"), DType::f32); }
TEST_F(CudaCublas, QuickCasesPassInF16) { expect_quick_cases_pass(impl("cuda_cublas"), DType::f16); }
TEST_F(CudaCublas, QuickCasesPassInBf16) { expect_quick_cases_pass(impl("cuda_cublas"), DType::bf16); }
TEST_F(CudaCublas, QuickCasesPassInF64) { expect_quick_cases_pass(impl("cuda_cublas"), DType::f64); }
TEST_F(CudaCublas, Tf32QuickCasesPassUnderTheTf32Rule) { expect_quick_cases_pass(impl("cuda_cublas_tf32"), DType::f32); }

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

// cuda_cublas's host-side plan, on the CPU (no device needed): the two GEMMs' shapes, leading
// dimensions and strides for MHA, GQA and MQA with n_q != n_k and d_k != d_v; that the folded
// GEMM pairs every query head with its kv head (Problem::kv_head) and writes every score and
// output row exactly once, within its buffer; 64-bit strides; the softmax grid for huge
// b * h_q * n_q; the reasons for rejecting a problem.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/case_sets.hpp"
#include "impls/cuda_cublas/cublas_plan.hpp"
#include "impls/cuda_support/device_resources.hpp"
#include "impls/cuda_support/cuda_support.hpp"
#include "impls/registry.hpp"
#include "verification/verify.hpp"

namespace attn::cuda_cublas {
namespace {

Problem shape(std::int64_t b, std::int64_t h_q, std::int64_t h_kv, std::int64_t n_q, std::int64_t n_k, std::int64_t d_k,
              std::int64_t d_v, DType dtype = DType::f32) {
  Problem p;
  p.batch = b, p.h_q = h_q, p.h_kv = h_kv, p.n_q = n_q, p.n_k = n_k, p.d_k = d_k, p.d_v = d_v, p.dtype = dtype;
  return p;
}

CublasAttentionPlan plan_of(const Problem& p, MatmulPrecision precision = MatmulPrecision::working) {
  PlanResult r = make_cublas_plan(p, precision);
  EXPECT_TRUE(r.plan.has_value()) << p.repro() << ": " << r.reason;
  return r.plan ? *r.plan : CublasAttentionPlan{};
}

// The last element a column-major operand of rows x cols with leading dimension ld touches, in
// the last batch entry.
std::int64_t last_element(std::int64_t batch_count, std::int64_t stride, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return (batch_count - 1) * stride + (cols - 1) * ld + (rows - 1);
}

struct Shape {
  const char* name;
  Problem problem;
};

class PlanShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(PlanShapes, GemmArgumentsAreTheRowMajorProductsTransposed) {
  const Problem& p = GetParam().problem;
  const CublasAttentionPlan plan = plan_of(p);
  const std::int64_t r = p.h_q / p.h_kv;
  EXPECT_EQ(plan.group, r);

  const GemmArgs& s = plan.scores;
  EXPECT_EQ(s.trans_a, CUBLAS_OP_T);
  EXPECT_EQ(s.trans_b, CUBLAS_OP_N);
  EXPECT_EQ(s.m, p.n_k);
  EXPECT_EQ(s.n, r * p.n_q);
  EXPECT_EQ(s.k, p.d_k);
  EXPECT_EQ(s.lda, p.d_k);
  EXPECT_EQ(s.ldb, p.d_k);
  EXPECT_EQ(s.ldc, p.n_k);
  EXPECT_EQ(s.stride_a, p.n_k * p.d_k);
  EXPECT_EQ(s.stride_b, r * p.n_q * p.d_k);
  EXPECT_EQ(s.stride_c, r * p.n_q * p.n_k);
  EXPECT_EQ(s.batch_count, p.batch * p.h_kv);
  EXPECT_DOUBLE_EQ(s.alpha, p.effective_scale());
  EXPECT_EQ(s.beta, 0.0);

  const GemmArgs& o = plan.output;
  EXPECT_EQ(o.trans_a, CUBLAS_OP_N);
  EXPECT_EQ(o.trans_b, CUBLAS_OP_N);
  EXPECT_EQ(o.m, p.d_v);
  EXPECT_EQ(o.n, r * p.n_q);
  EXPECT_EQ(o.k, p.n_k);
  EXPECT_EQ(o.lda, p.d_v);
  EXPECT_EQ(o.ldb, p.n_k);
  EXPECT_EQ(o.ldc, p.d_v);
  EXPECT_EQ(o.stride_a, p.n_k * p.d_v);
  EXPECT_EQ(o.stride_b, r * p.n_q * p.n_k);
  EXPECT_EQ(o.stride_c, r * p.n_q * p.d_v);
  EXPECT_EQ(o.batch_count, p.batch * p.h_kv);
  EXPECT_EQ(o.alpha, 1.0);
  EXPECT_EQ(o.beta, 0.0);

  EXPECT_EQ(plan.q_elements, p.batch * p.h_q * p.n_q * p.d_k);
  EXPECT_EQ(plan.k_elements, p.batch * p.h_kv * p.n_k * p.d_k);
  EXPECT_EQ(plan.v_elements, p.batch * p.h_kv * p.n_k * p.d_v);
  EXPECT_EQ(plan.o_elements, p.batch * p.h_q * p.n_q * p.d_v);
  EXPECT_EQ(plan.score_elements, p.batch * p.h_q * p.n_q * p.n_k);
  EXPECT_EQ(plan.lse_elements, p.batch * p.h_q * p.n_q);

  // Every operand ends exactly at the end of its buffer: nothing read or written past it, and
  // nothing left over. (Scores: A = K is k x m under OP_T, B = Q is k x n, C = S^T is m x n.
  // Output: A = V is m x k, B = P is k x n, C = O^T is m x n.)
  EXPECT_EQ(last_element(s.batch_count, s.stride_a, s.k, s.m, s.lda), plan.k_elements - 1);
  EXPECT_EQ(last_element(s.batch_count, s.stride_b, s.k, s.n, s.ldb), plan.q_elements - 1);
  EXPECT_EQ(last_element(s.batch_count, s.stride_c, s.m, s.n, s.ldc), plan.score_elements - 1);
  EXPECT_EQ(last_element(o.batch_count, o.stride_a, o.m, o.k, o.lda), plan.v_elements - 1);
  EXPECT_EQ(last_element(o.batch_count, o.stride_b, o.k, o.n, o.ldb), plan.score_elements - 1);
  EXPECT_EQ(last_element(o.batch_count, o.stride_c, o.m, o.n, o.ldc), plan.o_elements - 1);
}

// Recomputes, for every batch entry and column of the folded GEMMs, which query row, kv head,
// score row and output row the pointer offsets address, and compares with the problem's rule.
TEST_P(PlanShapes, FoldedGemmPairsEveryQueryHeadWithItsKvHead) {
  const Problem& p = GetParam().problem;
  const CublasAttentionPlan plan = plan_of(p);
  const GemmArgs& s = plan.scores;
  const GemmArgs& o = plan.output;
  std::set<std::int64_t> rows_seen;
  for (std::int64_t e = 0; e < s.batch_count; ++e) {
    // A: K of one (batch, kv head); the output GEMM's A: V of the same one.
    ASSERT_EQ(e * s.stride_a % (p.n_k * p.d_k), 0);
    const std::int64_t k_block = e * s.stride_a / (p.n_k * p.d_k);
    ASSERT_EQ(e * o.stride_a % (p.n_k * p.d_v), 0);
    ASSERT_EQ(e * o.stride_a / (p.n_k * p.d_v), k_block);
    const std::int64_t kb = k_block / p.h_kv, g = k_block % p.h_kv;
    for (std::int64_t col = 0; col < s.n; ++col) {
      const std::int64_t q_offset = e * s.stride_b + col * s.ldb;
      ASSERT_EQ(q_offset % p.d_k, 0);
      const std::int64_t row = q_offset / p.d_k;  // (b * h_q + h) * n_q + i
      const std::int64_t i = row % p.n_q, h = (row / p.n_q) % p.h_q, b = row / (p.n_q * p.h_q);
      ASSERT_EQ(kb, b) << GetParam().name << ": entry " << e << " column " << col;
      ASSERT_EQ(g, p.kv_head(h)) << GetParam().name << ": query head " << h << " of batch " << b << " read kv head " << g;
      ASSERT_TRUE(rows_seen.insert(row).second) << "row " << row << " computed twice";
      ASSERT_LT(i, p.n_q);
      // Its scores land in score row `row`, which the output GEMM reads as P for output row `row`.
      ASSERT_EQ(e * s.stride_c + col * s.ldc, row * p.n_k);
      ASSERT_EQ(e * o.stride_b + col * o.ldb, row * p.n_k);
      ASSERT_EQ(e * o.stride_c + col * o.ldc, row * p.d_v);
    }
  }
  EXPECT_EQ(std::int64_t(rows_seen.size()), p.rows());
}

TEST_P(PlanShapes, SoftmaxGridCoversEveryRowOnce) {
  const Problem& p = GetParam().problem;
  const SoftmaxLaunch l = plan_of(p).softmax;
  EXPECT_EQ(l.rows, p.rows());
  EXPECT_EQ(l.threads_per_block, l.rows_per_block * 32);
  EXPECT_LE(l.threads_per_block, 1024);
  EXPECT_EQ(l.grid_x, (p.rows() + l.rows_per_block - 1) / l.rows_per_block);
  EXPECT_FALSE(l.grid_strided);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PlanShapes,
                         ::testing::Values(Shape{"mha", shape(2, 3, 3, 5, 7, 16, 8)}, Shape{"gqa2", shape(2, 4, 2, 7, 5, 8, 16)},
                                           Shape{"gqa4", shape(3, 8, 2, 3, 11, 12, 4)}, Shape{"mqa", shape(2, 6, 1, 4, 9, 5, 3)},
                                           Shape{"one", shape(1, 1, 1, 1, 1, 1, 1)}, Shape{"long_q", shape(1, 4, 2, 33, 2, 4, 4)}),
                         [](const ::testing::TestParamInfo<Shape>& info) { return std::string(info.param.name); });

TEST(CublasPlan, TypesFollowTheDtypeAndThePrecision) {
  struct Case {
    DType dtype;
    MatmulPrecision precision;
    cudaDataType_t element, score;
    cublasComputeType_t compute;
    int element_bytes, score_bytes;
  };
  const Case cases[] = {
      {DType::f32, MatmulPrecision::working, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 4, 4},
      {DType::f16, MatmulPrecision::working, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 2, 4},
      {DType::bf16, MatmulPrecision::working, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, 2, 4},
      {DType::f64, MatmulPrecision::working, CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F, 8, 8},
      {DType::f32, MatmulPrecision::tf32, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4, 4},
  };
  for (const Case& c : cases) {
    const CublasAttentionPlan plan = plan_of(shape(1, 2, 1, 3, 4, 8, 8, c.dtype), c.precision);
    SCOPED_TRACE(std::string(to_string(c.dtype)));
    EXPECT_EQ(plan.scores.a_type, c.element);
    EXPECT_EQ(plan.scores.b_type, c.element);
    EXPECT_EQ(plan.scores.c_type, c.score);  // scores in f32 (f64)
    EXPECT_EQ(plan.output.a_type, c.element);
    EXPECT_EQ(plan.output.b_type, c.element);  // P in the input dtype
    EXPECT_EQ(plan.output.c_type, c.element);
    EXPECT_EQ(plan.scores.compute, c.compute);
    EXPECT_EQ(plan.output.compute, c.compute);
    EXPECT_EQ(plan.element_bytes, c.element_bytes);
    EXPECT_EQ(plan.score_bytes, c.score_bytes);
  }
}

TEST(CublasPlan, ScaleIsFoldedIntoAlpha) {
  Problem p = shape(1, 1, 1, 2, 2, 64, 64);
  EXPECT_DOUBLE_EQ(plan_of(p).scores.alpha, 0.125);
  p.scale = 0.5;
  EXPECT_DOUBLE_EQ(plan_of(p).scores.alpha, 0.5);
}

TEST(CublasPlan, StridesAndElementCountsAre64Bit) {
  // A score matrix of 2^33 elements: each batch entry's stride (2^32) overflows 32 bits.
  const CublasAttentionPlan plan = plan_of(shape(2, 1, 1, std::int64_t(1) << 20, std::int64_t(1) << 12, 1024, 16));
  EXPECT_EQ(plan.scores.stride_c, std::int64_t(1) << 32);
  EXPECT_EQ(plan.output.stride_b, std::int64_t(1) << 32);
  EXPECT_EQ(plan.score_elements, std::int64_t(1) << 33);
  EXPECT_GT(plan.device_bytes, double(std::int64_t(1) << 33) * (4 + 4));  // S and P at least
}

TEST(CublasPlan, HugeRowCountsLoopWithinTheGridLimit) {
  // b * h_q * n_q = 2^36 rows: 2^34 blocks of 4 rows would exceed grid.x's 2^31 - 1.
  const CublasAttentionPlan plan = plan_of(shape(16, 16, 16, std::int64_t(1) << 28, 1, 1, 1));
  const SoftmaxLaunch& l = plan.softmax;
  EXPECT_EQ(l.rows, std::int64_t(1) << 36);
  EXPECT_EQ(l.grid_x, SoftmaxLaunch::max_grid_x);
  EXPECT_TRUE(l.grid_strided);
  // The grid-stride loop still reaches every row: the rows handled per sweep times the sweeps.
  const std::int64_t per_sweep = l.grid_x * l.rows_per_block;
  EXPECT_GE(per_sweep * ((l.rows + per_sweep - 1) / per_sweep), l.rows);
}

TEST(CublasPlan, RejectsWithAReason) {
  auto reason = [](const Problem& p, MatmulPrecision precision = MatmulPrecision::working) {
    const PlanResult r = make_cublas_plan(p, precision);
    EXPECT_FALSE(r.plan.has_value()) << p.repro();
    return r.reason;
  };
  EXPECT_NE(reason(shape(1, 3, 2, 4, 4, 8, 8)).find("invalid problem"), std::string::npos);
  EXPECT_NE(reason(shape(1, 3, 2, 4, 4, 8, 8)).find("not a multiple"), std::string::npos);
  for (DType d : {DType::f16, DType::bf16, DType::f64})
    EXPECT_NE(reason(shape(1, 1, 1, 4, 4, 8, 8, d), MatmulPrecision::tf32).find("TF32"), std::string::npos) << to_string(d);
  Problem windowed = shape(1, 1, 1, 4, 4, 8, 8);
  windowed.window = {Window::unbounded, 2, Align::bottom_right};
  EXPECT_NE(reason(windowed).find("window inf,2@bottom_right"), std::string::npos);
  // r * n_q = 2^31 columns: beyond cuBLAS's int.
  const std::string too_wide = reason(shape(1, 2, 1, std::int64_t(1) << 30, 2, 4, 4));
  EXPECT_NE(too_wide.find("n = 2147483648"), std::string::npos) << too_wide;
  EXPECT_NE(too_wide.find("32-bit int"), std::string::npos) << too_wide;
  // n_k = 2^31 + ...: ldc beyond int (validate allows extents up to 2^31).
  const std::string too_long = reason(shape(1, 1, 1, 1, std::int64_t(1) << 31, 1, 1));
  EXPECT_NE(too_long.find("32-bit int"), std::string::npos) << too_long;
}

TEST(CublasPlan, DeviceBytesCountEveryBuffer) {
  Problem p = shape(2, 4, 2, 8, 16, 8, 4, DType::f16);
  const CublasAttentionPlan plain = plan_of(p);
  const double inputs = 2.0 * double(plain.q_elements + plain.k_elements + 2 * plain.v_elements + plain.o_elements);
  const double scores = (4.0 + 2.0) * double(plain.score_elements);
  EXPECT_GE(plain.device_bytes, inputs + scores + double(cublas_workspace_bytes));
  p.window = Window::of(Causal::top_left);
  p.bool_mask = {true, 0.5, Broadcast::per_batch_head};
  p.bias = {true, 1.0, Broadcast::per_head};
  const CublasAttentionPlan masked = plan_of(p);
  EXPECT_DOUBLE_EQ(masked.device_bytes - plain.device_bytes,
                   8.0 * 2 * 8                  // key limits [b, n_q]
                       + 1.0 * 2 * 4 * 8 * 16   // flags [b, h_q, n_q, n_k]
                       + 4.0 * 1 * 4 * 8 * 16); // bias [1, h_q, n_q, n_k] in f32
}

// Registration and the no-device contract hold on any machine: without a device every problem is
// unsupported with the device's reason (a skip, never a pass or a failure).
TEST(CudaCublasRegistry, BothVariantsAreRegisteredAndSayWhyTheySkip) {
  Registry registry;
  register_builtin_implementations(registry);
  const DeviceStatus& device = cuda::device_status();
  for (const char* name : {"cuda_cublas", "cuda_cublas_tf32"}) {
    const Implementation* impl = registry.find(name);
    ASSERT_NE(impl, nullptr) << name;
    const Capabilities caps = impl->describe();
    EXPECT_EQ(caps.device, "cuda");
    EXPECT_TRUE(caps.returns_lse);
    EXPECT_TRUE(caps.deterministic);
    EXPECT_EQ(caps.fully_masked, FullyMaskedPolicy::zeros);
    EXPECT_EQ(impl->workspace_bytes(shape(1, 2, 1, 4, 4, 8, 8)), 0u);
    const Support s = impl->supports(shape(1, 2, 1, 4, 4, 8, 8));
    if (device.available) {
      EXPECT_TRUE(s.ok) << name << ": " << s.reason;
    } else {
      EXPECT_FALSE(s.ok) << name;
      EXPECT_EQ(s.reason, device.reason);
      EXPECT_EQ(s.reason.rfind("no CUDA device", 0), 0u) << s.reason;
    }
  }
  EXPECT_EQ(registry.find("cuda_cublas")->describe().matmul_precision, MatmulPrecision::working);
  EXPECT_EQ(registry.find("cuda_cublas")->describe().dtypes.size(), 4u);
  EXPECT_EQ(registry.find("cuda_cublas_tf32")->describe().matmul_precision, MatmulPrecision::tf32);
  EXPECT_EQ(registry.find("cuda_cublas_tf32")->describe().dtypes, std::vector<DType>{DType::f32});
}

TEST(CudaCublasRegistry, VerifySkipsEveryCaseWithoutADevice) {
  if (cuda::device_status().available) GTEST_SKIP() << "a device is present: tests/cuda_cublas_test.cpp verifies on it";
  Registry registry;
  register_builtin_implementations(registry);
  std::vector<Problem> cases;  // f32, which both variants accept
  for (const Problem& p : quick_cases())
    if (p.dtype == DType::f32 && cases.size() < 3) cases.push_back(p);
  ASSERT_EQ(cases.size(), 3u);
  const VerifyRun run = verify({registry.find("cuda_cublas"), registry.find("cuda_cublas_tf32")}, cases, VerifyOptions{});
  EXPECT_EQ(run.passed() + run.failed(), 0);
  EXPECT_EQ(run.skipped(), 6);
  for (const Record& r : run.records) EXPECT_EQ(r.skip_reason.rfind("no CUDA device", 0), 0u) << r.skip_reason;
}

TEST(CheckCublas, NamesTheCallAndTheStatus) {
  EXPECT_NO_THROW(cuda::check_cublas(CUBLAS_STATUS_SUCCESS, "cublasCreate"));
  try {
    cuda::check_cublas(CUBLAS_STATUS_INVALID_VALUE, "cublasGemmStridedBatchedEx (S = scale * Q K^T)");
    FAIL() << "no exception";
  } catch (const cuda::CudaError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("cublasGemmStridedBatchedEx (S = scale * Q K^T) failed: CUBLAS_STATUS_INVALID_VALUE", 0), 0u) << what;
  }
}

}  // namespace
}  // namespace attn::cuda_cublas

// cuda_cublas's host-side plan, on the CPU (no device needed): the two GEMMs' shapes, leading
// dimensions and strides for MHA, GQA and MQA with n_q != n_k and d_k != d_v; that the folded
// GEMM pairs every query head with its kv head (Problem::kv_head) and writes every score and
// output row exactly once, within its buffer; the backward's four GEMMs the same way (dV and dK
// summing every query row of their kv head's group, each gradient element written once); 64-bit
// strides; the softmax grid for huge b * h_q * n_q; the device memory counted; the reasons for
// rejecting a problem.
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
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

Problem backward_of(const Problem& p) { return p.with_operation(Operation::backward); }

// Column-major C = op(A) op(B): (row, column) of the stored A (or B) that feeds C's product term
// (m_index, k_index) (or (k_index, n_index)), as an element offset from the batch entry's start.
std::int64_t operand_offset(cublasOperation_t op, std::int64_t ld, std::int64_t row_of_op, std::int64_t col_of_op) {
  return op == CUBLAS_OP_N ? col_of_op * ld + row_of_op : row_of_op * ld + col_of_op;
}

TEST_P(PlanShapes, BackwardGemmsAreTheRowMajorProductsTransposed) {
  const Problem p = backward_of(GetParam().problem);
  const CublasAttentionPlan plan = plan_of(p);
  const std::int64_t r = p.h_q / p.h_kv, batches = p.batch * p.h_kv;
  const BackwardGemms& g = plan.backward;
  const double scale = p.effective_scale();

  // dP^T = op_T(V) . dO^T, in the scores' layout.
  const GemmArgs& dp = g.d_weights;
  EXPECT_EQ(dp.trans_a, CUBLAS_OP_T);
  EXPECT_EQ(dp.trans_b, CUBLAS_OP_N);
  EXPECT_EQ(dp.m, p.n_k);
  EXPECT_EQ(dp.n, r * p.n_q);
  EXPECT_EQ(dp.k, p.d_v);
  EXPECT_EQ(dp.alpha, 1.0);
  EXPECT_EQ(last_element(batches, dp.stride_a, dp.k, dp.m, dp.lda), plan.v_elements - 1);
  EXPECT_EQ(last_element(batches, dp.stride_b, dp.k, dp.n, dp.ldb), plan.o_elements - 1);  // dO
  EXPECT_EQ(last_element(batches, dp.stride_c, dp.m, dp.n, dp.ldc), plan.score_elements - 1);
  EXPECT_EQ(dp.stride_c, plan.scores.stride_c);
  EXPECT_EQ(dp.ldc, plan.scores.ldc);

  // dV^T = dO^T . op_T(P^T): the inner dimension is the group's r * n_q rows.
  const GemmArgs& dv = g.d_values;
  EXPECT_EQ(dv.trans_a, CUBLAS_OP_N);
  EXPECT_EQ(dv.trans_b, CUBLAS_OP_T);
  EXPECT_EQ(dv.m, p.d_v);
  EXPECT_EQ(dv.n, p.n_k);
  EXPECT_EQ(dv.k, r * p.n_q);
  EXPECT_EQ(dv.alpha, 1.0);
  EXPECT_EQ(last_element(batches, dv.stride_a, dv.m, dv.k, dv.lda), plan.o_elements - 1);      // dO
  EXPECT_EQ(last_element(batches, dv.stride_b, dv.n, dv.k, dv.ldb), plan.score_elements - 1);  // P, n x k stored
  EXPECT_EQ(last_element(batches, dv.stride_c, dv.m, dv.n, dv.ldc), plan.v_elements - 1);

  // dQ^T = K'^T . dS^T, the scale in alpha.
  const GemmArgs& dq = g.d_queries;
  EXPECT_EQ(dq.trans_a, CUBLAS_OP_N);
  EXPECT_EQ(dq.trans_b, CUBLAS_OP_N);
  EXPECT_EQ(dq.m, p.d_k);
  EXPECT_EQ(dq.n, r * p.n_q);
  EXPECT_EQ(dq.k, p.n_k);
  EXPECT_DOUBLE_EQ(dq.alpha, scale);
  EXPECT_EQ(last_element(batches, dq.stride_a, dq.m, dq.k, dq.lda), plan.k_elements - 1);
  EXPECT_EQ(last_element(batches, dq.stride_b, dq.k, dq.n, dq.ldb), plan.score_elements - 1);
  EXPECT_EQ(last_element(batches, dq.stride_c, dq.m, dq.n, dq.ldc), plan.q_elements - 1);

  // dK^T = Q^T . op_T(dS^T), the scale in alpha.
  const GemmArgs& dk = g.d_keys;
  EXPECT_EQ(dk.trans_a, CUBLAS_OP_N);
  EXPECT_EQ(dk.trans_b, CUBLAS_OP_T);
  EXPECT_EQ(dk.m, p.d_k);
  EXPECT_EQ(dk.n, p.n_k);
  EXPECT_EQ(dk.k, r * p.n_q);
  EXPECT_DOUBLE_EQ(dk.alpha, scale);
  EXPECT_EQ(last_element(batches, dk.stride_a, dk.m, dk.k, dk.lda), plan.q_elements - 1);
  EXPECT_EQ(last_element(batches, dk.stride_b, dk.n, dk.k, dk.ldb), plan.score_elements - 1);
  EXPECT_EQ(last_element(batches, dk.stride_c, dk.m, dk.n, dk.ldc), plan.k_elements - 1);

  for (const GemmArgs* gemm : {&dp, &dv, &dq, &dk}) {
    EXPECT_EQ(gemm->batch_count, batches);
    EXPECT_EQ(gemm->beta, 0.0);
  }
  // The forward's plan runs none of them.
  const CublasAttentionPlan forward = plan_of(GetParam().problem);
  for (const GemmArgs* gemm : {&forward.backward.d_weights, &forward.backward.d_values, &forward.backward.d_queries, &forward.backward.d_keys})
    EXPECT_EQ(gemm->batch_count, 0);
}

// Evaluates every product term of the backward's GEMMs from their arguments alone (which element
// of which buffer each reads and writes) and compares with the problem's rule: dV_jc and dK_jt sum
// P_ij dO_ic and dS_ij Q_it over every query row i of every query head of their kv head, each
// once; dQ_it sums dS_ij K_jt over the keys of its own kv head; dP_ij is the dot of dO_i with V_j
// of its kv head. Every gradient element is written by exactly one (entry, column).
TEST_P(PlanShapes, BackwardGemmsSumEachGroupOnce) {
  const Problem p = backward_of(GetParam().problem);
  const CublasAttentionPlan plan = plan_of(p);
  const BackwardGemms& g = plan.backward;
  auto head_row = [&](std::int64_t row) {  // (b, h, i) of a global query row
    return std::array<std::int64_t, 3>{row / (p.n_q * p.h_q), (row / p.n_q) % p.h_q, row % p.n_q};
  };

  // dV and dK: per output element, the (query row, key) pairs summed.
  for (const GemmArgs* gemm : {&g.d_values, &g.d_keys}) {
    const std::int64_t width = gemm == &g.d_values ? p.d_v : p.d_k;  // columns of dO or Q
    std::set<std::int64_t> written;
    for (std::int64_t e = 0; e < gemm->batch_count; ++e)
      for (std::int64_t col = 0; col < gemm->n; ++col) {  // key j of the entry
        const std::int64_t c_offset = e * gemm->stride_c + col * gemm->ldc;
        ASSERT_EQ(c_offset % width, 0);
        const std::int64_t key_row = c_offset / width;  // (b * h_kv + g) * n_k + j
        const std::int64_t j = key_row % p.n_k, kv = key_row / p.n_k;
        ASSERT_TRUE(written.insert(key_row).second) << "key row " << key_row << " written twice";
        std::set<std::int64_t> rows;
        for (std::int64_t t = 0; t < gemm->k; ++t) {
          // A: dO (or Q) at (m = 0, k = t): the query row t of the group; B: P (or dS) at (k = t, n = col).
          const std::int64_t a = e * gemm->stride_a + operand_offset(gemm->trans_a, gemm->lda, 0, t);
          const std::int64_t b = e * gemm->stride_b + operand_offset(gemm->trans_b, gemm->ldb, t, col);
          ASSERT_EQ(a % width, 0);
          const std::int64_t row = a / width;
          ASSERT_EQ(b, row * p.n_k + j) << "the weight read is not P[row, j]";
          const auto [rb, rh, ri] = head_row(row);
          ASSERT_EQ(rb * p.h_kv + p.kv_head(rh), kv) << "query head " << rh << " summed into kv head " << kv % p.h_kv;
          rows.insert(row);
        }
        ASSERT_EQ(std::int64_t(rows.size()), (p.h_q / p.h_kv) * p.n_q) << "every row of the group, once";
      }
    EXPECT_EQ(std::int64_t(written.size()), p.batch * p.h_kv * p.n_k);
  }

  // dQ: row i of query head h sums over the keys of kv_head(h); dP: the same pairing, V for K.
  for (const GemmArgs* gemm : {&g.d_queries, &g.d_weights}) {
    const bool queries = gemm == &g.d_queries;
    std::set<std::int64_t> written;
    for (std::int64_t e = 0; e < gemm->batch_count; ++e)
      for (std::int64_t col = 0; col < gemm->n; ++col) {
        const std::int64_t c_offset = e * gemm->stride_c + col * gemm->ldc;
        const std::int64_t row = queries ? c_offset / p.d_k : c_offset / p.n_k;
        ASSERT_EQ(c_offset, row * (queries ? p.d_k : p.n_k));
        ASSERT_TRUE(written.insert(row).second);
        const auto [rb, rh, ri] = head_row(row);
        const std::int64_t kv = rb * p.h_kv + p.kv_head(rh);
        // dQ: B = dS at (k = j, n = col) is dS[row, j], A = K' at (m = 0, k = j) is K[kv, j, 0].
        // dP: A = V at (m = j, k = 0) is V[kv, j, 0] (op T), B = dO at (k = 0, n = col) is dO[row, 0].
        for (std::int64_t j = 0; j < p.n_k; ++j) {
          if (queries) {
            ASSERT_EQ(e * gemm->stride_b + operand_offset(gemm->trans_b, gemm->ldb, j, col), row * p.n_k + j);
            ASSERT_EQ(e * gemm->stride_a + operand_offset(gemm->trans_a, gemm->lda, 0, j), (kv * p.n_k + j) * p.d_k);
          } else {
            ASSERT_EQ(e * gemm->stride_a + operand_offset(gemm->trans_a, gemm->lda, j, 0), (kv * p.n_k + j) * p.d_v);
            ASSERT_EQ(e * gemm->stride_b + operand_offset(gemm->trans_b, gemm->ldb, 0, col), row * p.d_v);
          }
        }
      }
    EXPECT_EQ(std::int64_t(written.size()), p.rows());
  }
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
    // The backward: dP from the dtype's operands into the scores' type, as S; dV, dQ and dK
    // entirely in the scores' type (P and dS are never rounded to the dtype), on widened copies of
    // Q and dO where the dtype is narrower.
    const CublasAttentionPlan backward = plan_of(backward_of(shape(1, 2, 1, 3, 4, 8, 8, c.dtype)), c.precision);
    const BackwardGemms& g = backward.backward;
    EXPECT_EQ(g.d_weights.a_type, c.element);
    EXPECT_EQ(g.d_weights.b_type, c.element);
    EXPECT_EQ(g.d_weights.c_type, c.score);
    for (const GemmArgs* gemm : {&g.d_values, &g.d_queries, &g.d_keys}) {
      EXPECT_EQ(gemm->a_type, c.score);
      EXPECT_EQ(gemm->b_type, c.score);
      EXPECT_EQ(gemm->c_type, c.score);
    }
    for (const GemmArgs* gemm : {&g.d_weights, &g.d_values, &g.d_queries, &g.d_keys}) EXPECT_EQ(gemm->compute, c.compute);
    EXPECT_EQ(backward.widened_operands, c.element_bytes < c.score_bytes);
    EXPECT_FALSE(plan.widened_operands) << "the forward widens nothing";
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
  EXPECT_NE(reason(backward_of(windowed)).find("window inf,2@bottom_right"), std::string::npos);
  // What neither pass computes, forward or backward: the kernels would leave it out silently.
  for (const auto& [repro, named] : std::vector<std::pair<const char*, const char*>>{
           {"softcap=2", "soft-capping"}, {"sink=0.5", "sinks"}, {"dropout=0.25", "dropout"}, {"layout=bshd", "layout bshd"},
           {"dtypes=o:f32", "dtypes of their own"}}) {
    const Problem p = parse_problem(fmt::format("b=1 hq=2 hkv=1 nq=4 nk=5 dk=8 dv=8 dtype=f16 causal=none {} regime=diffuse seed=1", repro));
    EXPECT_NE(reason(p).find(named), std::string::npos) << repro << ": " << reason(p);
    EXPECT_EQ(reason(backward_of(p)), reason(p)) << repro;
  }
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

TEST(CublasPlan, BackwardDeviceBytesCountEveryBuffer) {
  const Problem p = backward_of(shape(2, 4, 2, 8, 16, 8, 4, DType::bf16));
  const CublasAttentionPlan plan = plan_of(p);
  // Q, dQ; K, dK; V, dV; dO in bf16. In f32: K'; S (then P) and dP (then dS); the LSE; Q and dO
  // widened and the three gradients as the GEMMs write them.
  const double tensors = 2.0 * double(2 * plan.q_elements + 2 * plan.k_elements + 2 * plan.v_elements + plan.o_elements);
  const double wide = 4.0 * double(plan.k_elements + 2 * plan.q_elements + plan.o_elements + plan.k_elements + plan.v_elements);
  const double matrices = 2 * 4.0 * double(plan.score_elements);
  EXPECT_DOUBLE_EQ(plan.device_bytes, tensors + wide + matrices + 4.0 * double(plan.lse_elements) + 6.0 * double(guard_bytes) +
                                          double(cublas_workspace_bytes));
  // f32: no widened copies; K' is the one copy.
  const CublasAttentionPlan f32 = plan_of(backward_of(shape(2, 4, 2, 8, 16, 8, 4, DType::f32)));
  EXPECT_DOUBLE_EQ(f32.device_bytes, 4.0 * double(2 * f32.q_elements + 3 * f32.k_elements + 2 * f32.v_elements + f32.o_elements) +
                                         2 * 4.0 * double(f32.score_elements) + 4.0 * double(f32.lse_elements) + 6.0 * double(guard_bytes) +
                                         double(cublas_workspace_bytes));
  EXPECT_GT(plan.device_bytes, plan_of(shape(2, 4, 2, 8, 16, 8, 4, DType::bf16)).device_bytes);
  Problem masked = p;
  masked.window = Window::of(Causal::bottom_right);
  masked.bias = {true, 1.0, Broadcast::per_batch_head};
  EXPECT_DOUBLE_EQ(plan_of(masked).device_bytes - plan.device_bytes, 8.0 * 2 * 8 + 4.0 * 2 * 4 * 8 * 16);  // key limits, bias in f32
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
    EXPECT_EQ(caps.operations, (std::vector<Operation>{Operation::forward, Operation::backward}));
    for (const Problem& p : {shape(1, 2, 1, 4, 4, 8, 8), backward_of(shape(1, 2, 1, 4, 4, 8, 8))}) {
      EXPECT_EQ(impl->workspace_bytes(p), 0u);
      const Support s = impl->supports(p);
      if (device.available) {
        EXPECT_TRUE(s.ok) << name << ": " << s.reason;
      } else {
        EXPECT_FALSE(s.ok) << name;
        EXPECT_EQ(s.reason, device.reason);
        EXPECT_EQ(s.reason.rfind("no CUDA device", 0), 0u) << s.reason;
      }
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
  // Backward too: declared, so skipped for the device, not for the operation.
  for (Problem& p : cases) p.operation = Operation::backward;
  const VerifyRun backward = verify({registry.find("cuda_cublas"), registry.find("cuda_cublas_tf32")}, cases, VerifyOptions{});
  EXPECT_EQ(backward.passed() + backward.failed(), 0);
  EXPECT_EQ(backward.skipped(), 6);
  for (const Record& r : backward.records) EXPECT_EQ(r.skip_reason.rfind("no CUDA device", 0), 0u) << r.skip_reason;
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

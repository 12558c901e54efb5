// cuda_fused's host side on the CPU (no device needed): the plan's rejections with their reasons
// (d past 256, f64), the zero padding of other head dimensions and of d_k != d_v, the parameters it fills (strides, GQA group, scale, mask flags, tile
// shapes, shared memory), the causal key limits against the end of Mask::key_range, the key tiles a query
// tile visits under both causal alignments with n_q != n_k and with padding (every visible pair
// in a visited tile, every skipped tile fully masked, every unmasked tile fully visible), and the
// grid decomposition (b * h = 70000, and past 2^31 - 1 blocks). The backward plan: what it refuses
// (naming it), its padding to d = 64 or 128, parameters, tiles and grids, and the first query tile
// a key tile's dK/dV block visits. Also registration, and every case (forward and backward)
// skipped with the reason where no device is.
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/case_sets.hpp"
#include "core/mask.hpp"
#include "impls/cuda_fused/fused_plan.hpp"
#include "impls/cuda_fused/tile_logic.hpp"
#include "impls/cuda_support/cuda_support.hpp"
#include "impls/registry.hpp"
#include "verification/verify.hpp"

namespace attn::cuda_fused {
namespace {

Problem shape(std::int64_t b, std::int64_t h_q, std::int64_t h_kv, std::int64_t n_q, std::int64_t n_k, std::int64_t d,
              DType dtype = DType::bf16) {
  Problem p;
  p.batch = b, p.h_q = h_q, p.h_kv = h_kv, p.n_q = n_q, p.n_k = n_k, p.d_k = d, p.d_v = d, p.dtype = dtype;
  return p;
}

TEST(CudaFusedPlan, RejectsHeadDimensionsPastTheLargestKernelNamingThem) {
  Problem p = shape(1, 2, 2, 16, 16, 64);
  p.d_v = 300;
  const FusedPlanResult r = make_fused_plan(p);
  ASSERT_FALSE(r.plan.has_value());
  EXPECT_NE(r.reason.find("d_k = 64, d_v = 300"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("d = 256"), std::string::npos) << r.reason;
}

TEST(CudaFusedPlan, RejectsF64) {
  const FusedPlanResult f64 = make_fused_plan(shape(1, 1, 1, 8, 8, 64, DType::f64));
  ASSERT_FALSE(f64.plan.has_value());
  EXPECT_NE(f64.reason.find("f64"), std::string::npos) << f64.reason;
}

// Head dimensions without a kernel, and d_k != d_v, run on the next instantiated d, zero-padded:
// Q and K where d_k is smaller, V and O where d_v is. The strides are the padded buffers'.
TEST(CudaFusedPlan, PadsOtherHeadDimensionsToTheNextKernel) {
  struct Expect {
    std::int64_t d_k, d_v, kernel;
    bool pad_q_k, pad_v_o;
  };
  for (const Expect e : {Expect{48, 48, 64, true, true}, Expect{128, 64, 128, false, true}, Expect{16, 40, 64, true, true},
                         Expect{64, 96, 96, true, false}, Expect{1, 1, 32, true, true}, Expect{200, 256, 256, true, false}}) {
    Problem p = shape(2, 4, 2, 100, 77, e.d_k);
    p.d_v = e.d_v;
    const FusedPlanResult r = make_fused_plan(p);
    ASSERT_TRUE(r.plan.has_value()) << e.d_k << "/" << e.d_v << ": " << r.reason;
    const FusedParams& k = r.plan->params;
    EXPECT_EQ(k.head_dim, e.kernel) << e.d_k << "/" << e.d_v;
    EXPECT_EQ(r.plan->pad_q_k, e.pad_q_k) << e.d_k << "/" << e.d_v;
    EXPECT_EQ(r.plan->pad_v_o, e.pad_v_o) << e.d_k << "/" << e.d_v;
    EXPECT_EQ(k.q_row_stride, e.kernel);
    EXPECT_EQ(k.v_head_stride, 77 * e.kernel);
    EXPECT_EQ(k.o_batch_stride, 4 * 100 * e.kernel);
    EXPECT_FLOAT_EQ(k.scale, float(1.0 / std::sqrt(double(e.d_k))));  // the scale of the real d_k, not the kernel's
  }
  Problem mla = shape(2, 4, 2, 300, 77, 128);
  mla.d_v = 64;
  EXPECT_TRUE(make_fused_plan(mla, true).plan->params.wgmma);  // padded to d = 128: the Hopper kernel
}

// The kernels compute causal windows and padding only: any other window is refused, naming it.
TEST(CudaFusedPlan, RejectsWindowsOtherThanCausalNamingThem) {
  Problem p = shape(1, 1, 1, 8, 8, 64);
  p.window = {4, 0, Align::top_left};
  const FusedPlanResult r = make_fused_plan(p);
  ASSERT_FALSE(r.plan.has_value());
  EXPECT_NE(r.reason.find("window 4,0@top_left"), std::string::npos) << r.reason;
  p.window = Window::of(Causal::bottom_right);
  EXPECT_TRUE(make_fused_plan(p).plan.has_value());
}

TEST(CudaFusedPlan, AcceptsEverySupportedHeadDimensionInEveryDtype) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (int d : supported_head_dims) {
      const FusedPlanResult r = make_fused_plan(shape(2, 4, 2, 100, 77, d, dtype));
      ASSERT_TRUE(r.plan.has_value()) << d << ": " << r.reason;
      const FusedParams& k = r.plan->params;
      EXPECT_EQ(k.head_dim, d);
      EXPECT_EQ(k.dtype, dtype);
      const bool tc = dtype != DType::f32;
      EXPECT_EQ(k.tile.block_m, tc ? (d <= 128 ? 128 : 64) : 16);
      EXPECT_EQ(k.tile.block_n, tc ? (d >= 96 ? 32 : 64) : 32);
      EXPECT_EQ(k.tile.threads, 128);
      EXPECT_EQ(k.smem_bytes, tc ? mma_smem_bytes(d) : simt_smem_bytes(d));
      EXPECT_LE(k.smem_bytes, 227 * 1024) << "sm_90's per-block limit";
      EXPECT_EQ(k.num_m_blocks, (100 + k.tile.block_m - 1) / k.tile.block_m);
      EXPECT_EQ(k.total_blocks, 2 * 4 * k.num_m_blocks);
      EXPECT_TRUE(k.grid.ok);
      EXPECT_EQ(k.grid.y, 1);
      EXPECT_EQ(k.grid.x, k.total_blocks);
    }
}

TEST(CudaFusedPlan, SharedMemoryOfTheTargetShapes) {
  // d = 128: Q 128 x 136, K and V 32 x 136 (bf16), P 128 x 40, 128 flag bytes, 64 bytes of reduction.
  EXPECT_EQ(mma_smem_bytes(128), (128 + 64) * 136 * 2 + 128 * 40 * 2 + 128 + 64);
  EXPECT_EQ(mma_smem_bytes(256), (64 + 64) * 264 * 2 + 64 * 40 * 2 + 128 + 64);
  EXPECT_EQ(mma_smem_bytes(64), (128 + 128) * 72 * 2 + 128 * 72 * 2 + 128 + 64);
}

// On an H100 or H200 (hopper = true) f16/bf16 at d = 128 without a boolean mask or bias take the
// wgmma kernel: 2 warpgroups, 128 x 128 tiles, its shared memory, the same 128-row grid; everything
// else, and every problem elsewhere, the mma.sync or f32 kernel.
TEST(CudaFusedPlan, TheWgmmaKernelOnlyOnHopperForItsProblems) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    const FusedPlanResult hopper = make_fused_plan(shape(2, 4, 2, 300, 77, 128, dtype), true);
    ASSERT_TRUE(hopper.plan.has_value()) << hopper.reason;
    const FusedParams& k = hopper.plan->params;
    EXPECT_TRUE(k.wgmma);
    EXPECT_EQ(k.tile.block_m, 128);
    EXPECT_EQ(k.tile.block_n, 128);
    EXPECT_EQ(k.tile.threads, 256);
    EXPECT_EQ(k.smem_bytes, wgmma_smem_bytes());
    EXPECT_EQ(k.smem_bytes, 200064);
    EXPECT_EQ(k.num_m_blocks, 3);
    EXPECT_FALSE(make_fused_plan(shape(2, 4, 2, 300, 77, 128, dtype)).plan->params.wgmma);  // not a Hopper device
  }
  EXPECT_FALSE(make_fused_plan(shape(1, 2, 2, 64, 64, 64), true).plan->params.wgmma);
  EXPECT_FALSE(make_fused_plan(shape(1, 2, 2, 64, 64, 128, DType::f32), true).plan->params.wgmma);
  Problem biased = shape(1, 2, 2, 64, 64, 128);
  biased.bias.enabled = true;
  EXPECT_FALSE(make_fused_plan(biased, true).plan->params.wgmma);
  Problem causal = shape(1, 2, 2, 64, 64, 128);
  causal.window = Window::of(Causal::bottom_right);
  EXPECT_TRUE(make_fused_plan(causal, true).plan->params.wgmma);
}

TEST(CudaFusedPlan, FillsStridesGroupScaleAndMaskFlags) {
  Problem p = shape(3, 8, 2, 50, 70, 64, DType::f16);
  p.window = Window::of(Causal::bottom_right);
  FusedPlanResult r = make_fused_plan(p);
  ASSERT_TRUE(r.plan.has_value()) << r.reason;
  const FusedParams& k = r.plan->params;
  EXPECT_EQ(k.group, 4);
  EXPECT_EQ(k.q_row_stride, 64);
  EXPECT_EQ(k.q_head_stride, 50 * 64);
  EXPECT_EQ(k.q_batch_stride, 8 * 50 * 64);
  EXPECT_EQ(k.k_head_stride, 70 * 64);
  EXPECT_EQ(k.k_batch_stride, 2 * 70 * 64);
  EXPECT_EQ(k.v_batch_stride, 2 * 70 * 64);
  EXPECT_EQ(k.o_batch_stride, 8 * 50 * 64);
  EXPECT_FLOAT_EQ(k.scale, 0.125f);
  EXPECT_FLOAT_EQ(k.scale_log2, 0.125f * 1.4426950408889634f);
  EXPECT_EQ(k.causal, CausalMode::bottom_right);
  EXPECT_TRUE(k.key_limits);
  EXPECT_FALSE(k.element_mask);
  EXPECT_FALSE(r.plan->upload_key_limit);

  p.window = Window::of(Causal::none);
  p.padding = KeyPadding{KeyPadding::Kind::per_batch, {70, 3, 0}};
  p.bool_mask = BoolMaskSpec{true, 0.5, Broadcast::per_head};
  p.bias = BiasSpec{true, 1.0, Broadcast::per_batch};
  r = make_fused_plan(p);
  ASSERT_TRUE(r.plan.has_value()) << r.reason;
  const FusedParams& m = r.plan->params;
  EXPECT_TRUE(m.key_limits);
  EXPECT_TRUE(r.plan->upload_key_limit);
  EXPECT_TRUE(m.element_mask);
}

TEST(CudaFusedPlan, StridesAndBlockCountsAre64Bit) {
  // 2^31 elements per head would overflow 32-bit offsets.
  const FusedPlanResult r = make_fused_plan(shape(2, 2, 1, std::int64_t(1) << 25, 64, 64));
  ASSERT_TRUE(r.plan.has_value()) << r.reason;
  EXPECT_EQ(r.plan->params.q_head_stride, (std::int64_t(1) << 25) * 64);
  EXPECT_EQ(r.plan->params.q_batch_stride, (std::int64_t(1) << 26) * 64);
}

// The kernels' causal limit is the end of Mask::key_range's rule, for both alignments and n_q != n_k.
TEST(CudaFusedTileLogic, CausalKeyLimitMatchesMask) {
  for (auto [n_q, n_k] : {std::tuple<std::int64_t, std::int64_t>{5, 9}, {9, 5}, {130, 70}, {64, 64}, {1, 200}, {200, 1}})
    for (Causal causal : {Causal::none, Causal::top_left, Causal::bottom_right}) {
      Problem p = shape(1, 1, 1, n_q, n_k, 32);
      p.window = Window::of(causal);
      const Mask mask(p);
      const CausalMode mode = causal == Causal::top_left ? CausalMode::top_left
                              : causal == Causal::bottom_right ? CausalMode::bottom_right
                                                               : CausalMode::none;
      for (std::int64_t i = 0; i < n_q; ++i)
        ASSERT_EQ(causal_key_limit(mode, i, n_q, n_k), mask.key_range(0, i).second) << p.repro() << " i=" << i;
    }
}

// For every query tile: the visited tiles hold every visible pair; skipped tiles hold none;
// tiles before first_masked have every pair visible (no per-element mask needed).
void check_tiles(const Problem& p, int block_m, int block_n) {
  const Mask mask(p);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t m0 = 0; m0 < p.n_q; m0 += block_m) {
      std::int64_t lo = p.n_k, hi = 0;
      for (std::int64_t i = m0; i < std::min(m0 + block_m, p.n_q); ++i) {
        lo = std::min(lo, mask.key_range(b, i).second);
        hi = std::max(hi, mask.key_range(b, i).second);
      }
      const KeyTileRange r = key_tile_range(lo, hi, block_n);
      ASSERT_LE(r.first_masked, r.end);
      ASSERT_LE(r.end * block_n, p.n_k + block_n - 1) << "no tile wholly past n_k";
      for (std::int64_t i = m0; i < std::min(m0 + block_m, p.n_q); ++i)
        for (std::int64_t j = 0; j < p.n_k; ++j) {
          const std::int64_t t = j / block_n;
          if (mask.visible(b, 0, i, j)) {
            ASSERT_LT(t, r.end) << p.repro() << ": visible (" << i << ", " << j << ") in a skipped tile";
          }
          if (t < r.first_masked) {
            ASSERT_TRUE(mask.visible(b, 0, i, j)) << p.repro() << ": masked (" << i << ", " << j << ") in an unmasked tile";
          }
        }
      // A visited tile that reaches past n_k (the partial last one) is always masked.
      if (r.end * block_n > p.n_k) {
        ASSERT_LE(r.first_masked, r.end - 1);
      }
    }
}

TEST(CudaFusedTileLogic, VisitedTilesUnderBothCausalAlignmentsAndPadding) {
  for (auto [n_q, n_k] : {std::tuple<std::int64_t, std::int64_t>{300, 130}, {130, 300}, {128, 128}, {1, 65}, {65, 1}, {257, 257}})
    for (Causal causal : {Causal::none, Causal::top_left, Causal::bottom_right})
      for (auto [block_m, block_n] : {std::tuple<int, int>{128, 64}, {128, 32}, {64, 32}, {16, 32}}) {
        Problem p = shape(2, 1, 1, n_q, n_k, 32);
        p.window = Window::of(causal);
        check_tiles(p, block_m, block_n);
        p.padding = KeyPadding{KeyPadding::Kind::per_batch, {n_k / 2, 0}};
        check_tiles(p, block_m, block_n);
      }
}

TEST(CudaFusedTileLogic, CausalSkipsTilesAboveTheDiagonal) {
  // n = 256, top-left, 128 x 64 tiles: query tile 0 (rows 0..127) visits key tiles 0, 1 (keys
  // < 128), the diagonal ones masked; tile 1 visits all 4, two of them unmasked.
  const KeyTileRange first = key_tile_range(1, 128, 64);
  EXPECT_EQ(first.end, 2);
  EXPECT_EQ(first.first_masked, 0);
  const KeyTileRange second = key_tile_range(129, 256, 64);
  EXPECT_EQ(second.end, 4);
  EXPECT_EQ(second.first_masked, 2);
  // Bottom-right with n_q = 100 < n_k = 300: row 0 sees keys 0..200.
  EXPECT_EQ(causal_key_limit(CausalMode::bottom_right, 0, 100, 300), 201);
  // Bottom-right with n_q = 300 > n_k = 100: rows 0..199 see nothing (fully masked).
  EXPECT_EQ(causal_key_limit(CausalMode::bottom_right, 199, 300, 100), 0);
  EXPECT_EQ(causal_key_limit(CausalMode::bottom_right, 200, 300, 100), 1);
  const KeyTileRange none = key_tile_range(0, 0, 64);
  EXPECT_EQ(none.end, 0);
}

TEST(CudaFusedTileLogic, GridCoversBatchTimesHeadsBeyond65535) {
  const FusedPlanResult r = make_fused_plan(shape(70, 1000, 1000, 16, 16, 64));  // b * h = 70000, one query tile each
  ASSERT_TRUE(r.plan.has_value()) << r.reason;
  const FusedParams& k = r.plan->params;
  ASSERT_EQ(k.total_blocks, 70000);
  EXPECT_EQ(k.grid.x, 70000);  // gridDim.x, not y or z: no 65535 limit
  EXPECT_EQ(k.grid.y, 1);
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> seen;
  for (std::int64_t linear = 0; linear < k.total_blocks; ++linear) {
    const BlockCoord c = block_coord(linear, k.num_m_blocks, k.h_q);
    ASSERT_GE(c.batch, 0);
    ASSERT_LT(c.batch, 70);
    ASSERT_LT(c.head, 1000);
    ASSERT_EQ(c.m_block, 0);
    seen.insert({c.batch, c.head, c.m_block});
  }
  EXPECT_EQ(seen.size(), 70000u);
}

TEST(CudaFusedTileLogic, BlockCoordinatesAreABijectionWithLastQueryTileFirst) {
  const std::int64_t batch = 3, h_q = 5, m_blocks = 7;
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> seen;
  for (std::int64_t linear = 0; linear < batch * h_q * m_blocks; ++linear) {
    const BlockCoord c = block_coord(linear, m_blocks, h_q);
    ASSERT_LT(c.m_block, m_blocks);
    ASSERT_LT(c.head, h_q);
    ASSERT_LT(c.batch, batch);
    seen.insert({c.batch, c.head, c.m_block});
  }
  EXPECT_EQ(seen.size(), std::size_t(batch * h_q * m_blocks));
  EXPECT_EQ(block_coord(0, m_blocks, h_q).m_block, m_blocks - 1);
  EXPECT_EQ(block_coord(m_blocks - 1, m_blocks, h_q).m_block, 0);
  EXPECT_EQ(block_coord(m_blocks, m_blocks, h_q).head, 1);
}

TEST(CudaFusedTileLogic, GridGoesTwoDimensionalPast2To31Blocks) {
  const std::int64_t total = max_grid_x * 3 + 5;
  const GridShape g = grid_shape(total);
  ASSERT_TRUE(g.ok);
  EXPECT_LE(g.x, max_grid_x);
  EXPECT_LE(g.y, max_grid_y);
  EXPECT_GE(g.x * g.y, total);
  EXPECT_LT(g.x * (g.y - 1), total) << "no row of the grid is wholly past the count";
  EXPECT_FALSE(grid_shape(max_grid_x * max_grid_y + 1).ok);
  EXPECT_FALSE(grid_shape(0).ok);
  EXPECT_EQ(grid_shape(1).x, 1);
}

// The backward pass: f16/bf16, causality and padding, d <= 128; everything else the forward
// computes is refused, naming it.
TEST(CudaFusedBackwardPlan, RefusesWhatItLacksNamingIt) {
  auto reason = [](Problem p) {
    p.operation = Operation::backward;
    const FusedBackwardPlanResult r = make_fused_backward_plan(p);
    EXPECT_FALSE(r.plan.has_value()) << p.repro();
    return r.reason;
  };
  EXPECT_NE(reason(shape(1, 2, 2, 16, 16, 64, DType::f32)).find("not supported in f32"), std::string::npos);
  EXPECT_NE(reason(shape(1, 2, 2, 16, 16, 64, DType::f64)).find("not supported in f64"), std::string::npos);
  Problem p = shape(1, 2, 2, 16, 16, 64);
  p.bool_mask = BoolMaskSpec{true, 0.5, Broadcast::per_head};
  EXPECT_NE(reason(p).find("boolean mask"), std::string::npos);
  p = shape(1, 2, 2, 16, 16, 64);
  p.bias = BiasSpec{true, 1.0, Broadcast::per_head};
  EXPECT_NE(reason(p).find("additive bias"), std::string::npos);
  p = shape(1, 2, 2, 16, 16, 64);
  p.window = {4, 0, Align::top_left};
  EXPECT_NE(reason(p).find("window 4,0@top_left"), std::string::npos);
  p = shape(1, 2, 2, 16, 16, 128);
  p.d_k = 192;
  const std::string wide = reason(p);
  EXPECT_NE(wide.find("d_k = 192, d_v = 128"), std::string::npos) << wide;
  EXPECT_NE(wide.find("d = 64 and 128"), std::string::npos) << wide;
}

// Head dimensions up to 128 run on the d = 64 or d = 128 kernels, zero-padded: Q, K (and dQ, dK)
// where d_k is smaller, V, dO (and dV) where d_v is.
TEST(CudaFusedBackwardPlan, PadsHeadDimensionsToTheNextKernel) {
  struct Expect {
    std::int64_t d_k, d_v, kernel;
    bool pad_q_k, pad_v;
  };
  for (const Expect e : {Expect{64, 64, 64, false, false}, Expect{128, 128, 128, false, false}, Expect{16, 24, 64, true, true},
                         Expect{16, 40, 64, true, true}, Expect{32, 64, 64, true, false}, Expect{128, 64, 128, false, true},
                         Expect{96, 96, 128, true, true}, Expect{1, 1, 64, true, true}}) {
    Problem p = shape(2, 4, 2, 100, 77, e.d_k, DType::f16);
    p.d_v = e.d_v;
    p.operation = Operation::backward;
    const FusedBackwardPlanResult r = make_fused_backward_plan(p);
    ASSERT_TRUE(r.plan.has_value()) << e.d_k << "/" << e.d_v << ": " << r.reason;
    const BackwardParams& k = r.plan->params;
    EXPECT_EQ(k.head_dim, e.kernel) << e.d_k << "/" << e.d_v;
    EXPECT_EQ(r.plan->pad_q_k, e.pad_q_k) << e.d_k << "/" << e.d_v;
    EXPECT_EQ(r.plan->pad_v, e.pad_v) << e.d_k << "/" << e.d_v;
    EXPECT_EQ(k.o_width, e.d_v) << "D reads O and dO unpadded";
    EXPECT_EQ(k.q_head_stride, 100 * e.kernel);
    EXPECT_EQ(k.k_batch_stride, 2 * 77 * e.kernel);
    EXPECT_FLOAT_EQ(k.scale, float(1.0 / std::sqrt(double(e.d_k))));  // the real d_k's
  }
}

TEST(CudaFusedBackwardPlan, FillsStridesGroupMaskTilesAndGrids) {
  for (DType dtype : {DType::f16, DType::bf16})
    for (int d : backward_head_dims) {
      Problem p = shape(3, 8, 2, 130, 200, d, dtype);
      p.operation = Operation::backward;
      p.window = Window::of(Causal::bottom_right);
      FusedBackwardPlanResult r = make_fused_backward_plan(p);
      ASSERT_TRUE(r.plan.has_value()) << r.reason;
      const BackwardParams& k = r.plan->params;
      EXPECT_EQ(k.dtype, dtype);
      EXPECT_EQ(k.head_dim, d);
      EXPECT_EQ(k.group, 4);
      EXPECT_EQ(k.q_head_stride, 130 * d);
      EXPECT_EQ(k.q_batch_stride, 8 * 130 * d);
      EXPECT_EQ(k.k_head_stride, 200 * d);
      EXPECT_EQ(k.k_batch_stride, 2 * 200 * d);
      EXPECT_EQ(k.causal, CausalMode::bottom_right);
      EXPECT_FALSE(r.plan->upload_key_limit);
      EXPECT_FLOAT_EQ(k.scale_log2, k.scale * 1.4426950408889634f);
      EXPECT_EQ(k.dk_dv_tile.block_n, 64);
      EXPECT_EQ(k.dk_dv_tile.block_m, d == 64 ? 64 : 32);
      EXPECT_EQ(k.dq_tile.block_m, 64);
      EXPECT_EQ(k.dq_tile.block_n, 64);
      EXPECT_EQ(k.dk_dv_smem_bytes, backward_dk_dv_smem_bytes(d));
      EXPECT_EQ(k.dq_smem_bytes, backward_dq_smem_bytes(d));
      EXPECT_LE(k.dk_dv_smem_bytes, 227 * 1024);
      EXPECT_LE(k.dq_smem_bytes, 227 * 1024);
      EXPECT_EQ(k.num_n_blocks, 4);  // ceil(200 / 64)
      EXPECT_EQ(k.dk_dv_blocks, 3 * 2 * 4);
      EXPECT_EQ(k.num_m_blocks, 3);  // ceil(130 / 64)
      EXPECT_EQ(k.dq_blocks, 3 * 8 * 3);
      EXPECT_EQ(k.dk_dv_grid.x, k.dk_dv_blocks);
      EXPECT_EQ(k.dq_grid.x, k.dq_blocks);

      p.padding = KeyPadding{KeyPadding::Kind::per_batch, {200, 3, 0}};
      r = make_fused_backward_plan(p);
      ASSERT_TRUE(r.plan.has_value()) << r.reason;
      EXPECT_TRUE(r.plan->upload_key_limit);
    }
  // dK/dV: K, V (64 rows), two stages of Q and dO (block_m rows), rows padded by 8 elements; two
  // stages of LSE, D and limits. dQ: Q, dO (64 rows), two stages of K and V (64 rows), the reduction.
  EXPECT_EQ(backward_dk_dv_smem_bytes(64), 2 * 64 * 72 * 2 + 4 * 64 * 72 * 2 + 6 * 64 * 4);
  EXPECT_EQ(backward_dk_dv_smem_bytes(128), 2 * 64 * 136 * 2 + 4 * 32 * 136 * 2 + 6 * 32 * 4);
  EXPECT_EQ(backward_dq_smem_bytes(128), 2 * 64 * 136 * 2 + 4 * 64 * 136 * 2 + 64);
}

// A dK/dV block starts at the query tile of first_query_seeing(key0): no earlier row sees any of
// its keys, under both causal alignments with n_q != n_k and with padding; without padding the
// first row does see key0 (no tile that holds a visible pair is skipped, none too many visited).
TEST(CudaFusedTileLogic, FirstQuerySeeingAKeyTileMatchesMask) {
  for (auto [n_q, n_k] : {std::tuple<std::int64_t, std::int64_t>{300, 130}, {130, 300}, {128, 128}, {1, 65}, {65, 1}, {97, 97}})
    for (Causal causal : {Causal::none, Causal::top_left, Causal::bottom_right})
      for (bool padded : {false, true}) {
        Problem p = shape(2, 1, 1, n_q, n_k, 64);
        p.window = Window::of(causal);
        if (padded) p.padding = KeyPadding{KeyPadding::Kind::per_batch, {n_k / 2, n_k}};
        const Mask mask(p);
        const CausalMode mode = causal == Causal::top_left ? CausalMode::top_left
                                : causal == Causal::bottom_right ? CausalMode::bottom_right
                                                                 : CausalMode::none;
        for (std::int64_t key0 = 0; key0 < n_k; key0 += 64) {
          const std::int64_t first = first_query_seeing(mode, key0, n_q, n_k);
          ASSERT_GE(first, 0);
          ASSERT_LE(first, n_q);
          for (std::int64_t b = 0; b < p.batch; ++b)
            for (std::int64_t i = 0; i < first; ++i)
              for (std::int64_t j = key0; j < n_k; ++j)
                ASSERT_FALSE(mask.visible(b, 0, i, j)) << p.repro() << ": row " << i << " sees key " << j << " before row " << first;
          if (!padded && first < n_q) {
            ASSERT_TRUE(mask.visible(0, 0, first, key0)) << p.repro() << ": row " << first << " does not see key " << key0;
          }
        }
      }
}

TEST(CudaFused, IsRegisteredAndSkipsWithTheReasonWithoutADevice) {
  Registry registry;
  register_builtin_implementations(registry);
  const Implementation* impl = registry.find("cuda_fused");
  ASSERT_NE(impl, nullptr);
  const Capabilities c = impl->describe();
  EXPECT_EQ(c.device, "cuda");
  EXPECT_TRUE(c.returns_lse);
  EXPECT_TRUE(c.deterministic);
  if (cuda::device_status().available) GTEST_SKIP() << "a device is present: the gpu-labelled cuda_fused_test covers it";
  const Support s = impl->supports(shape(1, 1, 1, 8, 8, 64));
  EXPECT_FALSE(s.ok);
  EXPECT_EQ(s.reason, cuda::device_status().reason);
  std::vector<Problem> cases;
  for (const Problem& p : quick_cases()) cases.push_back(p);
  const VerifyRun run = verify({impl}, cases, VerifyOptions{});
  EXPECT_EQ(run.failed(), 0);
  EXPECT_EQ(run.passed(), 0);
  EXPECT_EQ(run.skipped(), int(cases.size()));
  // The backward pass likewise: declared, and skipped with the device's reason where the case
  // is within what it declares.
  EXPECT_EQ(c.operations, (std::vector<Operation>{Operation::forward, Operation::backward}));
  for (Problem& p : cases) p.operation = Operation::backward;
  Problem backward = shape(1, 1, 1, 8, 8, 64, DType::f16);
  backward.operation = Operation::backward;
  EXPECT_EQ(impl->supports(backward).reason, cuda::device_status().reason);
  const VerifyRun backward_run = verify({impl}, cases, VerifyOptions{});
  EXPECT_EQ(backward_run.failed(), 0);
  EXPECT_EQ(backward_run.passed(), 0);
  EXPECT_EQ(backward_run.skipped(), int(cases.size()));
  for (const Record& r : backward_run.records)
    if (r.context->problem.dtype != DType::f64) {
      EXPECT_EQ(r.skip_reason, cuda::device_status().reason) << r.context->problem.repro();
    }
}

}  // namespace
}  // namespace attn::cuda_fused

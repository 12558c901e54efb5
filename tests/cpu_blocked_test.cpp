// cpu_blocked's own contract, beyond agreeing with the reference (the verify_* tests check that
// on the quick and default sets): results that do not depend on the thread count, a workspace
// that does not grow with n, tile edges, and rows that see no key.
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "core/inputs.hpp"
#include "core/metrics.hpp"
#include "impls/cpu_blocked/simd.hpp"
#include "impls/registry.hpp"
#include "reference/reference.hpp"

namespace attn {
namespace {

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

struct Outputs {
  Tensor out, lse;
};

Outputs run(const Problem& p, const CaseInputs& in, int threads) {
  Outputs o{make_output(p), make_lse(p)};
  std::vector<std::byte> workspace(blocked().workspace_bytes(p));
  blocked().run(RunArgs{p, in, RoleTensors::forward(in, o.out, &o.lse), workspace, threads});
  return o;
}

Problem problem(std::int64_t n_q, std::int64_t n_k, std::int64_t d, DType dtype = DType::f32) {
  Problem p;
  p.batch = 2, p.h_q = 4, p.h_kv = 2, p.n_q = n_q, p.n_k = n_k, p.d_k = d, p.d_v = d;
  p.dtype = dtype;
  p.window = Window::of(Causal::bottom_right);
  p.seed = 11;
  return p;
}

TEST(CpuBlocked, ResultsAreBitwiseIdenticalForAnyThreadCount) {
  const Problem p = problem(500, 700, 64);  // two query tiles and two key tiles per head
  const CaseInputs in = generate_inputs(p);
  const Outputs one = run(p, in, 1);
  for (int threads : {2, 3, 8}) {
    const Outputs many = run(p, in, threads);
    EXPECT_TRUE(one.out == many.out) << threads << " threads";
    EXPECT_TRUE(one.lse == many.lse) << threads << " threads";
  }
}

TEST(CpuBlocked, WorkspaceDoesNotGrowWithSequenceLength) {
  const std::size_t small = blocked().workspace_bytes(problem(128, 128, 64));
  EXPECT_EQ(small, blocked().workspace_bytes(problem(16384, 16384, 64)));
  EXPECT_EQ(small, blocked().workspace_bytes(problem(1, 1 << 20, 64)));
  EXPECT_LT(blocked().workspace_bytes(problem(128, 128, 64)), blocked().workspace_bytes(problem(128, 128, 256)));
}

// Lengths one below, at and above the 384-query and 512-key tiles, the 12-row blocks and the
// 32-key panels, with d up to 256 (and d not a multiple of the vector width): every
// element matches the reference within the naive algorithm's a-priori bound (the blocked
// algorithm adds a rescaling per key tile, so allow twice that).
TEST(CpuBlocked, TileEdgesAndWideHeadsAgreeWithTheReference) {
  for (auto [n_q, n_k, d] : {std::tuple{383, 511, 32}, {384, 512, 64}, {385, 513, 96}, {13, 33, 40},
                                    {1, 257, 128}, {130, 1, 256}, {11, 31, 7}}) {
    for (DType dtype : {DType::f64, DType::f32, DType::bf16}) {
      const Problem p = problem(n_q, n_k, d, dtype);
      const CaseInputs in = generate_inputs(p);
      const ReferenceResult ref = compute_reference(p, in);
      const Outputs o = run(p, in, 0);
      for (std::size_t r = 0; r < ref.rows.size(); ++r)
        for (std::int64_t c = 0; c < p.d_v; ++c) {
          const std::size_t e = r * std::size_t(p.d_v) + std::size_t(c);
          const double got = o.out.get(ref.rows[r] * p.d_v + c);
          ASSERT_LE(std::fabs(got - ref.out[e]), 2 * ref.naive_bound[e] + 2 * ulp_at(dtype, ref.out[e]))
              << p.repro() << " at " << output_coordinates(p, ref.rows[r] * p.d_v + c);
        }
    }
  }
}

TEST(CpuBlocked, RowsThatSeeNoKeyAreZeroWithMinusInfinityLse) {
  Problem p = problem(40, 8, 16);  // bottom-right with n_q > n_k: the first 32 queries see nothing
  p.padding = {KeyPadding::Kind::per_batch, {8, 0}};  // and batch 1 sees nothing at all
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(p, in, 0);
  for (std::int64_t row = 0; row < p.rows(); ++row) {
    const std::int64_t i = row % p.n_q, b = row / (p.n_q * p.h_q);
    const bool empty = b == 1 || i < 32;
    if (!empty) continue;
    EXPECT_EQ(o.lse.get(row), -std::numeric_limits<double>::infinity()) << "row " << row;
    for (std::int64_t c = 0; c < p.d_v; ++c) ASSERT_EQ(o.out.get(row * p.d_v + c), 0.0) << "row " << row;
  }
}

// The register transpose that packs K: every element crosses the diagonal, for both widths.
template <class T>
void expect_transposed() {
  constexpr int L = simd::lanes<T>;
  simd::Vec<T> rows[L];
  for (int r = 0; r < L; ++r)
    for (int c = 0; c < L; ++c) rows[r][c] = T(r * 100 + c);
  simd::transpose<T>(rows);
  for (int r = 0; r < L; ++r)
    for (int c = 0; c < L; ++c) ASSERT_EQ(rows[r][c], T(c * 100 + r)) << "row " << r << " lane " << c;
}
TEST(CpuBlocked, RegisterTransposeOfFloatAndDoubleBlocks) {
  expect_transposed<float>();
  expect_transposed<double>();
}

// A NaN or infinity in a masked key's V must not reach any output, also where the tile's other
// keys are finite and near the causal diagonal (where masked keys share micro-kernel calls).
TEST(CpuBlocked, NonFiniteValuesOfMaskedKeysDoNotLeak) {
  Problem p = problem(37, 37, 64);
  p.window = Window::of(Causal::top_left);
  CaseInputs in = generate_inputs(p);
  const Outputs clean = run(p, in, 2);
  const std::int64_t poisoned_key = 20;  // masked for queries 0..19
  for (std::int64_t c = 0; c < p.d_v; ++c) in.v.set(in.v.offset(0, 0, poisoned_key, c), c % 2 ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity());
  const Outputs dirty = run(p, in, 2);
  for (std::int64_t i = 0; i < poisoned_key; ++i)
    for (std::int64_t c = 0; c < p.d_v; ++c) {
      const std::int64_t at = (i * p.d_v) + c;
      ASSERT_EQ(dirty.out.get(at), clean.out.get(at)) << "query " << i << " column " << c;
    }
}


// Sliding windows: keys before a row's window are masked in the scores, across key tiles (a
// window of 600 keys spans two 512-key tiles), and a non-finite V row before the window (or a
// whole tile of them) does not reach the output.
TEST(CpuBlocked, SlidingWindowsAgreeWithTheReferenceAndMaskKeysBeforeThem) {
  for (Window w : {Window{5, 0, Align::bottom_right}, Window{600, 0, Align::top_left}, Window{3, 40, Align::top_left}}) {
    for (DType dtype : {DType::f64, DType::f32}) {
      Problem p = problem(700, 900, 32, dtype);
      p.window = w;
      const CaseInputs in = generate_inputs(p);
      const ReferenceResult ref = compute_reference(p, in);
      const Outputs o = run(p, in, 0);
      for (std::size_t r = 0; r < ref.rows.size(); ++r) {
        if (ref.fully_masked[r]) {
          ASSERT_EQ(o.lse.get(ref.rows[r]), -std::numeric_limits<double>::infinity()) << p.repro();
          continue;
        }
        for (std::int64_t c = 0; c < p.d_v; ++c) {
          const std::size_t e = r * std::size_t(p.d_v) + std::size_t(c);
          ASSERT_LE(std::fabs(o.out.get(ref.rows[r] * p.d_v + c) - ref.out[e]), 2 * ref.naive_bound[e] + 2 * ulp_at(dtype, ref.out[e]))
              << p.repro() << " at " << output_coordinates(p, ref.rows[r] * p.d_v + c);
        }
      }
    }
  }
  Problem p = problem(64, 64, 32);
  p.window = {4, 0, Align::top_left};
  CaseInputs in = generate_inputs(p);
  const Outputs clean = run(p, in, 2);
  for (std::int64_t c = 0; c < p.d_v; ++c) in.v.set(in.v.offset(0, 0, 0, c), std::numeric_limits<double>::quiet_NaN());  // key 0
  const Outputs dirty = run(p, in, 2);
  for (std::int64_t i = 5; i < p.n_q; ++i)  // queries past 4 do not see key 0
    for (std::int64_t c = 0; c < p.d_v; ++c) ASSERT_EQ(dirty.out.get(i * p.d_v + c), clean.out.get(i * p.d_v + c)) << "query " << i;
}

}  // namespace
}  // namespace attn

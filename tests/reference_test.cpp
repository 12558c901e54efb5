// The high-precision reference: closed forms it must reproduce exactly, the error bound it
// states (checked against the same computation in 256 bits), its single rounding, and row
// sampling on problems too large to compute in full.
// Over 500 lines: the reference's closed forms and bounds, each a test; they share the 256-bit checker.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <boost/multiprecision/float128.hpp>
#include <gtest/gtest.h>

#include "core/inputs.hpp"
#include "core/problem.hpp"
#include "reference/reference.hpp"
#include "reference/reference_row.hpp"
#include "reference/reference_row_double_word.hpp"

namespace attn {
namespace {

using Real113 = boost::multiprecision::float128;
using Real256 = boost::multiprecision::number<boost::multiprecision::cpp_bin_float<256>>;

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr DType all_dtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16};

std::uint64_t bits(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// Output row r of the reference, as the problem's coordinates.
struct RowCoords {
  std::int64_t b, h, i;
};
RowCoords coords(const Problem& p, std::int64_t row) {
  return {row / (p.n_q * p.h_q), (row / p.n_q) % p.h_q, row % p.n_q};
}

Problem small(DType dtype, Regime regime, std::int64_t n_q, std::int64_t n_k, std::uint64_t seed) {
  Problem p;
  p.batch = 2;
  p.h_q = 4;
  p.h_kv = 2;
  p.n_q = n_q;
  p.n_k = n_k;
  p.d_k = 16;
  p.d_v = 8;
  p.dtype = dtype;
  p.regime = regime;
  p.seed = seed;
  p.validate();
  return p;
}

// ---------------------------------------------------------------------------------------------
// Closed forms
// ---------------------------------------------------------------------------------------------

// With one visible key the softmax weight is exactly 1, so the output is that key's V, and the
// LSE is that key's score.
void expect_single_key_gives_its_value(const Problem& p, std::int64_t key) {
  const CaseInputs in = generate_inputs(p);
  const ReferenceResult ref = compute_reference(p, in);
  ASSERT_FALSE(ref.sampled);
  ASSERT_EQ(std::int64_t(ref.rows.size()), p.rows());
  for (std::size_t r = 0; r < ref.rows.size(); ++r) {
    const auto [b, h, i] = coords(p, ref.rows[r]);
    ASSERT_FALSE(ref.fully_masked[r]);
    const std::int64_t g = p.kv_head(h);
    for (std::int64_t c = 0; c < p.d_v; ++c)
      ASSERT_EQ(ref.out[r * std::size_t(p.d_v) + std::size_t(c)], in.v.get(in.v.offset(b, g, key, c)))
          << p.repro() << " row " << ref.rows[r] << " c " << c;
    double dot = 0, magnitude = 0;
    for (std::int64_t t = 0; t < p.d_k; ++t) {
      const double qk = in.q.get(in.q.offset(b, h, i, t)) * in.k.get(in.k.offset(b, g, key, t));
      dot += qk;
      magnitude += std::fabs(qk);
    }
    const double score = p.effective_scale() * dot + in.mask.bias(b, h, i, key);
    EXPECT_NEAR(ref.lse[r], score, 1e-13 * (1 + p.effective_scale() * magnitude)) << p.repro();
  }
}

// A key whose score error is unbounded (its weight's error inf) and a value column that is 0 for
// every key: the column's bound is 0, not inf * 0 = NaN, which once called the oracle unsound on a
// draw of property 14 (keys shifted by one vector, sparse_int data, a zero value column).
TEST(ReferenceBound, AZeroValueAddsNoErrorEvenWhereItsWeightIsUnbounded) {
  const std::vector<double> ln_w{std::log(0.5), std::log(0.5)}, eta{1e3, 0.0};
  const std::vector<std::int64_t> keys{0, 1};
  const double values[2][2] = {{0.0, 1.0}, {0.0, 2.0}};
  std::vector<double> bound(2);
  detail::weighted_sum_bound(ln_w, eta, keys, 2, 0x1p-24, 0.0, [&](std::int64_t j) { return values[j]; }, bound);
  EXPECT_EQ(bound[0], 0.0);
  EXPECT_FALSE(std::isnan(bound[1]));
  EXPECT_GT(bound[1], 1.0);  // unbounded, and said so
}

TEST(ReferenceClosedForm, OneKeyGivesExactlyItsValue) {
  for (DType d : all_dtypes)
    for (Regime regime : all_regimes()) {
      Problem p = small(d, regime, 5, 1, 11);
      SCOPED_TRACE(p.repro());
      expect_single_key_gives_its_value(p, 0);
    }
}

TEST(ReferenceClosedForm, PaddingThatLeavesOneKeyGivesExactlyItsValue) {
  for (DType d : all_dtypes)
    for (Regime regime : {Regime::diffuse, Regime::peaked, Regime::large}) {
      Problem p = small(d, regime, 6, 9, 12);
      p.padding.kind = KeyPadding::Kind::per_batch;
      p.padding.valid_len = {1, 1};
      p.validate();
      SCOPED_TRACE(p.repro());
      expect_single_key_gives_its_value(p, 0);
    }
  // Causal top-left: query 0 sees key 0 only.
  Problem p = small(DType::f32, Regime::diffuse, 1, 9, 13);
  p.window = Window::of(Causal::top_left);
  p.bias = {true, 3.0, Broadcast::per_batch_head};
  p.validate();
  expect_single_key_gives_its_value(p, 0);
}

// A window that leaves one key: the diagonal alone (bottom-right, so key n_k - 1), or a left
// bound at the last key with the right side unbounded.
TEST(ReferenceClosedForm, AWindowThatLeavesOneKeyGivesExactlyItsValue) {
  for (DType d : all_dtypes)
    for (Window w : {Window{0, 0, Align::bottom_right}, Window{0, Window::unbounded, Align::bottom_right}}) {
      Problem p = small(d, Regime::diffuse, 1, 9, 31);
      p.window = w;
      p.validate();
      SCOPED_TRACE(p.repro());
      expect_single_key_gives_its_value(p, 8);
    }
}

// Makes every key of every kv head equal to key 0 of that head.
void make_keys_identical(const Problem& p, CaseInputs& in) {
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t g = 0; g < p.h_kv; ++g)
      for (std::int64_t j = 1; j < p.n_k; ++j)
        for (std::int64_t t = 0; t < p.d_k; ++t) in.k.set(in.k.offset(b, g, j, t), in.k.get(in.k.offset(b, g, 0, t)));
}

TEST(ReferenceClosedForm, IdenticalKeysGiveTheMeanOfVAndLseIsScorePlusLogN) {
  for (DType d : all_dtypes)
    for (std::int64_t n_k : {2, 3, 4, 5, 7, 8, 13}) {
      Problem p = small(d, Regime::sparse_int, 3, n_k, 20 + std::uint64_t(n_k));
      SCOPED_TRACE(p.repro());
      CaseInputs in = generate_inputs(p);
      make_keys_identical(p, in);
      const ReferenceResult ref = compute_reference(p, in);
      int nonzero = 0;
      for (std::size_t r = 0; r < ref.rows.size(); ++r) {
        const auto [b, h, i] = coords(p, ref.rows[r]);
        const std::int64_t g = p.kv_head(h);
        for (std::int64_t c = 0; c < p.d_v; ++c) {
          double sum = 0;  // small integers: exact
          for (std::int64_t j = 0; j < n_k; ++j) sum += in.v.get(in.v.offset(b, g, j, c));
          // sum / n_k is correctly rounded in double and (n_k small, not a power of two) never
          // lands on a tie of the narrower types, so rounding it again is still correct rounding.
          const double want = round_to(d, sum / double(n_k));
          ASSERT_EQ(ref.out[r * std::size_t(p.d_v) + std::size_t(c)], want) << "row " << ref.rows[r] << " c " << c;
          nonzero += want != 0;
        }
        // Scores are small integers times scale 1/4 (d_k = 16): exact in double.
        double dot = 0;
        for (std::int64_t t = 0; t < p.d_k; ++t)
          dot += in.q.get(in.q.offset(b, h, i, t)) * in.k.get(in.k.offset(b, g, 0, t));
        const double s = 0.25 * dot;
        EXPECT_NEAR(ref.lse[r], s + std::log(double(n_k)), 4e-16 * (1 + std::fabs(s) + std::log(double(n_k))));
      }
      EXPECT_GT(nonzero, 0);  // not vacuous
    }
}

TEST(ReferenceClosedForm, IdenticalKeysWithAPowerOfTwoCountGiveTheMeanInAnyRegime) {
  // 1/4 is exact, so the mean of 4 values is the correctly rounded (v0 + v1 + v2 + v3) / 4.
  for (Regime regime : all_regimes()) {
    Problem p = small(DType::f16, regime, 3, 4, 30);
    SCOPED_TRACE(p.repro());
    CaseInputs in = generate_inputs(p);
    make_keys_identical(p, in);
    const ReferenceResult ref = compute_reference(p, in);
    for (std::size_t r = 0; r < ref.rows.size(); ++r) {
      const auto [b, h, i] = coords(p, ref.rows[r]);
      static_cast<void>(i);
      for (std::int64_t c = 0; c < p.d_v; ++c) {
        double sum = 0;  // f16 values span few binades: exact in double
        for (std::int64_t j = 0; j < 4; ++j) sum += in.v.get(in.v.offset(b, p.kv_head(h), j, c));
        ASSERT_EQ(ref.out[r * std::size_t(p.d_v) + std::size_t(c)], round_to(DType::f16, sum / 4));
      }
    }
  }
}

TEST(ReferenceClosedForm, MaskedKeysDoNotMatter) {
  for (DType d : {DType::f64, DType::f32, DType::bf16})
    for (Regime regime : {Regime::diffuse, Regime::saturated, Regime::uniform01}) {
      // Keys 5..8 are padding in batch 0, keys 3..8 in batch 1.
      Problem p = small(d, regime, 6, 9, 40);
      p.padding.kind = KeyPadding::Kind::per_batch;
      p.padding.valid_len = {5, 3};
      p.validate();
      SCOPED_TRACE(p.repro());
      const CaseInputs clean = generate_inputs(p);
      const ReferenceResult before = compute_reference(p, clean);

      for (double poison : {1e30, std::numeric_limits<double>::quiet_NaN(), -inf}) {
        CaseInputs dirty = generate_inputs(p);
        for (std::int64_t b = 0; b < p.batch; ++b)
          for (std::int64_t g = 0; g < p.h_kv; ++g)
            for (std::int64_t j = p.padding.valid_len[std::size_t(b)]; j < p.n_k; ++j) {
              for (std::int64_t t = 0; t < p.d_k; ++t) dirty.k.set(dirty.k.offset(b, g, j, t), poison);
              for (std::int64_t c = 0; c < p.d_v; ++c) dirty.v.set(dirty.v.offset(b, g, j, c), poison);
            }
        ASSERT_FALSE(dirty.v == clean.v);
        const ReferenceResult after = compute_reference(p, dirty);
        ASSERT_EQ(after.out.size(), before.out.size());
        for (std::size_t e = 0; e < before.out.size(); ++e) ASSERT_EQ(bits(after.out[e]), bits(before.out[e])) << e;
        for (std::size_t r = 0; r < before.lse.size(); ++r) ASSERT_EQ(bits(after.lse[r]), bits(before.lse[r])) << r;
      }
    }
}

TEST(ReferenceClosedForm, ACausallyMaskedKeyMattersOnlyToRowsThatSeeIt) {
  // Top-left causal, n_q = n_k = 6: only query 5 sees key 5. Editing key 5 changes row 5 and no other.
  Problem p = small(DType::f32, Regime::diffuse, 6, 6, 41);
  p.window = Window::of(Causal::top_left);
  p.validate();
  const CaseInputs clean = generate_inputs(p);
  CaseInputs dirty = generate_inputs(p);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t g = 0; g < p.h_kv; ++g)
      for (std::int64_t c = 0; c < p.d_v; ++c) dirty.v.set(dirty.v.offset(b, g, 5, c), 1e30);
  const ReferenceResult before = compute_reference(p, clean), after = compute_reference(p, dirty);
  for (std::size_t r = 0; r < before.rows.size(); ++r) {
    const bool sees_key_5 = coords(p, before.rows[r]).i == 5;
    for (std::int64_t c = 0; c < p.d_v; ++c) {
      const std::size_t e = r * std::size_t(p.d_v) + std::size_t(c);
      if (sees_key_5) {
        EXPECT_NE(after.out[e], before.out[e]);
      } else {
        EXPECT_EQ(bits(after.out[e]), bits(before.out[e]));
      }
    }
  }
}

TEST(ReferenceClosedForm, FullyMaskedRowsGiveZerosAndLseMinusInfinity) {
  for (DType d : all_dtypes) {
    // Per-query padding with some zero lengths, and a boolean mask that keeps nothing.
    Problem padq = small(d, Regime::diffuse, 5, 7, 50);
    padq.padding.kind = KeyPadding::Kind::per_query;
    padq.padding.valid_len = {0, 3, 0, 7, 1, 2, 0, 0, 5, 0};
    Problem none_kept = small(d, Regime::peaked, 4, 6, 51);
    none_kept.bool_mask = {true, 0.0, Broadcast::shared};
    // Causal bottom-right with n_q > n_k: the first n_q - n_k queries see nothing.
    Problem causal = small(d, Regime::uniform01, 9, 4, 52);
    causal.window = Window::of(Causal::bottom_right);
    for (const Problem& p : {padq, none_kept, causal}) {
      p.validate();
      const bool nothing_kept = p.bool_mask.enabled;
      SCOPED_TRACE(p.repro());
      const CaseInputs in = generate_inputs(p);
      const ReferenceResult ref = compute_reference(p, in);
      int fully_masked = 0, visible = 0;
      for (std::size_t r = 0; r < ref.rows.size(); ++r) {
        const auto [b, h, i] = coords(p, ref.rows[r]);
        ASSERT_EQ(bool(ref.fully_masked[r]), in.mask.row_fully_masked(b, h, i));
        if (!ref.fully_masked[r]) {
          ++visible;
          EXPECT_TRUE(std::isfinite(ref.lse[r]));
          continue;
        }
        ++fully_masked;
        EXPECT_EQ(ref.lse[r], -inf);
        for (std::int64_t c = 0; c < p.d_v; ++c) EXPECT_EQ(ref.out[r * std::size_t(p.d_v) + std::size_t(c)], 0.0);
      }
      EXPECT_GT(fully_masked, 0);
      if (!nothing_kept) {
        EXPECT_GT(visible, 0);
      }
    }
  }
}

TEST(ReferenceClosedForm, WeightsAreTheSoftmaxOfVisibleKeys) {
  Problem p = small(DType::f32, Regime::diffuse, 5, 7, 60);
  p.bool_mask = {true, 0.6, Broadcast::per_head};
  p.validate();
  const CaseInputs in = generate_inputs(p);
  ReferenceOptions options;
  options.weights = true;
  const ReferenceResult ref = compute_reference(p, in, options);
  ASSERT_EQ(ref.weights.size(), ref.rows.size() * std::size_t(p.n_k));
  for (std::size_t r = 0; r < ref.rows.size(); ++r) {
    const auto [b, h, i] = coords(p, ref.rows[r]);
    double sum = 0;
    for (std::int64_t j = 0; j < p.n_k; ++j) {
      const double w = ref.weights[r * std::size_t(p.n_k) + std::size_t(j)];
      if (!in.mask.visible(b, h, i, j)) {
        EXPECT_EQ(w, 0.0);
      }
      EXPECT_GE(w, 0.0);
      sum += w;
    }
    if (!ref.fully_masked[r]) {
      EXPECT_NEAR(sum, 1.0, 2e-15);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The stated error bound, against the same computation in 256 bits
// ---------------------------------------------------------------------------------------------

// A float128 value widened exactly to 256 bits: split into three doubles (53 + 53 + 7 bits).
Real256 widen(const Real113& x) {
  const double hi = static_cast<double>(x);
  const Real113 rest = x - Real113(hi);
  const double mid = static_cast<double>(rest);
  const double lo = static_cast<double>(rest - Real113(mid));
  EXPECT_EQ(rest - Real113(mid), Real113(lo));  // the split is exact
  return Real256(hi) + Real256(mid) + Real256(lo);
}

struct BoundStats {
  double worst_ratio = 0;        // max |out_113 - out_256| / bound_113
  double max_relative_bound = 0; // max bound_113 / max |V|
  int nonzero_differences = 0;
  int elements = 0;
};

BoundStats check_bound(const Problem& p) {
  BoundStats stats;
  CaseInputs in = generate_inputs(p);
  if (p.dropout.enabled()) in.mask = in.mask.with_keep(builtin_keep_mask(p, in.mask));  // as an implementation reports it
  double v_max = 0;
  for (std::int64_t e = 0; e < in.v.numel(); ++e) v_max = std::max(v_max, std::fabs(in.v.get(e)));
  for (std::int64_t row = 0; row < p.rows(); ++row) {
    const auto r113 = detail::reference_row<Real113>(p, in, row, 0x1p-113, false);
    const auto r256 = detail::reference_row<Real256>(p, in, row, std::ldexp(1.0, -256), false);
    EXPECT_EQ(r113.fully_masked, r256.fully_masked);
    if (r113.fully_masked) continue;
    for (std::int64_t c = 0; c < p.d_v; ++c) {
      const auto cc = std::size_t(c);
      const Real256 diff = abs(widen(r113.out[cc]) - r256.out[cc]);
      const double bound = r113.bound[cc];
      EXPECT_TRUE(std::isfinite(bound) && bound >= 0) << p.repro() << " row " << row << " c " << c;
      EXPECT_LE(diff, Real256(bound)) << p.repro() << " row " << row << " c " << c << ": |out_113 - out_256| = "
                                      << static_cast<double>(diff) << " > stated bound " << bound;
      // The 256-bit bound is far below the float128 one: the 256-bit result stands in for exact.
      EXPECT_LT(r256.bound[cc], 1e-40 * bound + 1e-60 * v_max);
      if (diff > 0) ++stats.nonzero_differences;
      ++stats.elements;
      if (bound > 0) stats.worst_ratio = std::max(stats.worst_ratio, static_cast<double>(diff) / bound);
      stats.max_relative_bound = std::max(stats.max_relative_bound, bound / v_max);
    }
    // The LSE agrees far beyond double precision too.
    const Real256 lse_diff = abs(widen(r113.lse) - r256.lse);
    const Real256 lse_allowed = Real256(1e-28) * (1 + abs(r256.lse));
    EXPECT_LT(lse_diff, lse_allowed) << p.repro() << " row " << row;
  }
  return stats;
}

TEST(ReferenceBound, HoldsAgainst256BitsInEveryRegime) {
  int nonzero = 0;
  for (Regime regime : all_regimes()) {
    BoundStats regime_stats;
    for (DType d : all_dtypes) {
      // One batch and two query heads on one kv head keep the 256-bit work small (12 rows).
      Problem p = small(d, regime, 6, 11, 70 + std::uint64_t(d));
      p.batch = 1;
      p.h_q = 2;
      p.h_kv = 1;
      p.d_k = 24;
      p.d_v = 6;
      p.validate();
      SCOPED_TRACE(p.repro());
      const BoundStats s = check_bound(p);
      EXPECT_GT(s.elements, 0);
      regime_stats.worst_ratio = std::max(regime_stats.worst_ratio, s.worst_ratio);
      regime_stats.max_relative_bound = std::max(regime_stats.max_relative_bound, s.max_relative_bound);
      regime_stats.nonzero_differences += s.nonzero_differences;
    }
    // Not vacuous: the stated bound is tiny (about 2^-100 relative at most).
    EXPECT_LT(regime_stats.max_relative_bound, 1e-25) << to_string(regime);
    nonzero += regime_stats.nonzero_differences;
    RecordProperty(std::string("worst_ratio_") + std::string(to_string(regime)), std::to_string(regime_stats.worst_ratio));
  }
  // The two precisions do differ (we compare two computations, not one with itself).
  EXPECT_GT(nonzero, 0);
}

TEST(ReferenceBound, HoldsWithMasksBiasAndOddShapes) {
  std::vector<Problem> problems;
  {
    Problem p = small(DType::f32, Regime::peaked, 7, 13, 80);
    p.window = Window::of(Causal::bottom_right);
    p.bias = {true, 2.0, Broadcast::per_batch_head};
    problems.push_back(p);
  }
  {
    Problem p = small(DType::bf16, Regime::saturated, 5, 9, 81);
    p.padding.kind = KeyPadding::Kind::per_query;
    p.padding.valid_len = {0, 1, 2, 9, 4, 9, 3, 0, 5, 6};
    problems.push_back(p);  // b = 2: ten lengths
  }
  {
    Problem p = small(DType::f16, Regime::large, 6, 6, 82);
    p.bool_mask = {true, 0.5, Broadcast::per_batch_head};
    p.bias = {true, 1.0, Broadcast::shared};
    problems.push_back(p);
  }
  {
    Problem p = small(DType::f64, Regime::diffuse, 4, 40, 83);
    p.scale = 0.3;
    p.d_k = 7;
    p.d_v = 3;
    problems.push_back(p);
  }
  {
    Problem p = small(DType::f64, Regime::large, 3, 17, 84);
    p.window = Window::of(Causal::top_left);
    problems.push_back(p);
  }
  // Soft-capping: saturated (scores far above the cap), near the cap, and far below it.
  for (const auto& [dtype, regime, cap] : {std::tuple{DType::f32, Regime::large, 5.0}, std::tuple{DType::bf16, Regime::peaked, 8.0},
                                           std::tuple{DType::f64, Regime::diffuse, 50.0}, std::tuple{DType::f16, Regime::saturated, 1.0}}) {
    Problem p = small(dtype, regime, 6, 21, 85);
    p.softcap = cap;
    p.bias = {true, 1.0, Broadcast::per_head};
    problems.push_back(p);
  }
  // Sinks: among the scores, far above them (rows that mostly attend to the sink), far below,
  // with padding that leaves rows fully masked.
  for (const auto& [dtype, regime, mean] : {std::tuple{DType::f32, Regime::diffuse, 0.0}, std::tuple{DType::f64, Regime::peaked, 40.0},
                                            std::tuple{DType::bf16, Regime::saturated, -20.0}, std::tuple{DType::f16, Regime::uniform01, 3.0}}) {
    Problem p = small(dtype, regime, 6, 21, 86);
    p.sinks = {true, mean, {}};
    p.padding.kind = KeyPadding::Kind::per_query;
    for (std::int64_t r = 0; r < p.batch * p.n_q; ++r) p.padding.valid_len.push_back((r * 5) % 22);
    problems.push_back(p);
  }
  // Dropout at p = 0.1, 0.5 and 0.9, with a sink and with fully masked rows.
  for (const auto& [dtype, regime, rate] : {std::tuple{DType::f32, Regime::peaked, 0.1}, std::tuple{DType::f64, Regime::diffuse, 0.5},
                                            std::tuple{DType::bf16, Regime::large, 0.9}}) {
    Problem p = small(dtype, regime, 6, 21, 87);
    p.dropout.p = double(float(rate));
    p.sinks = {true, 1.0, {}};
    p.padding.kind = KeyPadding::Kind::per_query;
    for (std::int64_t r = 0; r < p.batch * p.n_q; ++r) p.padding.valid_len.push_back((r * 7) % 22);
    problems.push_back(p);
  }
  for (Problem& p : problems) {
    if (p.padding.kind == KeyPadding::Kind::none) p.batch = 1;  // keep the 256-bit work small
    p.validate();
    SCOPED_TRACE(p.repro());
    const BoundStats s = check_bound(p);
    EXPECT_GT(s.elements, 0);
    EXPECT_LT(s.max_relative_bound, 1e-25);
  }
}

TEST(ReferenceBound, StaysFiniteWhenScoresApproachTheDoubleRange) {
  // The large regime in f64 puts |q . k| near max_finite / 16; with wide heads the sum of
  // |q_t k_t| that the bound is built from exceeds the double range even though every score
  // fits. The stated bound must still be a number, not inf (a vacuous statement).
  for (std::int64_t d_k : {256, 1024, 4096}) {
    Problem p;
    p.n_q = 2, p.n_k = 5, p.d_k = d_k, p.d_v = 4, p.dtype = DType::f64, p.regime = Regime::large, p.seed = 95;
    p.validate();
    SCOPED_TRACE(p.repro());
    const ReferenceResult ref = compute_reference(p, generate_inputs(p));
    EXPECT_TRUE(std::isfinite(ref.self_bound_max_abs)) << "self bound " << ref.self_bound_max_abs;
    EXPECT_TRUE(std::isfinite(ref.self_bound_max_ulps)) << "self bound in ulps " << ref.self_bound_max_ulps;
    for (std::size_t e = 0; e < ref.naive_bound.size(); ++e)
      EXPECT_TRUE(std::isfinite(ref.naive_bound[e])) << "naive bound " << e << " = " << ref.naive_bound[e];
  }
}

TEST(ReferenceBound, StatedSelfErrorIsFarBelowAnUlpOfTheOutput) {
  for (DType d : all_dtypes)
    for (Regime regime : all_regimes()) {
      const Problem p = small(d, regime, 6, 11, 90);
      ReferenceOptions float128_only;
      float128_only.bounded_pass = false;
      const ReferenceResult ref = compute_reference(p, generate_inputs(p), float128_only);
      EXPECT_GT(ref.self_bound_max_abs, 0.0) << p.repro();
      // At most 2^20 ulps of float128 (the scores' absolute error grows with their magnitude:
      // f16 large reaches about 2^17), expressed in ulps of the output dtype: below 1e-24 for
      // f32/f16/bf16 and 1e-12 for f64. The rounded reference is the correctly rounded exact value
      // unless the exact value lies that close to a tie of the output dtype.
      EXPECT_LT(ref.self_bound_max_ulps, std::ldexp(1.0, 20 - (113 - significand_bits(d)))) << p.repro();
      // The bounded pass states its own, larger bound for the rows it keeps: 2^20 ulps of double
      // (f32/f16/bf16) or of u = 2^-100 (f64) at most. Its rounded outputs are settled, not merely close.
      const ReferenceResult bounded = compute_reference(p, generate_inputs(p));
      const int bits = d == DType::f64 ? 100 : 53;
      EXPECT_LT(bounded.self_bound_max_ulps, std::ldexp(1.0, 20 - (bits - significand_bits(d)))) << p.repro();
      EXPECT_GE(bounded.self_bound_max_ulps, ref.self_bound_max_ulps) << p.repro();
      EXPECT_TRUE(std::isfinite(bounded.self_bound_lse_max_abs) && bounded.self_bound_lse_max_abs > 0) << p.repro();
      // The naive baseline's bound is finite wherever the reference is.
      for (std::size_t e = 0; e < ref.naive_bound.size(); ++e) ASSERT_TRUE(std::isfinite(ref.naive_bound[e]));
    }
}

// ---------------------------------------------------------------------------------------------
// Rounding once
// ---------------------------------------------------------------------------------------------

template <class Real>
void check_round_once_breaks_ties_by_the_exact_value() {
  const Real tiny = Real(std::ldexp(1.0, -80));
  struct Case {
    DType dtype;
    double tie, below, above;  // a tie of dtype and its two neighbours
  };
  const std::vector<Case> cases{
      // f16 near 1: spacing 2^-10. 1 + 2^-11 is a tie between 1 (even) and 1 + 2^-10 (odd).
      {DType::f16, 1 + 0x1p-11, 1.0, 1 + 0x1p-10},
      // 1 + 3 * 2^-11 lies between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
      {DType::f16, 1 + 3 * 0x1p-11, 1 + 0x1p-10, 1 + 0x1p-9},
      {DType::bf16, 1 + 0x1p-8, 1.0, 1 + 0x1p-7},
      {DType::f32, 1 + 0x1p-24, 1.0, 1 + 0x1p-23},
      {DType::f16, 1000.25, 1000.0, 1000.5},
  };
  for (const Case& c : cases) {
    for (double sign : {1.0, -1.0}) {
      const Real tie = Real(sign * c.tie);
      // The double conversion of tie +- tiny is the tie itself: rounding that would lose the direction.
      ASSERT_EQ(static_cast<double>(tie + tiny), sign * c.tie);
      ASSERT_EQ(static_cast<double>(tie - tiny), sign * c.tie);
      const double even = std::fmod(c.below / ulp_at(c.dtype, c.below), 2.0) == 0 ? c.below : c.above;
      EXPECT_EQ(detail::round_once<Real>(c.dtype, tie), sign * even) << to_string(c.dtype) << " " << sign * c.tie;
      EXPECT_EQ(detail::round_once<Real>(c.dtype, Real(sign) * (Real(c.tie) + tiny)), sign * c.above)
          << to_string(c.dtype) << " just beyond " << sign * c.tie;
      EXPECT_EQ(detail::round_once<Real>(c.dtype, Real(sign) * (Real(c.tie) - tiny)), sign * c.below)
          << to_string(c.dtype) << " just inside " << sign * c.tie;
    }
  }
  // Off a tie it is plain rounding; f64 takes the nearest double.
  EXPECT_EQ(detail::round_once<Real>(DType::f16, Real(1 + 0x1p-12)), 1.0);
  EXPECT_EQ(detail::round_once<Real>(DType::f16, Real(1 + 0x1p-10 + 0x1p-11 + 0x1p-13)), 1 + 0x1p-9);
  EXPECT_EQ(detail::round_once<Real>(DType::f64, Real(1.0) + Real(0x1p-53) + tiny), 1 + 0x1p-52);
  EXPECT_EQ(detail::round_once<Real>(DType::f64, Real(1.0) + Real(0x1p-53) - tiny), 1.0);
  EXPECT_EQ(detail::round_once<Real>(DType::f16, Real(70000.0)), inf);
  EXPECT_EQ(detail::round_once<Real>(DType::f16, Real(0.0)), 0.0);
}

TEST(ReferenceRounding, RoundOnceBreaksTiesByTheExactValueInFloat128) {
  check_round_once_breaks_ties_by_the_exact_value<Real113>();
}

TEST(ReferenceRounding, RoundOnceBreaksTiesByTheExactValueIn256Bits) {
  check_round_once_breaks_ties_by_the_exact_value<Real256>();
}

TEST(ReferenceRounding, AReferenceJustAboveATieRoundsUpEndToEnd) {
  // Two keys with equal scores give out = (v0 + v1) / 2 exactly; V makes that mean an f16 tie.
  // A score difference of 2^-48 then moves the mean 2^-60 off the tie: far below half an ulp of
  // a double, so converting to double first would land on the tie and round to even (down).
  Problem p;
  p.n_q = 1, p.n_k = 2, p.d_k = 1, p.d_v = 1, p.dtype = DType::f16, p.regime = Regime::sparse_int;
  p.validate();
  CaseInputs in = generate_inputs(p);
  in.q.set(0, 0x1p-24);  // the smallest f16 subnormal
  in.k.set(0, 0.0);
  in.k.set(1, 0.0);
  in.v.set(0, 1.0);
  in.v.set(1, 1 + 0x1p-10);  // mean 1 + 2^-11: a tie between 1 (even) and 1 + 2^-10
  EXPECT_EQ(compute_reference(p, in).out[0], 1.0);  // exact tie: to even

  in.k.set(1, 0x1p-24);  // key 1 weighs a little more: the mean lies just above the tie
  const auto row = detail::reference_row<Real113>(p, in, 0, 0x1p-113, false);
  ASSERT_GT(row.out[0], Real113(1 + 0x1p-11));
  ASSERT_EQ(static_cast<double>(row.out[0]), 1 + 0x1p-11);  // the trap: the double is the tie
  EXPECT_EQ(compute_reference(p, in).out[0], 1 + 0x1p-10);

  in.k.set(1, -0x1p-24);  // and now just below
  EXPECT_EQ(compute_reference(p, in).out[0], 1.0);
}

// ---------------------------------------------------------------------------------------------
// The bounded pass (double, double-word) and its fallback to float128
// ---------------------------------------------------------------------------------------------

ReferenceOptions float128_only() {
  ReferenceOptions options;
  options.bounded_pass = false;
  return options;
}

// Every masking feature, regime and dtype, GQA, d_k != d_v, a custom scale.
std::vector<Problem> spread_of_problems() {
  std::vector<Problem> problems;
  std::uint64_t seed = 300;
  for (DType d : all_dtypes)
    for (Regime regime : all_regimes())
      for (int variant = 0; variant < 9; ++variant) {
        Problem p = small(d, regime, 9, 13, ++seed);
        p.d_k = 24;
        switch (variant) {
          case 0: break;
          case 1: p.window = Window::of(Causal::top_left); break;
          case 2: p.window = Window::of(Causal::bottom_right), p.padding = {KeyPadding::Kind::per_batch, {7, 13}}; break;
          case 3:
            p.padding.kind = KeyPadding::Kind::per_query;
            for (std::int64_t r = 0; r < p.batch * p.n_q; ++r) p.padding.valid_len.push_back((r * 5) % 14);
            break;
          case 4: p.bool_mask = {true, 0.5, Broadcast::per_batch_head}, p.bias = {true, 2.0, Broadcast::per_head}; break;
          case 5: p.scale = 0.7, p.h_kv = 1, p.d_v = 17; break;
          case 6: p.softcap = 2.5, p.bias = BiasSpec::alibi(), p.window = Window::of(Causal::bottom_right); break;
          case 7: p.sinks = {true, regime == Regime::large ? 0.0 : 3.0, {}}, p.window = Window{4, 0, Align::top_left}; break;
          case 8: p.dropout.p = double(float(0.3)), p.window = Window::of(Causal::bottom_right); break;
        }
        p.validate();
        problems.push_back(p);
      }
  return problems;
}

TEST(ReferenceBoundedPass, EqualsFloat128OnEveryRegimeDtypeAndMask) {
  std::int64_t rows = 0, fallback = 0;
  for (const Problem& p : spread_of_problems()) {
    SCOPED_TRACE(p.repro());
    CaseInputs in = generate_inputs(p);
    if (p.dropout.enabled()) in.mask = in.mask.with_keep(builtin_keep_mask(p, in.mask));  // as an implementation reports it
    const ReferenceResult bounded = compute_reference(p, in), exact = compute_reference(p, in, float128_only());
    ASSERT_EQ(bounded.rows, exact.rows);
    ASSERT_EQ(exact.rows_fallback, 0);
    ASSERT_EQ(bounded.fully_masked, exact.fully_masked);
    for (std::size_t e = 0; e < exact.out.size(); ++e) ASSERT_EQ(bits(bounded.out[e]), bits(exact.out[e])) << "element " << e;
    for (std::size_t r = 0; r < exact.lse.size(); ++r) {
      if (exact.fully_masked[r]) {
        EXPECT_EQ(bounded.lse[r], -inf);
        continue;
      }
      // Each LSE within its stated bound of the exact one.
      EXPECT_LE(std::fabs(bounded.lse[r] - exact.lse[r]), bounded.self_bound_lse_max_abs + exact.self_bound_lse_max_abs) << "row " << r;
    }
    // The verdict's other inputs agree to far better than the 1% headroom their bounds carry.
    for (std::size_t e = 0; e < exact.naive_bound.size(); ++e)
      EXPECT_NEAR(bounded.naive_bound[e], exact.naive_bound[e], 1e-6 * exact.naive_bound[e]) << "element " << e;
    // score_rounding sums (w_j sigma_j (v_jc - o_c))^2: where o_c cancels against the dominant
    // key's value (saturated rows) it is as precise as the pass's o_c, a relative 1e-12 or so of
    // the LSE's score rounding (|v| is of order 1 here). An estimate either way: the pass rule's floor.
    EXPECT_NEAR(bounded.score_rounding.out, exact.score_rounding.out, 1e-6 * exact.score_rounding.out + 1e-9 * exact.score_rounding.lse);
    EXPECT_NEAR(bounded.score_rounding.lse, exact.score_rounding.lse, 1e-6 * exact.score_rounding.lse);
    rows += std::int64_t(bounded.rows.size());
    fallback += bounded.rows_fallback;
  }
  // Not vacuous: the bounded pass kept almost every row.
  EXPECT_LT(fallback * 20, rows) << fallback << " of " << rows << " rows fell back to float128";
  RecordProperty("rows", std::to_string(rows));
  RecordProperty("rows_fallback", std::to_string(fallback));
}

TEST(ReferenceBoundedPass, ThreadCountDoesNotChangeABit) {
  Problem p = small(DType::f32, Regime::diffuse, 40, 37, 333);
  p.window = Window::of(Causal::bottom_right);
  p.validate();
  const CaseInputs in = generate_inputs(p);
  ReferenceOptions one_thread;
  one_thread.threads = 1;
  const ReferenceResult serial = compute_reference(p, in, one_thread), parallel = compute_reference(p, in);
  ASSERT_EQ(serial.out.size(), parallel.out.size());
  for (std::size_t e = 0; e < serial.out.size(); ++e) ASSERT_EQ(bits(serial.out[e]), bits(parallel.out[e]));
  for (std::size_t r = 0; r < serial.lse.size(); ++r) ASSERT_EQ(bits(serial.lse[r]), bits(parallel.lse[r]));
  EXPECT_EQ(serial.rows_fallback, parallel.rows_fallback);
}

// The bounds the bounded pass relies on hold against the same computation in 256 bits: the
// double pass (f32/f16/bf16) and the double-word pass (every dtype).
TEST(ReferenceBoundedPass, BoundsHoldAgainst256Bits) {
  for (Regime regime : all_regimes())
    for (DType d : all_dtypes) {
      Problem p = small(d, regime, 6, 11, 400 + std::uint64_t(d));
      p.batch = 1, p.h_q = 2, p.h_kv = 1, p.d_k = 24, p.d_v = 6;
      p.bias = {true, 1.0, Broadcast::shared};
      p.validate();
      SCOPED_TRACE(p.repro());
      const CaseInputs in = generate_inputs(p);
      const detail::WidenedInputs wide(in);
      for (std::int64_t row = 0; row < p.rows(); ++row) {
        const auto r256 = detail::reference_row<Real256>(p, in, row, std::ldexp(1.0, -256), false);
        const auto dw = detail::reference_row_double_word(p, wide, row);
        ASSERT_EQ(dw.fully_masked, r256.fully_masked);
        if (dw.fully_masked) continue;
        for (std::size_t c = 0; c < std::size_t(p.d_v); ++c) {
          const Real256 diff = abs(Real256(dw.out[c]) + Real256(dw.out_low[c]) - r256.out[c]);
          EXPECT_LE(diff, Real256(dw.bound[c])) << "double word, row " << row << " c " << c;
        }
        EXPECT_LE(abs(Real256(dw.lse) - r256.lse), Real256(dw.lse_bound + std::fabs(dw.lse) * 0x1p-53)) << "row " << row;
        if (d == DType::f64) continue;
        const auto dbl = detail::reference_row<double>(p, wide, row, detail::double_arithmetic, false);
        for (std::size_t c = 0; c < std::size_t(p.d_v); ++c) {
          const Real256 diff = abs(Real256(dbl.out[c]) - r256.out[c]);
          EXPECT_LE(diff, Real256(dbl.bound[c])) << "double, row " << row << " c " << c;
          EXPECT_GT(dbl.bound[c], 0.0);
        }
        EXPECT_LE(abs(Real256(dbl.lse) - r256.lse), Real256(dbl.lse_bound)) << "row " << row;
      }
    }
}

// The double pass takes the C library's exp and log to be within 2 ulps (double_arithmetic):
// check that on this machine's libm against float128.
TEST(ReferenceBoundedPass, LibmExpAndLogAreWithinTheAssumedError) {
  double worst_exp = 0, worst_log = 0;
  std::uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return double(state >> 11) * 0x1p-53;
  };
  for (int k = 0; k < 200000; ++k) {
    const double x = -745 * next() * next();  // exp(s - m): arguments <= 0, many near 0
    const double e = std::exp(x);
    if (e > 0x1p-1022) {
      const Real113 want = exp(Real113(x));
      worst_exp = std::max(worst_exp, static_cast<double>(abs(Real113(e) - want) / want));
    }
    const double y = 1 + 1e6 * next() * next();  // log(sum), sum >= 1
    const Real113 want_log = log(Real113(y));
    if (want_log > 0) worst_log = std::max(worst_log, static_cast<double>(abs(Real113(std::log(y)) - want_log) / want_log));
  }
  EXPECT_LE(worst_exp, detail::double_arithmetic.exp_error);
  EXPECT_LE(worst_log, detail::double_arithmetic.exp_error);
  RecordProperty("exp_worst_relative_in_u", std::to_string(worst_exp / 0x1p-53));
  RecordProperty("log_worst_relative_in_u", std::to_string(worst_log / 0x1p-53));
}

// Two keys, one value column: out = w0 v0 + w1 v1 with v0, v1 chosen so the equal-weight mean is
// a tie of the dtype, and key 1's score q * k1 moving the exact output just off it.
struct NearTie {
  Problem p;
  CaseInputs in;
};
NearTie near_tie(DType dtype, double v1, double q, double k1) {
  Problem p;
  p.n_q = 1, p.n_k = 2, p.d_k = 1, p.d_v = 1, p.dtype = dtype, p.regime = Regime::sparse_int;  // scale 1
  p.validate();
  CaseInputs in = generate_inputs(p);
  in.q.set(0, q);
  in.k.set(0, 0.0);
  in.k.set(1, k1);
  in.v.set(0, 1.0);
  in.v.set(1, v1);
  return {p, std::move(in)};
}

TEST(ReferenceBoundedPass, AnOutputWithinTheBoundOfATieGoesToFloat128AndRoundsTheSame) {
  struct Case {
    DType dtype;
    double v1;       // mean (1 + v1) / 2 is a tie between 1 (even) and v1
    double q, k1;    // score difference q * k1 = delta moves the exact output by about delta (v1 - 1) / 4
  };
  // f32: tie 1 + 2^-24, delta 2^-75: 2^-100 off the tie, inside the double-word bound (about
  // 2^-97) and far outside float128's (about 2^-110). f64: tie 1 + 2^-53, delta 2^-46: again 2^-100.
  for (const Case& c : {Case{DType::f32, 1 + 0x1p-23, 0x1p-40, 0x1p-35}, Case{DType::f64, 1 + 0x1p-52, 0x1p-23, 0x1p-23}}) {
    for (double side : {1.0, -1.0}) {
      SCOPED_TRACE(std::string(to_string(c.dtype)) + (side > 0 ? " above the tie" : " below the tie"));
      const NearTie t = near_tie(c.dtype, c.v1, c.q, side * c.k1);
      const ReferenceResult bounded = compute_reference(t.p, t.in), exact = compute_reference(t.p, t.in, float128_only());
      EXPECT_EQ(bounded.rows_fallback, 1);  // neither bounded pass settles it
      EXPECT_EQ(exact.out[0], side > 0 ? c.v1 : 1.0);
      EXPECT_EQ(bits(bounded.out[0]), bits(exact.out[0]));
      EXPECT_EQ(bits(bounded.lse[0]), bits(exact.lse[0]));  // the fallback row is float128's in full
    }
  }
  // f16, the tie 1 + 2^-11 and delta 2^-48: 2^-60 off it. The double pass cannot tell (bound about
  // 2^-52); the double-word pass can, so no row reaches float128, and the result is the same.
  for (double side : {1.0, -1.0}) {
    const NearTie t = near_tie(DType::f16, 1 + 0x1p-10, 0x1p-24, side * 0x1p-24);
    const auto dbl = detail::reference_row<double>(t.p, detail::WidenedInputs(t.in), 0, detail::double_arithmetic, false);
    EXPECT_GT(2 * dbl.bound[0], std::fabs(dbl.out[0] - (1 + 0x1p-11)));  // within the double bound of the tie
    const ReferenceResult bounded = compute_reference(t.p, t.in), exact = compute_reference(t.p, t.in, float128_only());
    EXPECT_EQ(bounded.rows_fallback, 0);
    EXPECT_EQ(exact.out[0], side > 0 ? 1 + 0x1p-10 : 1.0);
    EXPECT_EQ(bits(bounded.out[0]), bits(exact.out[0]));
  }
}

TEST(ReferenceBoundedPass, NonFiniteRowsGoToFloat128) {
  // f64 inputs near overflow and wide heads: sum |q_t k_t| overflows double (reference.hpp), so
  // the double-word pass cannot bound those rows; float128 computes them, with finite bounds.
  Problem p;
  p.n_q = 2, p.n_k = 5, p.d_k = 4096, p.d_v = 4, p.dtype = DType::f64, p.regime = Regime::large, p.seed = 95;
  p.validate();
  const CaseInputs in = generate_inputs(p);
  const ReferenceResult bounded = compute_reference(p, in), exact = compute_reference(p, in, float128_only());
  EXPECT_GT(bounded.rows_fallback, 0);
  for (std::size_t e = 0; e < exact.out.size(); ++e) EXPECT_EQ(bits(bounded.out[e]), bits(exact.out[e]));
  EXPECT_TRUE(std::isfinite(bounded.self_bound_max_abs));
}

// ---------------------------------------------------------------------------------------------
// Row sampling
// ---------------------------------------------------------------------------------------------

TEST(ReferenceSampling, LargeProblemsSampleRowsDeterministically) {
  Problem p;
  p.batch = 2, p.h_q = 8, p.h_kv = 8, p.n_q = 4096, p.n_k = 4096, p.d_k = 128, p.d_v = 128;
  p.dtype = DType::bf16;
  p.seed = 7;
  p.validate();
  // Sampling is opt-in: by default every row.
  EXPECT_EQ(std::int64_t(reference_rows(p, ReferenceOptions{}).size()), p.rows());
  ReferenceOptions options;
  options.max_work = 6e6;
  const std::vector<std::int64_t> rows = reference_rows(p, options);
  EXPECT_LT(std::int64_t(rows.size()), p.rows());
  EXPECT_GE(std::int64_t(rows.size()), options.min_sampled_rows);
  EXPECT_LE(rows.size(), 4 * std::size_t(options.min_sampled_rows));
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.front(), 0);
  EXPECT_EQ(rows.back(), p.rows() - 1);
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  EXPECT_TRUE(std::adjacent_find(rows.begin(), rows.end()) == rows.end());
  for (auto r : rows) EXPECT_TRUE(r >= 0 && r < p.rows());

  EXPECT_EQ(reference_rows(p, options), rows);  // deterministic
  Problem reseeded = p;
  reseeded.seed = 8;
  EXPECT_NE(reference_rows(reseeded, options), rows);  // and seeded

  // More budget, more rows; enough budget, every row.
  ReferenceOptions more = options;
  more.min_sampled_rows = 500;
  EXPECT_GE(reference_rows(p, more).size(), 500u);
  Problem tiny = p;
  tiny.n_q = tiny.n_k = 16, tiny.d_k = tiny.d_v = 16;
  EXPECT_EQ(std::int64_t(reference_rows(tiny, options).size()), tiny.rows());
}

TEST(ReferenceSampling, SampledRowsMatchTheFullComputation) {
  Problem p;
  p.batch = 1, p.h_q = 2, p.h_kv = 1, p.n_q = 256, p.n_k = 256, p.d_k = 16, p.d_v = 16;
  p.dtype = DType::f32;
  p.window = Window::of(Causal::bottom_right);
  p.seed = 3;
  p.validate();
  const CaseInputs in = generate_inputs(p);
  ReferenceOptions sample;
  sample.max_work = 5.0 * double(p.n_k) * double(p.d_k + p.d_v);
  sample.min_sampled_rows = 8;
  const ReferenceResult sampled = compute_reference(p, in, sample);
  EXPECT_TRUE(sampled.sampled);
  EXPECT_EQ(sampled.rows, reference_rows(p, sample));
  EXPECT_EQ(sampled.rows.size(), 8u);
  EXPECT_EQ(sampled.out.size(), sampled.rows.size() * std::size_t(p.d_v));
  EXPECT_EQ(sampled.lse.size(), sampled.rows.size());

  ReferenceOptions everything;
  everything.max_work = 1e12;
  const ReferenceResult full = compute_reference(p, in, everything);
  EXPECT_FALSE(full.sampled);
  ASSERT_EQ(std::int64_t(full.rows.size()), p.rows());
  for (std::size_t r = 0; r < sampled.rows.size(); ++r) {
    const auto row = std::size_t(sampled.rows[r]);
    EXPECT_EQ(full.rows[row], sampled.rows[r]);
    EXPECT_EQ(bits(full.lse[row]), bits(sampled.lse[r]));
    for (std::size_t c = 0; c < std::size_t(p.d_v); ++c)
      EXPECT_EQ(bits(full.out[row * std::size_t(p.d_v) + c]), bits(sampled.out[r * std::size_t(p.d_v) + c]));
  }
  // Thread count does not change a bit.
  ReferenceOptions one_thread = sample;
  one_thread.threads = 1;
  const ReferenceResult serial = compute_reference(p, in, one_thread);
  EXPECT_EQ(serial.rows, sampled.rows);
  for (std::size_t e = 0; e < sampled.out.size(); ++e) EXPECT_EQ(bits(serial.out[e]), bits(sampled.out[e]));
}

}  // namespace
}  // namespace attn

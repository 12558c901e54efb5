// Error metrics (core/metrics.hpp) and the default pass rule (core/pass_rule.hpp) on tiny
// hand-built problems whose every figure is worked out by hand below.
// Over 500 lines: the hand-worked figures of each metric are spelled out, one test each.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/inputs.hpp"
#include "core/mask.hpp"
#include "core/metrics.hpp"
#include "core/pass_rule.hpp"
#include "core/problem.hpp"

namespace attn {
namespace {

// A problem's numerics of one dtype, as the pass rule takes them.
ProblemNumerics numerics_of(DType dtype) {
  ProblemNumerics numerics;
  numerics.dtype = dtype;
  return numerics;
}

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();

// b=1, h=1, n_q rows of d_v values; n_k = 2, d_k = 1; optional per-query padding.
Problem tiny(std::int64_t n_q, std::int64_t d_v, DType dtype = DType::f32, std::vector<std::int64_t> padq = {}) {
  Problem p;
  p.n_q = n_q;
  p.n_k = 2;
  p.d_k = 1;
  p.d_v = d_v;
  p.dtype = dtype;
  if (!padq.empty()) {
    p.padding.kind = KeyPadding::Kind::per_query;
    p.padding.valid_len = std::move(padq);
  }
  p.validate();
  return p;
}

// Owns the spans an Expected points at.
struct Oracle {
  std::vector<std::int64_t> rows;
  std::vector<double> out;
  std::vector<double> lse;
  std::vector<std::uint8_t> fully_masked;
  Expected expected() const { return {rows, out, lse, fully_masked}; }
};

Tensor filled(const Problem& p, const std::vector<double>& values) {
  Tensor t = make_output(p);
  EXPECT_EQ(t.numel(), std::int64_t(values.size()));
  for (std::size_t e = 0; e < values.size(); ++e) t.set(std::int64_t(e), values[e]);
  return t;
}

bool contains(const std::vector<std::string>& reasons, const std::string& needle) {
  for (const auto& r : reasons)
    if (r.find(needle) != std::string::npos) return true;
  return false;
}

std::string joined(const std::vector<std::string>& reasons) {
  std::string s;
  for (const auto& r : reasons) s += r + "; ";
  return s;
}

// ---------------------------------------------------------------------------------------------
// measure(): the error figures
// ---------------------------------------------------------------------------------------------

// Reference (2 rows x 3):   1   -2   2^-12 | 0.5   4   0
// Output:               1+2^-9 -2 2^-12+2^-14 | 0.5 4-2^-8 2^-30
// errors:               2^-9    0   2^-14  |  0   2^-8  2^-30
// max |ref| = 4, so the relative floor is max(2^-126, 4/1024) = 2^-8.
// relative errors:      2^-9    0   2^-14/2^-8 = 2^-6 (floored; unfloored it would be 2^-2) | 0  2^-10  2^-22
// f32 ulps:             2^14    0   2^21   |  0   2^14  bits(2^-30) = 97 << 23
TEST(Measure, ErrorFiguresAndTheirWorstIndexMatchHandComputedValues) {
  const Problem p = tiny(2, 3);
  const Mask mask(p);
  Oracle o{{0, 1}, {1.0, -2.0, 0x1p-12, 0.5, 4.0, 0.0}, {0.0, 0.0}, {0, 0}};
  const Tensor out = filled(p, {1.0 + 0x1p-9, -2.0, 0x1p-12 + 0x1p-14, 0.5, 4.0 - 0x1p-8, 0x1p-30});
  const ErrorMetrics m = measure(p, mask, o.expected(), out, nullptr, FullyMaskedPolicy::zeros);

  EXPECT_EQ(m.compared, 6);
  EXPECT_EQ(m.reference_max_abs, 4.0);
  EXPECT_EQ(m.max_abs, 0x1p-8);
  EXPECT_EQ(m.max_abs_index, 4);
  EXPECT_EQ(m.rel_floor, 0x1p-8);
  EXPECT_EQ(m.max_rel, 0x1p-6);
  EXPECT_EQ(m.max_rel_index, 2);
  // Elements 2 and 5 lie below the floor, where ulps mean nothing (element 5 is 2^-30 against
  // 0: 97 * 2^23 ulps); elements 0 and 4 are both 2^14 ulps off, and the first one is reported.
  EXPECT_EQ(m.max_ulps, std::uint64_t{1} << 14);
  EXPECT_EQ(m.max_ulps_index, 0);

  const double err_sq = 0x1p-18 + 0x1p-28 + 0x1p-16 + 0x1p-60;
  const double ref_sq = 1.0 + 4.0 + 0x1p-24 + 0.25 + 16.0;
  EXPECT_DOUBLE_EQ(m.normwise_rel, std::sqrt(err_sq / ref_sq));
  EXPECT_DOUBLE_EQ(m.rms, std::sqrt(err_sq / 6.0));

  EXPECT_EQ(m.nan, 0);
  EXPECT_EQ(m.pos_inf, 0);
  EXPECT_EQ(m.neg_inf, 0);
  EXPECT_EQ(m.unwritten, 0);
  EXPECT_EQ(m.fully_masked_rows, 0);
  EXPECT_EQ(m.fully_masked_violations, 0);
  EXPECT_FALSE(m.has_lse);
}

TEST(Measure, RelativeFloorIsTheMinNormalWhenTheReferenceIsTiny) {
  // max |ref| = 2^-120: 2^-120 / 1024 = 2^-130 is below f32's min normal 2^-126.
  const Problem p = tiny(1, 2);
  Oracle o{{0}, {0x1p-120, 0.0}, {0.0}, {0}};
  const Tensor out = filled(p, {0x1p-120, 0x1p-127});
  const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, nullptr, FullyMaskedPolicy::zeros);
  EXPECT_EQ(m.rel_floor, 0x1p-126);
  EXPECT_EQ(m.max_rel, 0.5);  // 2^-127 / 2^-126
  EXPECT_EQ(m.max_rel_index, 1);
  EXPECT_EQ(m.max_abs, 0x1p-127);
}

TEST(Measure, NormwiseErrorIsAbsoluteWhenTheReferenceIsZero) {
  const Problem p = tiny(1, 2, DType::f64);
  Oracle o{{0}, {0.0, 0.0}, {0.0}, {0}};
  const Tensor out = filled(p, {3e-9, -4e-9});
  const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, nullptr, FullyMaskedPolicy::zeros);
  EXPECT_DOUBLE_EQ(m.normwise_rel, 5e-9);
  EXPECT_DOUBLE_EQ(m.rms, 5e-9 / std::sqrt(2.0));
  EXPECT_EQ(m.max_abs, 4e-9);
  EXPECT_EQ(m.max_abs_index, 1);
}

TEST(Measure, ExactOutputHasZeroErrorEverywhere) {
  const Problem p = tiny(2, 2, DType::bf16);
  Oracle o{{0, 1}, {1.5, -0.25, 3.0, 0.0}, {0.0, 0.0}, {0, 0}};
  const Tensor out = filled(p, o.out);
  const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, nullptr, FullyMaskedPolicy::zeros);
  EXPECT_EQ(m.compared, 4);
  EXPECT_EQ(m.max_abs, 0.0);
  EXPECT_EQ(m.max_rel, 0.0);
  EXPECT_EQ(m.max_ulps, 0u);
  EXPECT_EQ(m.normwise_rel, 0.0);
  EXPECT_EQ(m.rms, 0.0);
}

TEST(Measure, UlpsAreCountedInTheOutputDtype) {
  // 1 + 3 ulps in each dtype: the same relative distance counts 3 ulps in each.
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    const Problem p = tiny(1, 1, d);
    const double ulp = std::ldexp(1.0, 1 - significand_bits(d));
    Oracle o{{0}, {1.0}, {0.0}, {0}};
    const Tensor out = filled(p, {1.0 + 3 * ulp});
    const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, nullptr, FullyMaskedPolicy::zeros);
    EXPECT_EQ(m.max_ulps, 3u) << to_string(d);
    EXPECT_EQ(m.max_abs, 3 * ulp) << to_string(d);
  }
}

TEST(Measure, WorstIndexIsAFlatIndexIntoOWhenOnlySomeRowsAreExpected) {
  // The oracle sampled rows 1 and 3 of 4; the worst element is row 3, column 1 -> 3 * 2 + 1.
  const Problem p = tiny(4, 2);
  Oracle o{{1, 3}, {1.0, 1.0, 1.0, 1.0}, {0.0, 0.0}, {0, 0}};
  // Rows 0 and 2 are far off but not expected: they do not count.
  const Tensor out = filled(p, {100.0, 100.0, 1.0, 1.0 + 0x1p-10, 100.0, 100.0, 1.0 + 0x1p-12, 1.0 + 0x1p-8});
  const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, nullptr, FullyMaskedPolicy::zeros);
  EXPECT_EQ(m.compared, 4);
  EXPECT_EQ(m.max_abs, 0x1p-8);
  EXPECT_EQ(m.max_abs_index, 7);
  EXPECT_EQ(m.max_rel_index, 7);
  EXPECT_EQ(m.max_ulps_index, 7);
  EXPECT_EQ(output_coordinates(p, m.max_abs_index), "b=0 h=0 i=3 c=1");
}

TEST(Measure, ANanOutsideTheSampledRowsIsStillTheWorstElement) {
  // Rows 1 and 3 sampled; row 2 holds a NaN: the worst element is that NaN, not a finite one.
  const Problem p = tiny(4, 2);
  Oracle o{{1, 3}, {1.0, 1.0, 1.0, 1.0}, {0.0, 0.0}, {0, 0}};
  const Tensor out = filled(p, {1.0, 1.0, 1.0, 1.0 + 0x1p-10, 1.0, nan_value, 1.0, 1.0 + 0x1p-8});
  ErrorMetrics m = measure(p, Mask(p), o.expected(), out, nullptr, FullyMaskedPolicy::zeros);
  EXPECT_EQ(m.max_abs_index, 7);  // measure() compares the sampled rows: the diagnosis relies on it
  worst_at_first_nonfinite(m, p, Mask(p), out);  // what the judge then reports
  EXPECT_EQ(m.max_abs, inf);
  EXPECT_EQ(m.max_abs_index, 5);
  EXPECT_EQ(output_coordinates(p, m.max_ulps_index), "b=0 h=0 i=2 c=1");
  EXPECT_EQ(m.nan, 1);
}

TEST(Measure, OutputCoordinatesNameBatchHeadRowAndColumn) {
  Problem p;
  p.batch = 2, p.h_q = 3, p.h_kv = 1, p.n_q = 5, p.n_k = 4, p.d_k = 8, p.d_v = 7;
  // ((b * h_q + h) * n_q + i) * d_v + c with b=1, h=2, i=4, c=6
  const std::int64_t flat = ((1 * 3 + 2) * 5 + 4) * 7 + 6;
  EXPECT_EQ(output_coordinates(p, flat), "b=1 h=2 i=4 c=6");
  EXPECT_EQ(output_coordinates(p, 0), "b=0 h=0 i=0 c=0");
  EXPECT_EQ(output_coordinates(p, -1), "-");
}

// ---------------------------------------------------------------------------------------------
// measure(): the census of NaN, Inf, unwritten elements and fully masked rows
// ---------------------------------------------------------------------------------------------

TEST(Measure, NanAndInfAreCountedInEveryRowAndFullyMaskedRowsSeparately) {
  // Rows: 0 sees 2 keys, 1 sees none (fully masked), 2 sees 2 keys, 3 sees 1.
  const Problem p = tiny(4, 2, DType::f32, {2, 0, 2, 1});
  const Mask mask(p);
  ASSERT_TRUE(mask.row_fully_masked(0, 0, 1));
  // Only row 2 is expected: the census still covers every row of O.
  Oracle o{{2}, {1.0, 1.0}, {0.0}, {0}};
  const Tensor out = filled(p, {nan_value, inf, nan_value, inf, -inf, 1.0, nan_value, -inf});
  const ErrorMetrics m = measure(p, mask, o.expected(), out, nullptr, FullyMaskedPolicy::zeros);
  EXPECT_EQ(m.nan, 3);      // rows 0, 1 and 3
  EXPECT_EQ(m.pos_inf, 2);  // rows 0 and 1
  EXPECT_EQ(m.neg_inf, 2);  // rows 2 and 3
  EXPECT_EQ(m.fully_masked_nan, 1);  // row 1's NaN and Inf: the policy judges them, not the census
  EXPECT_EQ(m.fully_masked_inf, 1);
  EXPECT_EQ(m.nan_outside_fully_masked(), 2);
  EXPECT_EQ(m.inf_outside_fully_masked(), 3);
  EXPECT_EQ(m.unwritten, 0);
  EXPECT_EQ(m.fully_masked_rows, 1);
  EXPECT_EQ(m.fully_masked_violations, 1);  // row 1 holds NaN and Inf, not zeros
  EXPECT_EQ(m.fully_masked_nan_rows, 1);
  EXPECT_EQ(fully_masked_contents(m), "1 hold NaN");
  // The expected row holds -Inf: its error is infinite.
  EXPECT_EQ(m.compared, 2);
  EXPECT_EQ(m.max_abs, inf);
  EXPECT_EQ(m.max_abs_index, 4);
}

TEST(Measure, PoisonedElementsCountAsUnwrittenNotAsNan) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    const Problem p = tiny(3, 4, d);
    Tensor out = make_output(p);  // poisoned
    for (std::int64_t e = 0; e < out.numel(); ++e) ASSERT_TRUE(out.is_poisoned(e));
    const std::int64_t skipped = 6;
    for (std::int64_t e = 0; e < out.numel(); ++e)
      if (e != skipped) out.set(e, 0.5);
    Oracle o{{0, 1, 2}, std::vector<double>(12, 0.5), {0.0, 0.0, 0.0}, {0, 0, 0}};
    const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, nullptr, FullyMaskedPolicy::zeros);
    EXPECT_EQ(m.unwritten, 1) << to_string(d);
    EXPECT_EQ(m.nan, 0) << to_string(d);
    EXPECT_EQ(m.max_abs, inf) << to_string(d);  // an unwritten expected element cannot be right
    EXPECT_EQ(m.max_abs_index, skipped) << to_string(d);
  }
}

TEST(Measure, AnOrdinaryNanIsNotMistakenForPoison) {
  const Problem p = tiny(1, 2);
  Tensor out = make_output(p);
  out.set(0, nan_value);
  out.set(1, 1.0);
  Oracle o{{0}, {1.0, 1.0}, {0.0}, {0}};
  const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, nullptr, FullyMaskedPolicy::zeros);
  EXPECT_EQ(m.unwritten, 0);
  EXPECT_EQ(m.nan, 1);
}

TEST(Measure, UnwrittenElementsInFullyMaskedRowsAreStillUnwritten) {
  const Problem p = tiny(2, 2, DType::f32, {0, 2});
  Tensor out = make_output(p);
  out.set(1, 0.0);  // row 0: element 0 left poisoned
  out.set(2, 1.0);
  out.set(3, 1.0);
  Oracle o{{0, 1}, {0.0, 0.0, 1.0, 1.0}, {-inf, 0.0}, {1, 0}};
  const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, nullptr, FullyMaskedPolicy::zeros);
  EXPECT_EQ(m.unwritten, 1);
  EXPECT_EQ(m.fully_masked_rows, 1);
}

TEST(Measure, FullyMaskedRowsAreNotCompared) {
  const Problem p = tiny(2, 2, DType::f32, {0, 2});
  Oracle o{{0, 1}, {0.0, 0.0, 1.0, 2.0}, {-inf, 0.0}, {1, 0}};
  // Row 0 is zeros; even a reference holding something else there must not be compared.
  Oracle odd{{0, 1}, {7.0, 7.0, 1.0, 2.0}, {-inf, 0.0}, {1, 0}};
  const Tensor out = filled(p, {0.0, 0.0, 1.0, 2.0});
  for (const Oracle* oracle : {&o, &odd}) {
    const ErrorMetrics m = measure(p, Mask(p), oracle->expected(), out, nullptr, FullyMaskedPolicy::zeros);
    EXPECT_EQ(m.compared, 2);
    EXPECT_EQ(m.max_abs, 0.0);
    EXPECT_EQ(m.reference_max_abs, 2.0);
    EXPECT_EQ(m.fully_masked_rows, 1);
    EXPECT_EQ(m.fully_masked_violations, 0);
  }
}

TEST(Measure, ZerosPolicyRequiresExactZeros) {
  // Rows 0 and 2 fully masked, row 1 sees both keys.
  const Problem p = tiny(3, 2, DType::f32, {0, 2, 0});
  Oracle o{{0, 1, 2}, {0.0, 0.0, 1.0, 1.0, 0.0, 0.0}, {-inf, 0.0, -inf}, {1, 0, 1}};
  struct Case {
    std::vector<double> row0, row2;
    int violations;
  };
  const std::vector<Case> cases{
      {{0.0, 0.0}, {0.0, 0.0}, 0},
      {{-0.0, 0.0}, {0.0, -0.0}, 0},          // negative zero is zero
      {{0.0, 1e-30}, {0.0, 0.0}, 1},          // not exactly zero
      {{nan_value, nan_value}, {0.0, 0.0}, 1},  // NaN is never accepted under the zeros policy
      {{0.0, 0.0}, {inf, 0.0}, 1},
      {{0.5, 0.0}, {0.0, -0.5}, 2},           // violations count rows, not elements
      {{0.5, 0.5}, {0.0, 0.0}, 1},
  };
  for (const Case& c : cases) {
    const Tensor out = filled(p, {c.row0[0], c.row0[1], 1.0, 1.0, c.row2[0], c.row2[1]});
    const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, nullptr, FullyMaskedPolicy::zeros);
    EXPECT_EQ(m.fully_masked_rows, 2);
    EXPECT_EQ(m.fully_masked_violations, c.violations) << c.row0[0] << " " << c.row0[1] << " " << c.row2[0] << " " << c.row2[1];
    // NaN and Inf in fully masked rows are counted, as such, and judged by the policy alone.
    EXPECT_EQ(m.nan_outside_fully_masked() + m.inf_outside_fully_masked(), 0);
    EXPECT_EQ(m.fully_masked_nan_rows + m.fully_masked_inf_rows + m.fully_masked_zero_rows + m.fully_masked_finite_rows, 2);
    EXPECT_EQ(m.max_abs, 0.0);
  }
}

TEST(Measure, NanPolicyRequiresNan) {
  const Problem p = tiny(2, 2, DType::f16, {0, 2});
  Oracle o{{0, 1}, {0.0, 0.0, 1.0, 1.0}, {-inf, 0.0}, {1, 0}};
  struct Case {
    std::vector<double> row0;
    int violations;
  };
  const std::vector<Case> cases{
      {{nan_value, nan_value}, 0},
      {{0.0, 0.0}, 1},
      {{nan_value, 0.0}, 1},
      {{inf, nan_value}, 1},
  };
  for (const Case& c : cases) {
    const Tensor out = filled(p, {c.row0[0], c.row0[1], 1.0, 1.0});
    const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, nullptr, FullyMaskedPolicy::nan);
    EXPECT_EQ(m.fully_masked_violations, c.violations) << c.row0[0] << " " << c.row0[1];
    EXPECT_EQ(m.nan, std::int64_t(std::isnan(c.row0[0])) + std::int64_t(std::isnan(c.row0[1])));
    EXPECT_EQ(m.nan_outside_fully_masked(), 0);
  }
}

// Under the any policy a fully masked row is not judged, whatever it holds; the other rows are,
// and an unwritten element is still unwritten.
TEST(Measure, AnyPolicyJudgesOnlyRowsThatSeeKeys) {
  const Problem p = tiny(2, 2, DType::f16, {0, 2});
  Oracle o{{0, 1}, {0.0, 0.0, 1.0, 1.0}, {-inf, 0.0}, {1, 0}};
  for (const std::vector<double>& row0 : std::vector<std::vector<double>>{{nan_value, nan_value}, {0.0, 0.0}, {7.0, -inf}, {0.5, nan_value}}) {
    const ErrorMetrics m = measure(p, Mask(p), o.expected(), filled(p, {row0[0], row0[1], 1.0, 1.0}), nullptr, FullyMaskedPolicy::any);
    EXPECT_EQ(m.fully_masked_violations, 0) << row0[0] << " " << row0[1];
    EXPECT_EQ(m.nan_outside_fully_masked(), 0);
    EXPECT_EQ(m.inf_outside_fully_masked(), 0);
    EXPECT_EQ(m.max_abs, 0.0);
    EXPECT_EQ(to_string(m.policy), "any");
  }
  const ErrorMetrics wrong = measure(p, Mask(p), o.expected(), filled(p, {7.0, 7.0, 1.0, 1.5}), nullptr, FullyMaskedPolicy::any);
  EXPECT_EQ(wrong.max_abs, 0.5);
  // The same 7s break the zeros and nan policies.
  EXPECT_EQ(measure(p, Mask(p), o.expected(), filled(p, {7.0, 7.0, 1.0, 1.0}), nullptr, FullyMaskedPolicy::zeros).fully_masked_violations, 1);
  EXPECT_EQ(measure(p, Mask(p), o.expected(), filled(p, {7.0, 7.0, 1.0, 1.0}), nullptr, FullyMaskedPolicy::nan).fully_masked_violations, 1);
}

// ---------------------------------------------------------------------------------------------
// measure(): the row LSE
// ---------------------------------------------------------------------------------------------

TEST(Measure, LseErrorsAndViolations) {
  // Row 0 fully masked, rows 1 and 2 see keys.
  const Problem p = tiny(3, 1, DType::f32, {0, 2, 1});
  Oracle o{{0, 1, 2}, {0.0, 1.0, 1.0}, {-inf, 2.5, -3.0}, {1, 0, 0}};
  const Tensor out = filled(p, {0.0, 1.0, 1.0});

  auto lse_of = [&](double a, double b, double c) {
    Tensor lse = make_lse(p);
    EXPECT_EQ(lse.dtype(), DType::f32);
    EXPECT_EQ(lse.numel(), 3);
    lse.set(0, a);
    lse.set(1, b);
    lse.set(2, c);
    return lse;
  };

  {
    const Tensor lse = lse_of(-inf, 2.5 + 0x1p-10, -3.0 - 0x1p-8);
    const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, &lse, FullyMaskedPolicy::zeros);
    EXPECT_TRUE(m.has_lse);
    EXPECT_EQ(m.lse_violations, 0);
    EXPECT_EQ(m.lse_max_abs, 0x1p-8);
    EXPECT_EQ(m.lse_reference_max_abs, 3.0);
  }
  // A fully masked row must hold -inf.
  for (double bad : {0.0, inf, -1e30, nan_value}) {
    const Tensor lse = lse_of(bad, 2.5, -3.0);
    const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, &lse, FullyMaskedPolicy::zeros);
    EXPECT_EQ(m.lse_violations, 1) << bad;
    EXPECT_EQ(m.lse_max_abs, 0.0) << bad;
  }
  // Under the NaN policy, NaN is what a fully masked row may hold; -inf is still fine.
  for (double ok : {-inf, nan_value}) {
    const Tensor lse = lse_of(ok, 2.5, -3.0);
    const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, &lse, FullyMaskedPolicy::nan);
    EXPECT_EQ(m.lse_violations, 0) << ok;
  }
  // Under the any policy a fully masked row's LSE is not judged either.
  for (double ok : {-inf, nan_value, 0.0, 1e30}) {
    const Tensor lse = lse_of(ok, 2.5, -3.0);
    const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, &lse, FullyMaskedPolicy::any);
    EXPECT_EQ(m.lse_violations, 0) << ok;
    EXPECT_EQ(m.lse_max_abs, 0.0) << ok;
  }
  // Non-finite where finite is expected.
  for (double bad : {nan_value, inf, -inf}) {
    const Tensor lse = lse_of(-inf, bad, -3.0);
    const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, &lse, FullyMaskedPolicy::zeros);
    EXPECT_EQ(m.lse_violations, 1) << bad;
  }
  // An unwritten (poisoned) LSE is a violation.
  {
    Tensor lse = make_lse(p);
    lse.set(0, -inf);
    lse.set(2, -3.0);
    const ErrorMetrics m = measure(p, Mask(p), o.expected(), out, &lse, FullyMaskedPolicy::zeros);
    EXPECT_EQ(m.lse_violations, 1);
  }
}

// ---------------------------------------------------------------------------------------------
// judge(): the pass rule
// ---------------------------------------------------------------------------------------------

ErrorMetrics with_error(double max_abs, double reference_max_abs) {
  ErrorMetrics m;
  m.compared = 10;
  m.max_abs = max_abs;
  m.reference_max_abs = reference_max_abs;
  return m;
}

TEST(Judge, PassesAtTheToleranceAndFailsJustAboveIt) {
  const PassRule rule;  // k = 2, floor 2 ulps
  EXPECT_EQ(rule.k, 2.0);
  EXPECT_EQ(rule.floor_ulps, 2.0);
  struct Case {
    DType dtype;
    double reference_max_abs, baseline, ulp;
  };
  const std::vector<Case> cases{
      {DType::f32, 1.0, 1e-6, 0x1p-23},
      {DType::f32, 3.0, 2.5e-7, 0x1p-22},
      {DType::f16, 1.5, 1e-4, 0x1p-10},
      {DType::bf16, 0.3, 1e-3, 0x1p-9},
      {DType::f64, 2.0, 1e-15, 0x1p-51},
      {DType::f32, 1.0, 0.0, 0x1p-23},  // an exact baseline: only the floor remains
  };
  for (const Case& c : cases) {
    const double tolerance = 2.0 * c.baseline + 2.0 * c.ulp;
    const ErrorMetrics baseline = with_error(c.baseline, c.reference_max_abs);
    const Verdict at = judge(rule, numerics_of(c.dtype), with_error(tolerance, c.reference_max_abs), baseline);
    EXPECT_TRUE(at.pass) << to_string(c.dtype) << ": " << joined(at.reasons);
    EXPECT_TRUE(at.reasons.empty());
    EXPECT_DOUBLE_EQ(at.tolerance(), tolerance);
    if (c.baseline > 0) {
      EXPECT_DOUBLE_EQ(at.ratio, tolerance / c.baseline);
    }

    const double above = tolerance * (1 + 1e-9);
    const Verdict over = judge(rule, numerics_of(c.dtype), with_error(above, c.reference_max_abs), baseline);
    EXPECT_FALSE(over.pass) << to_string(c.dtype);
    ASSERT_EQ(over.reasons.size(), 1u);
    EXPECT_NE(over.reasons[0].find("max abs error"), std::string::npos) << over.reasons[0];
    EXPECT_NE(over.reasons[0].find("tolerance"), std::string::npos) << over.reasons[0];
  }
}

TEST(Judge, TheRuleParametersAreHonoured) {
  const PassRule rule{3.0, 0.0};
  const ErrorMetrics baseline = with_error(1e-6, 1.0);
  EXPECT_TRUE(judge(rule, numerics_of(DType::f32), with_error(3.0 * 1e-6, 1.0), baseline).pass);
  EXPECT_FALSE(judge(rule, numerics_of(DType::f32), with_error(3.0001e-6, 1.0), baseline).pass);
  const PassRule floor_only{0.0, 4.0};
  EXPECT_TRUE(judge(floor_only, numerics_of(DType::f32), with_error(4 * 0x1p-23, 1.0), baseline).pass);
  EXPECT_FALSE(judge(floor_only, numerics_of(DType::f32), with_error(5 * 0x1p-23, 1.0), baseline).pass);
}

// The yardstick is the naive error or, when larger, the typical error of rounding the scores:
// a naive run whose roundings cancelled by luck does not make the rule a coin toss.
TEST(Judge, ScoreRoundingFloorsTheYardstick) {
  const PassRule rule{2.0, 0.0};
  const ErrorMetrics lucky_naive = with_error(1e-7, 1.0);
  EXPECT_FALSE(judge(rule, numerics_of(DType::f32), with_error(1e-6, 1.0), lucky_naive).pass);
  const Verdict floored = judge(rule, numerics_of(DType::f32), with_error(1e-6, 1.0), lucky_naive, {.out = 5e-7});
  EXPECT_TRUE(floored.pass);
  EXPECT_DOUBLE_EQ(floored.tolerance(), 1e-6);
  const Verdict over = judge(rule, numerics_of(DType::f32), with_error(1.01e-6, 1.0), lucky_naive, {.out = 5e-7});
  ASSERT_FALSE(over.pass);
  EXPECT_NE(over.reasons[0].find("score rounding"), std::string::npos) << over.reasons[0];
  // A smaller score-rounding term changes nothing.
  EXPECT_DOUBLE_EQ(judge(rule, numerics_of(DType::f32), with_error(0, 1.0), with_error(1e-6, 1.0), {.out = 1e-9}).tolerance(), 2e-6);
}

// The LSE too: an f64 row with one key has LSE = its score, which the naive algorithm may get
// exactly by luck of the summation order on one CPU; another order is not wrong.
TEST(Judge, ScoreRoundingFloorsTheLseYardstick) {
  const PassRule rule{2.0, 0.0};
  ErrorMetrics exact_naive = with_error(0, 1.0);
  exact_naive.has_lse = true;
  ErrorMetrics other_order = with_error(0, 1.0);
  other_order.has_lse = true;
  other_order.lse_max_abs = 1.4e-16;
  other_order.lse_reference_max_abs = 0.4;
  EXPECT_FALSE(judge(rule, numerics_of(DType::f64), other_order, exact_naive).pass);
  EXPECT_TRUE(judge(rule, numerics_of(DType::f64), other_order, exact_naive, {.lse = 1e-16}).pass);
  const Verdict over = judge(rule, numerics_of(DType::f64), other_order, exact_naive, {.lse = 0.6e-16});
  ASSERT_FALSE(over.pass);
  EXPECT_NE(over.reasons[0].find("score rounding"), std::string::npos) << over.reasons[0];
}

// An implementation whose products are coarser than the dtype's arithmetic (TF32 on f32 inputs)
// is held to the rule in its own precision: yardsticks and floors, output and LSE, scale by
// matmul unit roundoff / the dtype's accumulation unit roundoff.
TEST(Judge, PrecisionScaleFollowsTheMatmulUnitRoundoff) {
  EXPECT_EQ(precision_scale(DType::f32, MatmulPrecision::working), 1.0);  // the dtype's own
  EXPECT_EQ(precision_scale(DType::f64, MatmulPrecision::working), 1.0);
  EXPECT_EQ(precision_scale(DType::f32, MatmulPrecision::tf32), 8192.0);  // TF32
  EXPECT_EQ(precision_scale(DType::f16, MatmulPrecision::tf32), 8192.0);  // f16 computes in f32
  EXPECT_EQ(precision_scale(DType::f32, MatmulPrecision::bf16), 0x1p16);
  EXPECT_EQ(precision_scale(DType::f64, MatmulPrecision::tf32), 0x1p42);
  // The declared number names one precision, or is refused naming what is accepted.
  EXPECT_EQ(matmul_precision_of(0), MatmulPrecision::working);
  EXPECT_EQ(matmul_precision_of(0x1p-11), MatmulPrecision::tf32);
  EXPECT_EQ(matmul_precision_of(0x1p-8), MatmulPrecision::bf16);
  EXPECT_THROW(matmul_precision_of(0x1p-10), InputError);
  EXPECT_THROW(matmul_precision_of(-0.0001), InputError);
  for (MatmulPrecision p : {MatmulPrecision::working, MatmulPrecision::tf32, MatmulPrecision::bf16}) {
    EXPECT_EQ(matmul_precision_of(unit_roundoff(p)), p);
    EXPECT_EQ(parse_matmul_precision(to_string(p)), p);
  }
  EXPECT_THROW(parse_matmul_precision("fp8"), InputError);

  const PassRule rule{2.0, 2.0};
  const ErrorMetrics baseline = with_error(1e-7, 1.0);
  const double unscaled = judge(rule, numerics_of(DType::f32), with_error(0, 1.0), baseline).tolerance();
  const Verdict scaled = judge(rule, numerics_of(DType::f32), with_error(1e-3, 1.0), baseline, {}, 8192.0);
  EXPECT_DOUBLE_EQ(scaled.tolerance(), 8192.0 * unscaled);
  EXPECT_TRUE(scaled.pass) << joined(scaled.reasons);
  EXPECT_FALSE(judge(rule, numerics_of(DType::f32), with_error(1e-3, 1.0), baseline).pass);
  const Verdict over = judge(rule, numerics_of(DType::f32), with_error(scaled.tolerance() * 1.001, 1.0), baseline, {}, 8192.0);
  ASSERT_FALSE(over.pass);
  EXPECT_NE(over.reasons[0].find("x 8192 for the matmul precision"), std::string::npos) << over.reasons[0];
  // The score-rounding yardstick scales too.
  EXPECT_DOUBLE_EQ(judge(PassRule{2.0, 0.0}, numerics_of(DType::f32), with_error(0, 1.0), baseline, {.out = 1e-6}, 8192.0).tolerance(),
                   2.0 * 8192.0 * 1e-6);

  // The LSE: yardstick and floor.
  ErrorMetrics naive_lse = with_error(0, 1.0);
  naive_lse.has_lse = true;
  naive_lse.lse_max_abs = 1e-7;
  ErrorMetrics measured = with_error(0, 1.0);
  measured.has_lse = true;
  measured.lse_reference_max_abs = 1.0;
  measured.lse_max_abs = 1e-4;
  EXPECT_FALSE(judge(PassRule{2.0, 0.0}, numerics_of(DType::f32), measured, naive_lse).pass);
  EXPECT_TRUE(judge(PassRule{2.0, 0.0}, numerics_of(DType::f32), measured, naive_lse, {}, 8192.0).pass);
  measured.lse_max_abs = 2.0 * 8192.0 * 1e-7 * 1.001;
  EXPECT_FALSE(judge(PassRule{2.0, 0.0}, numerics_of(DType::f32), measured, naive_lse, {}, 8192.0).pass);
  measured.lse_max_abs = 0.5 * 8192.0 * 0x1p-23;  // within the scaled floor alone
  EXPECT_TRUE(judge(PassRule{0.0, 1.0}, numerics_of(DType::f32), measured, naive_lse, {}, 8192.0).pass);
  EXPECT_FALSE(judge(PassRule{0.0, 1.0}, numerics_of(DType::f32), measured, naive_lse).pass);
}

TEST(Judge, RatioIsErrorOverBaseline) {
  const PassRule rule;
  EXPECT_DOUBLE_EQ(judge(rule, numerics_of(DType::f32), with_error(3e-7, 1.0), with_error(2e-7, 1.0)).ratio, 1.5);
  EXPECT_EQ(judge(rule, numerics_of(DType::f32), with_error(0.0, 1.0), with_error(0.0, 1.0)).ratio, 0.0);
  EXPECT_EQ(judge(rule, numerics_of(DType::f32), with_error(1e-9, 1.0), with_error(0.0, 1.0)).ratio, inf);
  EXPECT_EQ(judge(rule, numerics_of(DType::f32), with_error(0.0, 1.0), with_error(1e-7, 1.0)).ratio, 0.0);
}

TEST(Judge, FailsOnAnyNanInfUnwrittenOrPolicyViolationWhateverTheError) {
  const PassRule rule;
  const ErrorMetrics baseline = with_error(1e-6, 1.0);
  struct Case {
    const char* what;
    void (*apply)(ErrorMetrics&);
    const char* reason;
  };
  const std::vector<Case> cases{
      {"nan", [](ErrorMetrics& m) { m.nan = 1; }, "NaN"},
      {"+inf", [](ErrorMetrics& m) { m.pos_inf = 1; }, "Inf"},
      {"-inf", [](ErrorMetrics& m) { m.neg_inf = 2; }, "2 Inf"},
      {"unwritten", [](ErrorMetrics& m) { m.unwritten = 3; }, "3 output elements never written"},
      {"fully masked", [](ErrorMetrics& m) { m.fully_masked_rows = 4, m.fully_masked_violations = 1; },
       "1 of 4 fully masked rows"},
      {"lse violation", [](ErrorMetrics& m) { m.has_lse = true, m.lse_violations = 1; }, "LSE"},
  };
  for (const Case& c : cases) {
    ErrorMetrics m = with_error(0.0, 1.0);  // no error at all in the compared elements
    c.apply(m);
    const Verdict v = judge(rule, numerics_of(DType::f32), m, baseline);
    EXPECT_FALSE(v.pass) << c.what;
    EXPECT_TRUE(contains(v.reasons, c.reason)) << c.what << ": " << joined(v.reasons);
  }
  // Several problems: one reason each.
  ErrorMetrics m = with_error(1.0, 1.0);
  m.nan = 1, m.unwritten = 1;
  const Verdict v = judge(rule, numerics_of(DType::f32), m, baseline);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.reasons.size(), 3u) << joined(v.reasons);
}

TEST(Judge, NanErrorFails) {
  // A NaN max error must not slip through a <= comparison.
  const Verdict v = judge(PassRule{}, numerics_of(DType::f32), with_error(nan_value, 1.0), with_error(1e-6, 1.0));
  EXPECT_FALSE(v.pass);
  EXPECT_TRUE(contains(v.reasons, "max abs error"));
  const Verdict inf_err = judge(PassRule{}, numerics_of(DType::f32), with_error(inf, 1.0), with_error(1e-6, 1.0));
  EXPECT_FALSE(inf_err.pass);
}

TEST(Judge, LseFollowsTheSameRuleInItsOwnPrecision) {
  const PassRule rule;
  ErrorMetrics baseline = with_error(1e-6, 1.0);
  baseline.has_lse = true;
  baseline.lse_max_abs = 1e-6;
  // f16 outputs: the LSE is f32, so the floor is 2 f32 ulps at 4.0 (2^-21 each).
  const double tolerance = 2e-6 + 2 * 0x1p-21;
  ErrorMetrics m = with_error(0.0, 1.0);
  m.has_lse = true;
  m.lse_reference_max_abs = 4.0;
  m.lse_max_abs = tolerance;
  EXPECT_TRUE(judge(rule, numerics_of(DType::f16), m, baseline).pass);
  m.lse_max_abs = tolerance * (1 + 1e-9);
  const Verdict v = judge(rule, numerics_of(DType::f16), m, baseline);
  EXPECT_FALSE(v.pass);
  EXPECT_TRUE(contains(v.reasons, "LSE max abs error")) << joined(v.reasons);
  // Without an LSE the LSE figures are ignored.
  m.has_lse = false;
  EXPECT_TRUE(judge(rule, numerics_of(DType::f16), m, baseline).pass);
}

TEST(MeasureAndJudge, EndToEndOnAHandFilledOutput) {
  const Problem p = tiny(2, 2, DType::f16, {0, 2});
  Oracle o{{0, 1}, {0.0, 0.0, 0.75, -1.25}, {-inf, 0.1}, {1, 0}};
  const ErrorMetrics baseline = measure(p, Mask(p), o.expected(), filled(p, o.out), nullptr, FullyMaskedPolicy::zeros);
  EXPECT_EQ(baseline.max_abs, 0.0);

  // One f16 ulp at 1.25 is 2^-10; two are allowed by the floor (the baseline is exact).
  const Verdict ok = judge(PassRule{}, numerics_of(DType::f16),
                           measure(p, Mask(p), o.expected(), filled(p, {0.0, 0.0, 0.75, -1.25 - 0x1p-9}), nullptr,
                                   FullyMaskedPolicy::zeros),
                           baseline);
  EXPECT_TRUE(ok.pass) << joined(ok.reasons);
  const Verdict bad = judge(PassRule{}, numerics_of(DType::f16),
                            measure(p, Mask(p), o.expected(), filled(p, {0.0, 0.0, 0.75, -1.25 - 3 * 0x1p-10}), nullptr,
                                    FullyMaskedPolicy::zeros),
                            baseline);
  EXPECT_FALSE(bad.pass);
  EXPECT_TRUE(contains(bad.reasons, "max abs error")) << joined(bad.reasons);
  // A NaN in the fully masked row breaks the zeros policy even with no error elsewhere.
  const Verdict masked = judge(PassRule{}, numerics_of(DType::f16),
                               measure(p, Mask(p), o.expected(), filled(p, {nan_value, 0.0, 0.75, -1.25}), nullptr,
                                       FullyMaskedPolicy::zeros),
                               baseline);
  EXPECT_FALSE(masked.pass);
  EXPECT_TRUE(contains(masked.reasons, "fully masked")) << joined(masked.reasons);
}

// What a fully masked row holds is said, so a failure tells NaN from zeros from the mean of V.
TEST(Measure, FullyMaskedRowsAreClassifiedByWhatTheyHold) {
  const Problem p = tiny(5, 2, DType::f32, {0, 0, 0, 0, 2});
  Oracle o{{4}, {1.0, 1.0}, {0.0}, {0}};
  const Tensor out = filled(p, {nan_value, 1.0, inf, 0.0, 0.0, 0.0, 0.25, 0.5, 1.0, 1.0});
  const ErrorMetrics zeros = measure(p, Mask(p), o.expected(), out, nullptr, FullyMaskedPolicy::zeros);
  EXPECT_EQ(zeros.fully_masked_rows, 4);
  EXPECT_EQ(zeros.fully_masked_violations, 3);
  EXPECT_EQ(fully_masked_contents(zeros), "1 hold NaN, 1 hold Inf, 1 hold finite non-zero values");
  const Verdict v = judge(PassRule{}, numerics_of(DType::f32), zeros, with_error(1e-6, 1.0));
  EXPECT_TRUE(contains(v.reasons, "3 of 4 fully masked rows break the declared policy (zeros): 1 hold NaN, 1 hold Inf, 1 hold finite non-zero values"))
      << joined(v.reasons);
  EXPECT_FALSE(contains(v.reasons, "where the reference is finite")) << joined(v.reasons);
  const ErrorMetrics nan = measure(p, Mask(p), o.expected(), out, nullptr, FullyMaskedPolicy::nan);
  EXPECT_EQ(nan.fully_masked_violations, 4);  // a row partly NaN breaks the nan policy too
  EXPECT_EQ(fully_masked_contents(nan), "1 hold Inf, 1 hold zeros, 1 hold finite non-zero values");
}

}  // namespace
}  // namespace attn

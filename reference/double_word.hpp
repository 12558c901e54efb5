#pragma once
// Double-word ("double-double") arithmetic: a value is the unevaluated sum hi + lo of two doubles
// with |lo| <= ulp(hi) / 2. The algorithms and their error bounds are those of M. Joldes,
// J.-M. Muller and V. Popescu, "Tight and rigorous error bounds for basic building blocks of
// double-word arithmetic", ACM TOMS 44(2), 2017, with u = 2^-53:
//   two_sum, fast_two_sum, two_prod  error-free (two_prod: unless a * b underflows or overflows);
//   add (their AccurateDWPlusDW)     relative error <= 3u^2 / (1 - 4u) < 2^-104;
//   mul (their DWTimesFP3)           relative error <= 2u^2 = 2^-105.
// The reference's bound for its f64 pass takes every such operation to err by at most 2^-100
// relative: 16 to 32 times what the theorems give. Near the underflow threshold a product's low
// part rounds; that absolute error (at most 2^-1074 per product) is bounded separately.
//
// The file's translation units are compiled with -ffp-contract=off: a compiler that fused
// a * b - c on its own would break the error-free transformations.
#include <cmath>

namespace attn::detail {

struct DoubleWord {
  double hi = 0;
  double lo = 0;
};

inline DoubleWord two_sum(double a, double b) {
  const double s = a + b;
  const double b_virtual = s - a;
  return {s, (a - (s - b_virtual)) + (b - b_virtual)};
}

// Requires |a| >= |b| (or a = 0), as every call below guarantees.
inline DoubleWord fast_two_sum(double a, double b) {
  const double s = a + b;
  return {s, b - (s - a)};
}

inline DoubleWord two_prod(double a, double b) {
  const double p = a * b;
  return {p, std::fma(a, b, -p)};
}

inline DoubleWord add(DoubleWord x, DoubleWord y) {
  const DoubleWord s = two_sum(x.hi, y.hi);
  const DoubleWord t = two_sum(x.lo, y.lo);
  const DoubleWord v = fast_two_sum(s.hi, s.lo + t.hi);
  return fast_two_sum(v.hi, t.lo + v.lo);
}

inline DoubleWord mul(DoubleWord x, double y) {
  const DoubleWord c = two_prod(x.hi, y);
  return fast_two_sum(c.hi, std::fma(x.lo, y, c.lo));
}

}  // namespace attn::detail

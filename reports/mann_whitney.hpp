#pragma once
// The Mann-Whitney U test, one-sided: is sample x (the new timings) stochastically greater than
// sample y (the baseline's), i.e. slower? Follows scipy.stats.mannwhitneyu(x, y,
// alternative="greater", method="auto", use_continuity=True): the exact null distribution when
// both samples have at most 8 values and there are no ties, else the normal approximation with
// the tie correction and a continuity correction of 0.5.
#include <span>

namespace attn {

struct MannWhitney {
  double u = 0;        // U of x: pairs (x_i, y_j) with x_i > y_j, ties counting 1/2
  double p_value = 1;  // one-sided P(U >= u) under the null hypothesis (identical distributions)
  bool exact = false;  // exact distribution (true) or normal approximation (false)
};

// Throws std::invalid_argument when a sample is empty or holds a NaN.
MannWhitney mann_whitney_greater(std::span<const double> x, std::span<const double> y);

// The exact upper tail P(U >= u) for samples of n1 and n2 values without ties.
double mann_whitney_exact_sf(int n1, int n2, double u);

}  // namespace attn

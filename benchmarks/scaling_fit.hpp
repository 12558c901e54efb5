#pragma once
// The exponent of a cost that grows as a power of n: least squares on log t = a + p log n.
// Google Benchmark's own complexity fit assumes the exponent (oNSquared) and reports a
// coefficient and RMS; this one measures the exponent, so O(n^2) is checked, not assumed.
#include <cstddef>
#include <optional>
#include <span>

namespace attn::bench {

struct PowerLawFit {
  double exponent = 0;     // p in t = c * n^p
  double coefficient = 0;  // c, in the unit of t
  double r_squared = 0;    // of the log-log regression; 1 when two points
  std::size_t points = 0;
};

// Uses the points with n >= min_n (n > 0 and t > 0 required of each). Empty when fewer than
// two distinct n remain.
std::optional<PowerLawFit> fit_power_law(std::span<const double> n, std::span<const double> t, double min_n = 0);

}  // namespace attn::bench

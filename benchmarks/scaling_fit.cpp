#include "benchmarks/scaling_fit.hpp"

#include <cmath>
#include <stdexcept>
#include <vector>

namespace attn::bench {

std::optional<PowerLawFit> fit_power_law(std::span<const double> n, std::span<const double> t, double min_n) {
  if (n.size() != t.size()) throw std::invalid_argument("fit_power_law: n and t differ in length");
  std::vector<double> x, y;
  for (std::size_t i = 0; i < n.size(); ++i) {
    if (!(n[i] >= min_n)) continue;
    if (!(n[i] > 0) || !(t[i] > 0) || !std::isfinite(n[i]) || !std::isfinite(t[i]))
      throw std::invalid_argument("fit_power_law: n and t must be positive and finite");
    x.push_back(std::log(n[i]));
    y.push_back(std::log(t[i]));
  }
  const double count = static_cast<double>(x.size());
  if (x.size() < 2) return std::nullopt;
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= count;
  my /= count;
  double sxx = 0, sxy = 0, syy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx == 0) return std::nullopt;  // every n the same
  PowerLawFit fit;
  fit.exponent = sxy / sxx;
  fit.coefficient = std::exp(my - fit.exponent * mx);
  double ss_res = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double r = y[i] - (my + fit.exponent * (x[i] - mx));
    ss_res += r * r;
  }
  fit.r_squared = syy == 0 ? 1.0 : 1.0 - ss_res / syy;
  fit.points = x.size();
  return fit;
}

}  // namespace attn::bench

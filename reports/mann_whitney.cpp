#include "reports/mann_whitney.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace attn {
namespace {

// Midranks (1-based) of the pooled sample, and the tie term sum(t^3 - t) over groups of ties.
std::vector<double> midranks(const std::vector<double>& pooled, double& tie_term) {
  std::vector<std::size_t> order(pooled.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return pooled[a] < pooled[b]; });
  std::vector<double> ranks(pooled.size());
  tie_term = 0;
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j + 1 < order.size() && pooled[order[j + 1]] == pooled[order[i]]) ++j;
    const double rank = (double(i) + double(j)) / 2 + 1;
    for (std::size_t k = i; k <= j; ++k) ranks[order[k]] = rank;
    const double t = double(j - i + 1);
    tie_term += t * t * t - t;
    i = j + 1;
  }
  return ranks;
}

}  // namespace

double mann_whitney_exact_sf(int n1, int n2, double u) {
  if (n1 < 1 || n2 < 1) throw std::invalid_argument("mann_whitney_exact_sf: empty sample");
  // f[a][b][k]: orderings of a x's and b y's with U = k. The largest value is either an x, which
  // beats all b y's (f[a - 1][b][k - b]), or a y, which adds nothing (f[a][b - 1][k]).
  const int max_u = n1 * n2;
  std::vector<std::vector<std::vector<double>>> f(std::size_t(n1) + 1, std::vector<std::vector<double>>(std::size_t(n2) + 1));
  for (int a = 0; a <= n1; ++a)
    for (int b = 0; b <= n2; ++b) {
      auto& cell = f[std::size_t(a)][std::size_t(b)];
      cell.assign(std::size_t(a * b) + 1, 0.0);
      if (a == 0 || b == 0) {
        cell[0] = 1;
        continue;
      }
      const auto& without_x = f[std::size_t(a - 1)][std::size_t(b)];
      const auto& without_y = f[std::size_t(a)][std::size_t(b - 1)];
      for (std::size_t k = 0; k < without_x.size(); ++k) cell[k + std::size_t(b)] += without_x[k];
      for (std::size_t k = 0; k < without_y.size(); ++k) cell[k] += without_y[k];
    }
  const auto& counts = f[std::size_t(n1)][std::size_t(n2)];
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  const int from = std::max(0, int(std::ceil(u - 1e-9)));
  double tail = 0;
  for (int k = from; k <= max_u; ++k) tail += counts[std::size_t(k)];
  return std::min(1.0, tail / total);
}

MannWhitney mann_whitney_greater(std::span<const double> x, std::span<const double> y) {
  if (x.empty() || y.empty()) throw std::invalid_argument("Mann-Whitney U: a sample is empty");
  std::vector<double> pooled(x.begin(), x.end());
  pooled.insert(pooled.end(), y.begin(), y.end());
  for (double v : pooled)
    if (std::isnan(v)) throw std::invalid_argument("Mann-Whitney U: a sample holds NaN");
  double tie_term = 0;
  const std::vector<double> ranks = midranks(pooled, tie_term);
  const double n1 = double(x.size()), n2 = double(y.size()), n = n1 + n2;
  double rank_sum_x = 0;
  for (std::size_t i = 0; i < x.size(); ++i) rank_sum_x += ranks[i];
  MannWhitney result;
  result.u = rank_sum_x - n1 * (n1 + 1) / 2;
  if (x.size() <= 8 && y.size() <= 8 && tie_term == 0) {
    result.exact = true;
    result.p_value = mann_whitney_exact_sf(int(x.size()), int(y.size()), result.u);
    return result;
  }
  const double mu = n1 * n2 / 2;
  const double s = std::sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))));
  if (!(s > 0)) {  // every value equal: no evidence either way
    result.p_value = 1;
    return result;
  }
  const double z = (result.u - mu - 0.5) / s;
  result.p_value = 0.5 * std::erfc(z / std::sqrt(2.0));
  return result;
}

}  // namespace attn

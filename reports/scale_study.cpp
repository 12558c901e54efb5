#include "reports/scale_study.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/inputs.hpp"
#include "core/score_pipeline.hpp"

namespace attn {
namespace {

struct SoftmaxStats {
  double entropy = 0, max_weight = 0;
};

// Softmax of one row of scores (max subtracted), its entropy in nats and its largest weight.
template <class T>
SoftmaxStats softmax_stats(const std::vector<T>& scores) {
  const T m = *std::max_element(scores.begin(), scores.end());
  T sum = 0;
  std::vector<T> w(scores.size());
  for (std::size_t j = 0; j < scores.size(); ++j) sum += (w[j] = std::exp(scores[j] - m));
  SoftmaxStats s;
  for (T& x : w) {
    x /= sum;
    if (x > 0) s.entropy -= static_cast<double>(x) * std::log(static_cast<double>(x));
    s.max_weight = std::max(s.max_weight, static_cast<double>(x));
  }
  return s;
}

double variance(const std::vector<double>& x) {
  double mean = 0, m2 = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  for (double v : x) m2 += (v - mean) * (v - mean);
  return m2 / static_cast<double>(x.size());
}

}  // namespace

ScaleStudy scale_study(const std::vector<std::int64_t>& head_dims, std::int64_t n_q, std::int64_t n_k, std::uint64_t seed) {
  ScaleStudy study{n_q, n_k, seed, std::log(static_cast<double>(n_k)), {}};
  for (std::int64_t d : head_dims) {
    Problem p;
    p.batch = p.h_q = p.h_kv = 1;
    p.n_q = n_q;
    p.n_k = n_k;
    p.d_k = d;
    p.d_v = 1;
    p.dtype = DType::f32;
    p.regime = Regime::diffuse;  // with the default scale: Q and K entries of variance 1
    p.seed = seed;
    const CaseInputs in = generate_inputs(p);
    const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(d));
    std::vector<double> raw_all, scaled_all;
    raw_all.reserve(static_cast<std::size_t>(n_q * n_k));
    scaled_all.reserve(static_cast<std::size_t>(n_q * n_k));
    ScaleStudyRow row;
    row.d_k = d;
    std::vector<float> raw(static_cast<std::size_t>(n_k)), scaled(static_cast<std::size_t>(n_k));
    std::vector<float> q(static_cast<std::size_t>(n_q * d)), k(static_cast<std::size_t>(n_k * d));  // [n, d], as generated
    for (std::size_t e = 0; e < q.size(); ++e) q[e] = static_cast<float>(in.q.get(static_cast<std::int64_t>(e)));
    for (std::size_t e = 0; e < k.size(); ++e) k[e] = static_cast<float>(in.k.get(static_cast<std::int64_t>(e)));
    for (std::int64_t i = 0; i < n_q; ++i) {
      for (std::int64_t j = 0; j < n_k; ++j) {
        float dot = 0;
        for (std::int64_t c = 0; c < d; ++c) dot += q[static_cast<std::size_t>(i * d + c)] * k[static_cast<std::size_t>(j * d + c)];
        raw[static_cast<std::size_t>(j)] = dot;
        scaled[static_cast<std::size_t>(j)] = dot * inv_sqrt_d;
        raw_all.push_back(dot);
        scaled_all.push_back(dot * inv_sqrt_d);
      }
      const SoftmaxStats r = softmax_stats(raw), s = softmax_stats(scaled);
      row.raw_entropy += r.entropy, row.raw_max_weight += r.max_weight;
      row.scaled_entropy += s.entropy, row.scaled_max_weight += s.max_weight;
    }
    const double rows = static_cast<double>(n_q);
    row.raw_entropy /= rows, row.raw_max_weight /= rows, row.scaled_entropy /= rows, row.scaled_max_weight /= rows;
    row.raw_variance = variance(raw_all);
    row.scaled_variance = variance(scaled_all);
    study.rows.push_back(row);
  }
  return study;
}

CaseRegime case_regime(const Problem& p, std::int64_t max_rows) {
  CaseRegime out;
  out.repro = p.repro();
  out.regime = std::string(to_string(p.regime));
  const CaseInputs in = generate_inputs(p);
  const ScorePipeline pipeline(p, in.mask);
  const std::int64_t total_rows = p.batch * p.h_q * p.n_q;
  const std::int64_t rows = std::min(max_rows, total_rows);
  std::vector<double> all;
  double entropy_fraction = 0, max_weight = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    // Rows spread evenly over (batch, head, query).
    const std::int64_t flat = rows > 1 ? r * (total_rows - 1) / (rows - 1) : 0;
    const std::int64_t i = flat % p.n_q, h = (flat / p.n_q) % p.h_q, b = flat / (p.n_q * p.h_q);
    const std::int64_t kh = p.kv_head(h);
    std::vector<double> scores;
    for (std::int64_t j = 0; j < p.n_k; ++j) {
      if (!in.mask.visible(b, h, i, j)) continue;
      double dot = 0;
      for (std::int64_t c = 0; c < p.d_k; ++c) dot += in.q.get(in.q.offset(b, h, i, c)) * in.k.get(in.k.offset(b, kh, j, c));
      scores.push_back(pipeline.score<double>(dot, b, h, i, j));
    }
    if (scores.empty()) continue;
    ++out.rows;
    const SoftmaxStats s = softmax_stats(scores);
    entropy_fraction += scores.size() > 1 ? s.entropy / std::log(static_cast<double>(scores.size())) : 1.0;
    max_weight += s.max_weight;
    for (double x : scores) {
      all.push_back(x);
      out.max_abs_score = std::max(out.max_abs_score, std::fabs(x));
    }
  }
  if (out.rows > 0) {
    out.entropy_fraction = entropy_fraction / static_cast<double>(out.rows);
    out.max_weight = max_weight / static_cast<double>(out.rows);
    // Relative to the largest magnitude, so near-overflow scores do not overflow the variance.
    const double unit = out.max_abs_score > 0 ? out.max_abs_score : 1.0;
    for (double& x : all) x /= unit;
    out.score_std = unit * std::sqrt(variance(all));
  }
  return out;
}

}  // namespace attn

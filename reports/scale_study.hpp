#pragma once
// Why attention scales scores by 1/sqrt(d_k), shown with the harness's own code: unit-variance
// Q and K drawn by core's seeded generation (the diffuse regime with the default scale draws
// exactly that), raw scores q.k and scaled scores q.k/sqrt(d_k) computed in float, and the
// softmax of each: the variance of the scores, the mean entropy of a row's weights and the mean
// largest weight. Raw scores have variance d_k, so for large d_k the softmax collapses onto one
// key (entropy near 0, largest weight near 1: vanishing gradients); scaled scores keep variance 1
// at every d_k. Also: the regime each accuracy case was measured in, in the same terms.
#include <cstdint>
#include <string>
#include <vector>

#include "core/problem.hpp"

namespace attn {

struct ScaleStudyRow {
  std::int64_t d_k = 0;
  double raw_variance = 0, scaled_variance = 0;        // of the scores over every (query, key)
  double raw_entropy = 0, scaled_entropy = 0;          // mean row entropy of the softmax, nats
  double raw_max_weight = 0, scaled_max_weight = 0;    // mean largest weight of a row
};

struct ScaleStudy {
  std::int64_t n_q = 0, n_k = 0;
  std::uint64_t seed = 0;
  double uniform_entropy = 0;  // ln(n_k): the entropy of uniform weights
  std::vector<ScaleStudyRow> rows;
};

// d_k in {4, 16, 64, 256, 512} by default; deterministic (fixed seed), a few milliseconds.
ScaleStudy scale_study(const std::vector<std::int64_t>& head_dims = {4, 16, 64, 256, 512}, std::int64_t n_q = 256,
                       std::int64_t n_k = 256, std::uint64_t seed = 20240521);

// The scores an accuracy case was measured on: from its own inputs (regenerated from its repro
// string), over up to `max_rows` rows spread across batches, heads and queries, with its mask,
// bias and scale.
struct CaseRegime {
  std::string repro;
  std::string regime;
  std::int64_t rows = 0;           // rows sampled that see at least one key
  double score_std = 0;            // standard deviation of the scaled (and biased) visible scores
  double max_abs_score = 0;
  double entropy_fraction = 0;     // mean row entropy / ln(visible keys): 1 = uniform weights
  double max_weight = 0;           // mean largest weight
};
CaseRegime case_regime(const Problem& problem, std::int64_t max_rows = 16);

}  // namespace attn

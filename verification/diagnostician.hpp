#pragma once
// Inside the diagnosis (diagnosis.hpp): the Diagnostician, which chooses the rows to compare,
// turns each hypothesis into a prediction on them and judges the failing output against it. Its
// hypotheses are defined by family in diagnosis_scale_and_mask.cpp, diagnosis_layout.cpp,
// diagnosis_softmax.cpp and diagnosis.cpp (the run, the outputs' own evidence). Private to
// verification/.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "core/mask.hpp"
#include "core/precision.hpp"
#include "core/rng.hpp"
#include "reference/reference.hpp"
#include <string>
#include <vector>

#include "verification/diagnosis.hpp"
#include "verification/mistakes.hpp"
#include "verification/naive_row.hpp"

namespace attn::diagnosis_detail {

using M = MistakeId;

// What a hypothesis predicts on the diagnosis rows.
struct Prediction {
  std::vector<double> out;                // rows * d_v, in the output dtype; zeros for fully masked rows
  std::vector<std::uint8_t> nonfinite;    // rows: the hypothesis predicts NaN/Inf there (not compared)
  std::vector<std::uint8_t> uncompared;   // rows: the hypothesis predicts nothing there; empty: none
  std::vector<double> slack;              // rows * d_v: the prediction is an interval of this half-width; empty: a point
  bool failure_only_where_uncompared = false;  // the hypothesis is that the failure lies only in the uncompared rows
  double naive_max_abs = 0;               // the naive algorithm's error under the hypothesis
  ScoreRounding score_rounding;
};

struct Trial {
  bool pass = false;
  double max_abs = 0, tolerance = 0;
};

class Diagnostician {
 public:
  Diagnostician(const Problem& p, const CaseInputs& in, const Tensor& out, const DiagnosisJudging& judging,
                const DiagnosisOptions& options)
      : p_(p), in_(in), out_(out), judging_(judging), options_(options) {
    reference_.threads = options.threads;
    rows_ = choose_rows();
  }

  Diagnosis run();

 private:
  // ---- rows ----
  bool row_shows_failure(std::int64_t row) const {
    const auto [b, h, i] = split(p_, row);
    const bool fully_masked = in_.mask.row_fully_masked(b, h, i);
    for (std::int64_t c = 0; c < p_.d_v; ++c) {
      const std::int64_t e = row * p_.d_v + c;
      if (out_.is_poisoned(e)) continue;
      const double x = out_.get(e);
      if (fully_masked ? (judging_.policy == FullyMaskedPolicy::zeros ? x != 0.0 : judging_.policy == FullyMaskedPolicy::nan && !std::isnan(x))
                       : !std::isfinite(x))
        return true;
    }
    return false;
  }

  // Under the any policy a fully masked row says nothing, whatever it holds.
  bool unjudged(std::int64_t row) const {
    if (judging_.policy != FullyMaskedPolicy::any) return false;
    const auto [b, h, i] = split(p_, row);
    return in_.mask.row_fully_masked(b, h, i);
  }

  // Every row when the work fits; else a seeded sample. Always the rows where the failure shows:
  // the worst elements, and (up to 8, spread) rows with NaN/Inf or fully masked rows off policy.
  Rows choose_rows() const {
    const std::int64_t total = p_.rows();
    const double per_row = std::max(1.0, double(p_.n_k) * double(p_.d_k + p_.d_v));
    const std::int64_t wanted = std::max(options_.min_rows, static_cast<std::int64_t>(options_.max_work / per_row));
    std::set<std::int64_t> chosen;
    if (wanted >= total) {
      for (std::int64_t r = 0; r < total; ++r) chosen.insert(r);
      return {chosen.begin(), chosen.end()};
    }
    for (const std::int64_t index : {judging_.observed.max_abs_index, judging_.observed.max_ulps_index, judging_.observed.max_rel_index})
      if (index >= 0) chosen.insert(index / p_.d_v);
    Rows evidence;
    for (std::int64_t r = 0; r < total; ++r)
      if (row_shows_failure(r)) evidence.push_back(r);
    const std::size_t step = std::max<std::size_t>(1, evidence.size() / 8);
    for (std::size_t k = 0; k < evidence.size(); k += step) chosen.insert(evidence[k]);
    for (const std::int64_t r : {std::int64_t(0), total - 1, p_.n_q - 1, total - p_.n_q}) chosen.insert(r);
    Rng rng(p_.seed, stream_row_sample, 1);
    while (std::int64_t(chosen.size()) < wanted) chosen.insert(static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(total))));
    return {chosen.begin(), chosen.end()};
  }

  // ---- predictions ----
  template <class Acc>
  double naive_error(const Problem& hp, const CaseInputs& hin, const Rows& src, const RowRule& rule, const std::vector<double>& want,
                     const std::vector<std::uint8_t>& skip) const {
    double worst = 0;
    std::vector<Acc> o;
    const auto d_v = static_cast<std::size_t>(p_.d_v);
    for (std::size_t r = 0; r < src.size(); ++r) {
      if (skip[r]) continue;
      if (!row_under<Acc>(hp, hin, src[r], rule, o)) continue;
      for (std::size_t c = 0; c < d_v; ++c) {
        const double got = round_to(p_.dtype_of(Role::o), static_cast<double>(o[c]));
        const double err = std::fabs(got - want[r * d_v + c]);
        if (std::isfinite(err)) worst = std::max(worst, err);  // a yardstick that broke says nothing
      }
    }
    return worst;
  }

  double naive_error_in_working_precision(const Problem& hp, const CaseInputs& hin, const Rows& src, const RowRule& rule,
                                          const std::vector<double>& want, const std::vector<std::uint8_t>& skip) const {
    return with_working_type(p_.numerics(), [&]<class T>(T) { return naive_error<T>(hp, hin, src, rule, want, skip); });
  }

  // The reference on a changed problem and/or inputs, at the source rows of the diagnosis rows
  // (the same rows, except for permutation hypotheses).
  Prediction by_reference(const Problem& hp, const CaseInputs& hin, const Rows& src) const {
    const ReferenceResult ref = compute_reference_at(hp, hin, src, reference_);
    Prediction pr;
    pr.out = ref.out;
    pr.nonfinite.assign(src.size(), 0);
    for (std::size_t r = 0; r < src.size(); ++r)
      if (ref.fully_masked[r] && judging_.policy == FullyMaskedPolicy::nan) pr.nonfinite[r] = 1;
    pr.score_rounding = ref.score_rounding;
    pr.naive_max_abs = naive_error_in_working_precision(hp, hin, src, RowRule{}, pr.out, ref.fully_masked);
    return pr;
  }
  Prediction by_reference(const Problem& hp, const CaseInputs& hin) const { return by_reference(hp, hin, rows_); }

  // A row rule whose effect is the working precision's own (underflow of exp(s - m) below a
  // finite initial max): computed in that precision, in cpu_naive's order; the yardstick is the
  // case's (the prediction is the naive algorithm under the hypothesis).
  Prediction by_row_rule_in_working_precision(const RowRule& rule) const {
    return with_working_type(p_.numerics(), [&]<class T>(T) { return by_row_rule_in<T>(rule); });
  }
  template <class T>
  Prediction by_row_rule_in(const RowRule& rule) const {
    Prediction pr;
    const auto d_v = static_cast<std::size_t>(p_.d_v);
    pr.out.assign(rows_.size() * d_v, 0.0);
    pr.nonfinite.assign(rows_.size(), 0);
    std::vector<T> o;
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      if (!row_under<T>(p_, in_, rows_[r], rule, o)) {
        pr.nonfinite[r] = judging_.policy == FullyMaskedPolicy::nan;
        continue;
      }
      for (std::size_t c = 0; c < d_v; ++c) {
        pr.out[r * d_v + c] = round_to(p_.dtype_of(Role::o), static_cast<double>(o[c]));
        if (!std::isfinite(o[c])) pr.nonfinite[r] = 1;
      }
    }
    return pr;
  }

  // A row rule the reference cannot express, in long double on the case's own problem.
  Prediction by_row_rule(const RowRule& rule) const {
    Prediction pr;
    const auto d_v = static_cast<std::size_t>(p_.d_v);
    pr.out.assign(rows_.size() * d_v, 0.0);
    pr.nonfinite.assign(rows_.size(), 0);
    std::vector<std::uint8_t> skip(rows_.size(), 0);
    std::vector<long double> o;
    std::vector<double> working;
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      if (!row_under<long double>(p_, in_, rows_[r], rule, o)) {
        skip[r] = 1;
        pr.nonfinite[r] = judging_.policy == FullyMaskedPolicy::nan;
        continue;
      }
      // Overflow and underflow are decided by the working precision (exp(s) without the max
      // overflows in float at s > 88.7, long before long double does).
      if (!rule.subtract_max && !working_row_finite(rows_[r], rule)) {
        skip[r] = pr.nonfinite[r] = 1;
        continue;
      }
      for (std::size_t c = 0; c < d_v; ++c) pr.out[r * d_v + c] = round_to(p_.dtype_of(Role::o), static_cast<double>(o[c]));
    }
    pr.naive_max_abs = naive_error_in_working_precision(p_, in_, rows_, rule, pr.out, skip);
    return pr;
  }

  bool working_row_finite(std::int64_t row, const RowRule& rule) const {
    auto finite = [](const auto& v) { return std::all_of(v.begin(), v.end(), [](auto x) { return std::isfinite(x); }); };
    if (working_dtype(p_.numerics()) == DType::f64) {
      std::vector<double> o;
      return row_under<double>(p_, in_, row, rule, o) && finite(o);
    }
    std::vector<float> o;
    return row_under<float>(p_, in_, row, rule, o) && finite(o);
  }

  // An output against a prediction, with the case's pass rule: the yardstick is the larger of the
  // case's naive error and the naive algorithm's under the hypothesis.
  Trial judge_prediction(const Prediction& pr, const Tensor& out) const {
    const auto d_v = static_cast<std::size_t>(p_.d_v);
    std::vector<std::uint8_t> skip = pr.nonfinite;
    std::size_t compared = 0;
    for (std::size_t r = 0; r < skip.size(); ++r) {
      if (!pr.uncompared.empty()) skip[r] |= pr.uncompared[r];
      if (unjudged(rows_[r])) skip[r] = 1;
      compared += !skip[r];
    }
    if (compared == 0 && std::find(pr.nonfinite.begin(), pr.nonfinite.end(), std::uint8_t{1}) == pr.nonfinite.end()) return {};
    // A prediction of some rows only must cover a row where the failure shows, else it would
    // "match" by leaving out every row it cannot explain.
    if (!pr.uncompared.empty() && !failing_.empty() && !pr.failure_only_where_uncompared) {
      bool covers_failure = false;
      for (std::size_t r = 0; r < skip.size(); ++r) covers_failure |= !pr.uncompared[r] && failing_[r];
      if (!covers_failure) return {};
    }
    // An interval prediction is judged at its point nearest the output.
    std::vector<double> want = pr.out;
    if (!pr.slack.empty())
      for (std::size_t r = 0; r < rows_.size(); ++r)
        for (std::size_t c = 0; c < d_v; ++c) {
          const double got = out.get(rows_[r] * p_.d_v + std::int64_t(c));
          auto& w = want[r * d_v + c];
          if (std::isfinite(got)) w += std::clamp(got - w, -pr.slack[r * d_v + c], pr.slack[r * d_v + c]);
        }
    const Expected expected{rows_, want, {}, skip};
    ErrorMetrics m = measure(p_, in_.mask, expected, out, nullptr, judging_.policy);
    // The census judged the whole output against the true mask; under a hypothesis only the
    // compared rows speak (a non-finite value there is an infinite error), and a row predicted
    // non-finite must be non-finite in every element.
    m.nan = m.pos_inf = m.neg_inf = m.fully_masked_nan = m.fully_masked_inf = 0;
    m.fully_masked_violations = 0;
    bool nonfinite_as_predicted = true;
    for (std::size_t r = 0; r < rows_.size(); ++r)
      if (pr.nonfinite[r] && !unjudged(rows_[r]))
        for (std::size_t c = 0; c < d_v; ++c) nonfinite_as_predicted &= !std::isfinite(out.get(rows_[r] * p_.d_v + std::int64_t(c)));
    ErrorMetrics yardstick = judging_.baseline;
    yardstick.max_abs = std::max(yardstick.max_abs, pr.naive_max_abs);
    const ScoreRounding rounding{std::max(judging_.score_rounding.out, pr.score_rounding.out),
                                 std::max(judging_.score_rounding.lse, pr.score_rounding.lse)};
    const Verdict v = judge(judging_.rule, p_.numerics(), m, yardstick, rounding, judging_.precision_scale);
    return {v.pass && nonfinite_as_predicted, m.max_abs, v.tolerance()};
  }
  // The failing output against a prediction; a nondeterministic implementation's second run too.
  Trial judge_prediction(const Prediction& pr) const {
    Trial t = judge_prediction(pr, out_);
    if (t.pass && runs_differ_) t.pass = judge_prediction(pr, *judging_.rerun).pass;
    return t;
  }

  // Records the hypothesis as tried, and as matched when the output passes against it.
  bool consider(MistakeId id, const std::string& explanation, const Prediction& pr) {
    tried(id);
    const Trial t = judge_prediction(pr);
    if (t.pass) match(id, explanation, t);
    return t.pass;
  }
  void match(MistakeId id, const std::string& explanation, const Trial& t) {
    diagnosis_.matches.push_back({std::string(name_of(id)), explanation, t.max_abs, t.tolerance});
  }
  void tried(MistakeId id) {
    const std::string name(name_of(id));
    if (std::find(diagnosis_.tested.begin(), diagnosis_.tested.end(), name) == diagnosis_.tested.end()) diagnosis_.tested.push_back(name);
  }
  bool matched(MistakeId id) const {
    return std::any_of(diagnosis_.matches.begin(), diagnosis_.matches.end(), [&](const DiagnosisMatch& m) { return m.hypothesis == name_of(id); });
  }

  // The case's own boolean mask and bias (drawn or given) under hp's window and padding.
  CaseInputs with_mask_of(const Problem& hp) const { return CaseInputs{in_.q, in_.k, in_.v, in_.mask.with_visibility_of(hp)}; }

  // ---- the hypotheses ----
  void scale_hypotheses();
  void fit_scale();
  void softcap_hypotheses();
  void alibi_hypotheses();
  void sink_hypotheses();
  void dropout_hypotheses();
  void mask_hypotheses();
  void lse_hypotheses();
  void masked_fill_hypotheses();
  void key_layout_hypotheses();
  void head_mapping_hypotheses();
  void softmax_hypotheses();
  void permutation_hypotheses();
  void query_axis_hypothesis();
  void weights_rounding_hypotheses();
  void row_max_init_hypotheses();
  void kv_offset_hypothesis();
  void layout_hypothesis();
  void masked_nonfinite_hypothesis();
  void zero_output_hypothesis();
  void fully_masked_policy_hypothesis();
  void isolated_rows_hypothesis(const Trial& against_truth);
  void check_rerun();
  void describe_fully_masked_rows();
  Prediction padded_to(const std::vector<std::int64_t>& valid_len) const;
  bool try_scale(double scale, MistakeId id, const std::string& explanation) {
    Problem hp = p_;
    hp.scale = scale;
    return consider(id, explanation, by_reference(hp, in_));
  }

  const Problem& p_;
  const CaseInputs& in_;
  const Tensor& out_;
  const DiagnosisJudging& judging_;
  const DiagnosisOptions& options_;
  ReferenceOptions reference_;
  Rows rows_;
  Diagnosis diagnosis_;
  bool runs_differ_ = false;  // the rerun's bits differ from the failing output's
  std::vector<std::uint8_t> failing_;  // per diagnosis row: the output fails against the reference there
};

// How far an output row whose weights were rounded (rule.weights_rounded_to) may be from the
// prediction, per column; nothing where the rounding cannot be told (diagnosis_softmax.cpp).
std::optional<std::vector<long double>> rounding_ambiguity(const Problem& p, const CaseInputs& in, std::int64_t row, const RowRule& rule);

}  // namespace attn::diagnosis_detail

#include "properties/diagnosis.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "core/mask.hpp"
#include "core/rng.hpp"
#include "reference/reference.hpp"

namespace attn {
namespace {

using Rows = std::vector<std::int64_t>;

struct RowIndex {
  std::int64_t b, h, i;
};
RowIndex split(const Problem& p, std::int64_t row) { return {row / (p.n_q * p.h_q), (row / p.n_q) % p.h_q, row % p.n_q}; }
std::int64_t join(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i) { return (b * p.h_q + h) * p.n_q + i; }

// A hypothesis the reference cannot express (it excludes masked keys exactly, always divides by
// the row sum and always subtracts the max) changes one step of the row computation.
struct RowRule {
  std::optional<long double> fill = std::nullopt;  // masked keys get this score instead of being excluded
  bool subtract_max = true;
  bool normalise = true;
  std::optional<long double> max_init = std::nullopt;  // the row max starts here instead of -inf
  bool zero_sum_gives_zeros = false;        // a row whose exps all underflow outputs zeros (a guard), not 0/0
  std::optional<DType> weights_rounded_to = std::nullopt;  // the weights rounded to this dtype before P V
  bool rounded_before_division = false;     // exp(s - max) rounded and P V divided by the (unrounded) sum after
};

// One output row under a rule, in T: cpu_naive's order (sequential dot product, times the scale,
// plus the bias; row max; exp; sum; divide; P V in key order). In long double (64-bit significand:
// 2^-40 of f32's unit roundoff, 2^-11 of f64's) it is the prediction of a hypothesis the reference
// cannot express; in the working precision it is the naive yardstick under that hypothesis.
// Returns false for a row that has no visible key and no fill (a fully masked row).
template <class T>
bool row_under(const Problem& p, const CaseInputs& in, std::int64_t row, const RowRule& rule, std::vector<T>& o) {
  const auto [b, h, i] = split(p, row);
  const std::int64_t g = p.kv_head(h);
  const T scale = static_cast<T>(p.effective_scale());
  const T excluded = -std::numeric_limits<T>::infinity();
  std::vector<T> s(static_cast<std::size_t>(p.n_k));
  const std::int64_t q0 = in.q.offset(b, h, i, 0);
  for (std::int64_t j = 0; j < p.n_k; ++j) {
    auto& sj = s[static_cast<std::size_t>(j)];
    if (!in.mask.visible(b, h, i, j)) {
      sj = rule.fill ? static_cast<T>(*rule.fill) : excluded;
      continue;
    }
    const std::int64_t k0 = in.k.offset(b, g, j, 0);
    T dot = 0;
    for (std::int64_t t = 0; t < p.d_k; ++t) dot += static_cast<T>(in.q.get(q0 + t)) * static_cast<T>(in.k.get(k0 + t));
    sj = dot * scale + static_cast<T>(in.mask.bias(b, h, i, j));
  }
  o.assign(static_cast<std::size_t>(p.d_v), T(0));
  T m = *std::max_element(s.begin(), s.end());
  if (rule.max_init) m = std::max(m, static_cast<T>(*rule.max_init));
  if (m == excluded) return false;
  T sum = 0;
  for (auto& e : s) {
    e = rule.subtract_max ? std::exp(e - m) : std::exp(e);
    sum += e;
  }
  if (sum == T(0) && rule.zero_sum_gives_zeros) return true;
  auto rounded = [&](T w) { return rule.weights_rounded_to ? static_cast<T>(round_to(*rule.weights_rounded_to, static_cast<double>(w))) : w; };
  const bool divide_after = rule.normalise && rule.rounded_before_division;
  for (std::int64_t j = 0; j < p.n_k; ++j) {
    const T e = s[static_cast<std::size_t>(j)];
    const T w = rounded(rule.normalise && !divide_after ? e / sum : e);
    if (w == T(0)) continue;  // excluded keys: their V (NaN included) must not reach the row
    const std::int64_t v0 = in.v.offset(b, g, j, 0);
    for (std::int64_t c = 0; c < p.d_v; ++c) o[static_cast<std::size_t>(c)] += w * static_cast<T>(in.v.get(v0 + c));
  }
  if (divide_after)
    for (auto& x : o) x /= sum;
  return true;
}

// How far an output row whose weights were rounded (rule.weights_rounded_to) may be from the
// prediction, per column: a weight that the working precision computes within its own error of a
// rounding boundary may round to either neighbour (each kernel's order of operations decides),
// which moves the output by one ulp of the rounded weight times |v|. The error of a weight in the
// working precision is bounded by (d_k |q||k| scale + n_k + 4) units of its roundoff, doubled for
// other orders. Where that bound exceeds 2^-10 (a quarter of bf16's unit roundoff: scores near
// the overflow), the rounding cannot be told: nothing is returned, and the row is not compared.
std::optional<std::vector<long double>> rounding_ambiguity(const Problem& p, const CaseInputs& in, std::int64_t row, const RowRule& rule) {
  const auto [b, h, i] = split(p, row);
  const std::int64_t g = p.kv_head(h);
  std::vector<long double> slack(static_cast<std::size_t>(p.d_v), 0.0L);
  std::vector<long double> s(static_cast<std::size_t>(p.n_k)), spread(static_cast<std::size_t>(p.n_k), 0.0L);
  const long double scale = p.effective_scale();
  long double m = -std::numeric_limits<long double>::infinity();
  for (std::int64_t j = 0; j < p.n_k; ++j) {
    auto& sj = s[static_cast<std::size_t>(j)];
    if (!in.mask.visible(b, h, i, j)) {
      sj = -std::numeric_limits<long double>::infinity();
      continue;
    }
    long double dot = 0, magnitude = 0;
    for (std::int64_t t = 0; t < p.d_k; ++t) {
      const long double x = static_cast<long double>(in.q.get(in.q.offset(b, h, i, t))) * in.k.get(in.k.offset(b, g, j, t));
      dot += x, magnitude += std::fabs(x);
    }
    sj = dot * scale + in.mask.bias(b, h, i, j);
    spread[static_cast<std::size_t>(j)] = magnitude * scale;
    m = std::max(m, sj);
  }
  if (m == -std::numeric_limits<long double>::infinity()) return slack;
  long double sum = 0;
  for (auto& e : s) sum += (e = std::exp(e - m));
  const long double u = accumulation_unit_roundoff(p.dtype);
  for (std::int64_t j = 0; j < p.n_k; ++j) {
    const long double e = s[static_cast<std::size_t>(j)];
    if (e == 0) continue;
    const long double w = rule.rounded_before_division ? e : e / sum;
    const long double relative = 2 * u * (static_cast<long double>(p.d_k) * spread[static_cast<std::size_t>(j)] + static_cast<long double>(p.n_k) + 4);
    if (relative > 0x1p-10L) return std::nullopt;
    const long double error = relative * w;
    const double down = round_to(*rule.weights_rounded_to, static_cast<double>(w - error)),
                 up = round_to(*rule.weights_rounded_to, static_cast<double>(w + error));
    if (down == up) continue;
    const long double step = (static_cast<long double>(up) - down) / (rule.rounded_before_division ? sum : 1.0L);
    for (std::int64_t c = 0; c < p.d_v; ++c)
      slack[static_cast<std::size_t>(c)] += step * std::fabs(static_cast<long double>(in.v.get(in.v.offset(b, g, j, c))));
  }
  return slack;
}

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
        const double got = round_to(p_.dtype, static_cast<double>(o[c]));
        const double err = std::fabs(got - want[r * d_v + c]);
        if (std::isfinite(err)) worst = std::max(worst, err);  // a yardstick that broke says nothing
      }
    }
    return worst;
  }

  double naive_error_in_working_precision(const Problem& hp, const CaseInputs& hin, const Rows& src, const RowRule& rule,
                                          const std::vector<double>& want, const std::vector<std::uint8_t>& skip) const {
    return p_.dtype == DType::f64 ? naive_error<double>(hp, hin, src, rule, want, skip)
                                  : naive_error<float>(hp, hin, src, rule, want, skip);
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
    return p_.dtype == DType::f64 ? by_row_rule_in<double>(rule) : by_row_rule_in<float>(rule);
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
        pr.out[r * d_v + c] = round_to(p_.dtype, static_cast<double>(o[c]));
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
      for (std::size_t c = 0; c < d_v; ++c) pr.out[r * d_v + c] = round_to(p_.dtype, static_cast<double>(o[c]));
    }
    pr.naive_max_abs = naive_error_in_working_precision(p_, in_, rows_, rule, pr.out, skip);
    return pr;
  }

  bool working_row_finite(std::int64_t row, const RowRule& rule) const {
    auto finite = [](const auto& v) { return std::all_of(v.begin(), v.end(), [](auto x) { return std::isfinite(x); }); };
    if (p_.dtype == DType::f64) {
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
    const Verdict v = judge(judging_.rule, p_.dtype, m, yardstick, rounding, judging_.precision_scale);
    return {v.pass && nonfinite_as_predicted, m.max_abs, v.tolerance};
  }
  // The failing output against a prediction; a nondeterministic implementation's second run too.
  Trial judge_prediction(const Prediction& pr) const {
    Trial t = judge_prediction(pr, out_);
    if (t.pass && runs_differ_) t.pass = judge_prediction(pr, *judging_.rerun).pass;
    return t;
  }

  // Records the hypothesis as tried, and as matched when the output passes against it.
  bool consider(const std::string& name, const std::string& explanation, const Prediction& pr) {
    tried(name);
    const Trial t = judge_prediction(pr);
    if (t.pass) diagnosis_.matches.push_back({name, explanation, t.max_abs, t.tolerance});
    return t.pass;
  }
  void tried(const std::string& name) {
    if (std::find(diagnosis_.tested.begin(), diagnosis_.tested.end(), name) == diagnosis_.tested.end()) diagnosis_.tested.push_back(name);
  }
  bool matched(const std::string& name) const {
    return std::any_of(diagnosis_.matches.begin(), diagnosis_.matches.end(), [&](const DiagnosisMatch& m) { return m.hypothesis == name; });
  }

  CaseInputs with_mask_of(const Problem& hp) const { return CaseInputs{in_.q, in_.k, in_.v, Mask(hp)}; }

  // ---- the hypotheses ----
  void scale_hypotheses();
  void fit_scale();
  void mask_hypotheses();
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
  bool try_scale(double scale, const std::string& name, const std::string& explanation) {
    Problem hp = p_;
    hp.scale = scale;
    return consider(name, explanation, by_reference(hp, in_));
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

std::string expected_scale_text(const Problem& p) {
  return p.scale ? fmt::format("the given scale {:.6g}", *p.scale) : fmt::format("1/sqrt(d_k) = {:.6g}", p.effective_scale());
}

void Diagnostician::scale_hypotheses() {
  const double expected = p_.effective_scale();
  bool matched = false;
  if (expected != 1.0)
    matched |= try_scale(1.0, "scale_one",
                         fmt::format("the output matches scale = 1: the scores were not scaled (expected {})", expected_scale_text(p_)));
  const double over_dk = 1.0 / double(p_.d_k);
  if (expected != over_dk && over_dk != 1.0)
    matched |= try_scale(over_dk, "scale_one_over_dk",
                         fmt::format("the output matches scale = 1/d_k = {:.6g}: divided by d_k instead of sqrt(d_k)", over_dk));
  if (!matched) fit_scale();
}

// Another constant: fitted on a few rows (long double, the unscaled dot products computed once),
// then confirmed on every diagnosis row with the reference. A fit close to a recognisable value
// is confirmed with that exact value and named.
void Diagnostician::fit_scale() {
  struct FitRow {
    std::vector<long double> dot, bias;  // visible keys only
    std::vector<std::int64_t> keys;
    std::int64_t row;
  };
  std::vector<FitRow> fit_rows;
  Rows candidates = rows_;
  if (judging_.observed.max_abs_index >= 0) candidates.insert(candidates.begin(), judging_.observed.max_abs_index / p_.d_v);
  const std::size_t columns = static_cast<std::size_t>(std::min<std::int64_t>(p_.d_v, 16));
  for (const std::int64_t row : candidates) {
    if (fit_rows.size() >= 4) break;
    if (std::any_of(fit_rows.begin(), fit_rows.end(), [&](const FitRow& f) { return f.row == row; })) continue;
    const auto [b, h, i] = split(p_, row);
    FitRow f{{}, {}, {}, row};
    bool finite = true;
    for (std::size_t c = 0; c < columns; ++c) finite &= std::isfinite(out_.get(row * p_.d_v + std::int64_t(c))) && !out_.is_poisoned(row * p_.d_v + std::int64_t(c));
    if (!finite) continue;
    for (std::int64_t j = 0; j < p_.n_k; ++j) {
      if (!in_.mask.visible(b, h, i, j)) continue;
      long double dot = 0;
      for (std::int64_t t = 0; t < p_.d_k; ++t)
        dot += static_cast<long double>(in_.q.get(in_.q.offset(b, h, i, t))) * in_.k.get(in_.k.offset(b, p_.kv_head(h), j, t));
      f.keys.push_back(j);
      f.dot.push_back(dot);
      f.bias.push_back(in_.mask.bias(b, h, i, j));
    }
    if (f.keys.size() >= 2) fit_rows.push_back(std::move(f));
  }
  if (fit_rows.empty()) return;
  auto error_at = [&](long double scale) {
    long double worst = 0;
    for (const FitRow& f : fit_rows) {
      const auto [b, h, i] = split(p_, f.row);
      std::vector<long double> s(f.keys.size());
      for (std::size_t j = 0; j < s.size(); ++j) s[j] = scale * f.dot[j] + f.bias[j];
      const long double m = *std::max_element(s.begin(), s.end());
      long double sum = 0;
      for (auto& e : s) sum += (e = std::exp(e - m));
      for (std::size_t c = 0; c < columns; ++c) {
        long double o = 0;
        for (std::size_t j = 0; j < s.size(); ++j) o += s[j] / sum * in_.v.get(in_.v.offset(b, p_.kv_head(h), f.keys[j], std::int64_t(c)));
        worst = std::max(worst, std::fabs(o - out_.get(f.row * p_.d_v + std::int64_t(c))));
      }
    }
    return worst;
  };
  // A grid over six decades around the expected scale, then golden-section search in the best cell.
  const double centre = std::log(p_.effective_scale()), half_width = std::log(1e3);
  constexpr int steps = 240;
  const double cell = 2 * half_width / steps;
  int best = 0;
  long double best_error = std::numeric_limits<long double>::infinity();
  for (int k = 0; k <= steps; ++k) {
    const long double e = error_at(std::exp(centre - half_width + k * cell));
    if (e < best_error) best_error = e, best = k;
  }
  long double lo = centre - half_width + (best - 1) * cell, hi = centre - half_width + (best + 1) * cell;
  const long double golden = 0.6180339887498948482L;
  for (int iteration = 0; iteration < 80; ++iteration) {
    const long double a = hi - golden * (hi - lo), b = lo + golden * (hi - lo);
    if (error_at(std::exp(a)) < error_at(std::exp(b)))
      hi = b;
    else
      lo = a;
  }
  const double fitted = static_cast<double>(std::exp((lo + hi) / 2));
  if (std::fabs(fitted / p_.effective_scale() - 1) < 1e-4) return;  // the scale is not what is wrong

  const double dk = double(p_.d_k), dv = double(p_.d_v), hq = double(p_.h_q), log2e = 1.4426950408889634;
  struct Named {
    double value;
    std::string name, why;
  };
  std::vector<Named> named{
      {1 / std::sqrt(dv), "1/sqrt(d_v)", "scaled by the value head dim instead of d_k"},
      {1 / dv, "1/d_v", "divided by d_v"},
      {std::sqrt(dk), "sqrt(d_k)", "multiplied by sqrt(d_k) instead of dividing"},
      {1 / std::sqrt(dk / hq), "1/sqrt(d_k/h_q)", "the model dim split over heads once too often"},
      {1 / std::sqrt(dk * hq), "1/sqrt(d_k*h_q)", "scaled by the model dim instead of the head dim"},
      {log2e / std::sqrt(dk), "log2(e)/sqrt(d_k)", "the exp2 softmax's log2(e) factor applied with exp"},
      {1 / (log2e * std::sqrt(dk)), "1/(log2(e)*sqrt(d_k))", "exp2 used on scores scaled for exp"},
      {p_.effective_scale() * p_.effective_scale(), "scale^2", "the scale applied twice"},
      {1 / std::sqrt(dk + dv), "1/sqrt(d_k+d_v)", "scaled by d_k + d_v"},
  };
  if (p_.scale) named.insert(named.begin(), {1 / std::sqrt(dk), "1/sqrt(d_k)", "the explicit scale was ignored for the default"});
  for (const Named& n : named) {
    if (std::fabs(fitted / n.value - 1) > 0.02 || n.value == p_.effective_scale()) continue;
    if (try_scale(n.value, "scale_constant",
                  fmt::format("the output matches scale = {} = {:.6g}: {} (expected {})", n.name, n.value, n.why, expected_scale_text(p_))))
      return;
  }
  try_scale(fitted, "scale_constant",
            fmt::format("the output matches scale = {:.6g} (fitted): the scores were scaled by a wrong constant (expected {})", fitted,
                        expected_scale_text(p_)));
}

void Diagnostician::mask_hypotheses() {
  if (!p_.window.is_none()) {
    if (p_.n_q != p_.n_k) {
      Problem hp = p_;
      const bool was_bottom_right = p_.window == Window::of(Causal::bottom_right);
      hp.window = Window::of(was_bottom_right ? Causal::top_left : Causal::bottom_right);
      consider("causal_alignment_swapped",
               was_bottom_right
                   ? "the output matches a top-left causal mask where bottom-right was asked: query i saw keys j <= i instead of j <= i + (n_k - n_q)"
                   : "the output matches a bottom-right causal mask where top-left was asked: query i saw keys j <= i + (n_k - n_q) instead of j <= i",
               by_reference(hp, with_mask_of(hp)));
    }
    Problem hp = p_;
    hp.window = Window::of(Causal::none);
    consider("causal_ignored", "the output matches no causal mask: the causal part of the mask was ignored",
             by_reference(hp, with_mask_of(hp)));
  }
  if (p_.padding.kind != KeyPadding::Kind::none) {
    Problem hp = p_;
    hp.padding = {};
    consider("padding_ignored", "the output matches no key padding: the valid lengths were ignored", by_reference(hp, with_mask_of(hp)));
  }
  // Off-by-one limits: each a per-query padding (the key limit of row (b, i) changed), intersected
  // with the case's own masks. Limits that give the same visibility are one hypothesis, named by
  // the first: a partial last tile of one key is the last key.
  struct Limits {
    std::string name, explanation;
    std::vector<std::int64_t> valid_len;  // [b * n_q + i]
  };
  std::vector<Limits> limits;
  auto each_row = [&](auto limit_of) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(p_.batch * p_.n_q));
    for (std::int64_t b = 0; b < p_.batch; ++b)
      for (std::int64_t i = 0; i < p_.n_q; ++i)
        v[static_cast<std::size_t>(b * p_.n_q + i)] = std::clamp<std::int64_t>(limit_of(b, i), 0, p_.n_k);
    return v;
  };
  const std::int64_t delta = p_.window == Window::of(Causal::bottom_right) ? p_.n_k - p_.n_q : 0;
  if (!p_.window.is_none())
    limits.push_back({"causal_strict",
                      fmt::format("the output matches a strict causal mask: query i saw keys j < i{} instead of j <= i{} (the diagonal key masked)",
                                  delta ? " + (n_k - n_q)" : "", delta ? " + (n_k - n_q)" : ""),
                      each_row([&](std::int64_t b, std::int64_t i) { return std::min(in_.mask.key_range(b, i).second, i + delta); })});
  if (p_.padding.kind != KeyPadding::Kind::none) {
    // The padding limit alone, one further; causality still applies (the causal limit is kept).
    Limits leak{"padding_one_key_leaks",
                "the output matches key padding off by one: key valid_len (the first padded key) was visible too (j <= valid_len instead of j < valid_len)",
                {}};
    leak.valid_len = each_row([&](std::int64_t b, std::int64_t i) {
      const auto& v = p_.padding.valid_len;
      return (p_.padding.kind == KeyPadding::Kind::per_batch ? v[static_cast<std::size_t>(b)] : v[static_cast<std::size_t>(b * p_.n_q + i)]) + 1;
    });
    limits.push_back(std::move(leak));
    // Batch 0's valid length for every batch: a kernel that reads valid_len[0] (or a scalar length).
    if (p_.padding.kind == KeyPadding::Kind::per_batch && p_.batch > 1)
      limits.push_back({"padding_batch0_for_all",
                        fmt::format("the output matches every batch padded to batch 0's valid length {}: valid_len[b] read as valid_len[0]",
                                    p_.padding.valid_len.front()),
                        each_row([&](std::int64_t, std::int64_t) { return p_.padding.valid_len.front(); })});
  }
  // The last key tile dropped: keys from the last multiple of the tile on excluded. Tiles giving
  // the same cut are one hypothesis.
  std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>> cuts;  // cut -> tiles
  for (const std::int64_t tile : {16, 32, 64, 128}) {
    if (p_.n_k <= tile || p_.n_k % tile == 0) continue;
    const std::int64_t cut = p_.n_k / tile * tile;
    auto it = std::find_if(cuts.begin(), cuts.end(), [&](auto& c) { return c.first == cut; });
    if (it == cuts.end())
      cuts.push_back({cut, {tile}});
    else
      it->second.push_back(tile);
  }
  for (const auto& [cut, tiles] : cuts) {
    std::string tile_text;
    for (std::size_t t = 0; t < tiles.size(); ++t)
      tile_text += (t == 0 ? "" : t + 1 == tiles.size() ? " or " : ", ") + std::to_string(tiles[t]);
    const std::int64_t at = cut;
    limits.push_back({"last_key_tile_dropped",
                      fmt::format("the output matches keys {}..{} dropped: the partial last key tile (tile of {} keys, n_k = {}) was not processed",
                                  cut, p_.n_k - 1, tile_text, p_.n_k),
                      each_row([&](std::int64_t b, std::int64_t i) { return std::min(in_.mask.key_range(b, i).second, at); })});
  }
  limits.push_back({"last_key_dropped",
                    "the output matches the last key of each row's range dropped: keys j < limit - 1 processed instead of j < limit (limit: "
                    "n_k, the causal limit or the valid length, whichever is smallest)",
                    each_row([&](std::int64_t b, std::int64_t i) { return in_.mask.key_range(b, i).second - 1; })});
  limits.push_back({"last_key_dropped", fmt::format("the output matches key n_k - 1 = {} dropped for every row: the key loop stops one short", p_.n_k - 1),
                    each_row([&](std::int64_t b, std::int64_t i) { return std::min(in_.mask.key_range(b, i).second, p_.n_k - 1); })});
  std::vector<std::vector<std::int64_t>> seen;
  std::vector<Limits*> distinct;
  for (Limits& l : limits) {
    // The padding hypotheses' limits hold only the padding; the others include the case's own limits.
    std::vector<std::int64_t> effective = l.valid_len;
    if (l.name == "padding_one_key_leaks" || l.name == "padding_batch0_for_all") {
      Problem causal_only = p_;
      causal_only.padding = {};
      const Mask mask(causal_only);
      for (std::int64_t b = 0; b < p_.batch; ++b)
        for (std::int64_t i = 0; i < p_.n_q; ++i) {
          auto& v = effective[static_cast<std::size_t>(b * p_.n_q + i)];
          v = std::min(v, mask.key_range(b, i).second);
        }
    }
    bool same_as_case = true;
    for (std::int64_t b = 0; b < p_.batch; ++b)
      for (std::int64_t i = 0; i < p_.n_q; ++i) same_as_case &= effective[static_cast<std::size_t>(b * p_.n_q + i)] == in_.mask.key_range(b, i).second;
    if (same_as_case) continue;
    const auto same = std::find(seen.begin(), seen.end(), effective);
    if (same != seen.end()) {  // the same visibility: one prediction, both readings said
      Limits& first = *distinct[std::size_t(same - seen.begin())];
      if (first.name != l.name) first.explanation += "; equivalently, " + l.explanation.substr(l.explanation.find("matches ") + 8);
      continue;
    }
    seen.push_back(effective);
    l.valid_len = std::move(effective);
    distinct.push_back(&l);
  }
  for (const Limits* l : distinct) consider(l->name, l->explanation, padded_to(l->valid_len));
}

Prediction Diagnostician::padded_to(const std::vector<std::int64_t>& valid_len) const {
  Problem hp = p_;
  hp.padding.kind = KeyPadding::Kind::per_query;
  hp.padding.valid_len = valid_len;
  return by_reference(hp, with_mask_of(hp));
}

void Diagnostician::masked_fill_hypotheses() {
  if (in_.mask.count_visible() == p_.batch * p_.h_q * p_.n_q * p_.n_k) return;  // nothing is masked
  struct Fill {
    long double value;
    std::string text;
  };
  const std::vector<Fill> fills{{-1.0L, "-1"},
                                {-1e4L, "-1e4"},
                                {-65504.0L, "-65504 (the lowest f16)"},
                                {-1e9L, "-1e9"},
                                {static_cast<long double>(std::numeric_limits<float>::lowest()), "-3.4e38 (the lowest f32, -inf as a finite number)"},
                                {0.0L, "0"}};
  std::vector<std::string> matched;
  double worst = 0, tolerance = 0;
  for (const Fill& f : fills) {
    Prediction pr = by_row_rule(RowRule{.fill = f.value});
    const Trial t = judge_prediction(pr);
    if (t.pass) {
      matched.push_back(f.text);
      if (t.max_abs / t.tolerance >= worst / std::max(tolerance, 1e-300)) worst = t.max_abs, tolerance = t.tolerance;
    }
  }
  tried("masked_fill");
  if (matched.empty()) return;
  std::string explanation;
  if (matched.size() == 1) {
    explanation = fmt::format("the output matches masked keys given the finite score {} instead of being excluded", matched[0]);
  } else {
    std::string list;
    for (std::size_t k = 0; k < matched.size(); ++k) list += (k ? ", " : "") + matched[k];
    explanation = fmt::format("the output matches masked keys given a finite score instead of being excluded (fills {} all match)", list);
  }
  diagnosis_.matches.push_back({"masked_fill", explanation, worst, tolerance});
}

// K's memory of each head read as [d_k, n_k] instead of [n_k, d_k].
void Diagnostician::key_layout_hypotheses() {
  if (p_.n_k < 2 || p_.d_k < 2) return;
  CaseInputs hin{in_.q, in_.k, in_.v, in_.mask};
  for (std::int64_t b = 0; b < p_.batch; ++b)
    for (std::int64_t g = 0; g < p_.h_kv; ++g) {
      const std::int64_t base = in_.k.offset(b, g, 0, 0);
      for (std::int64_t j = 0; j < p_.n_k; ++j)
        for (std::int64_t t = 0; t < p_.d_k; ++t) hin.k.set_bits(base + j * p_.d_k + t, in_.k.bits(base + t * p_.n_k + j));
    }
  consider("k_transposed", "the output matches K read transposed: each head's K memory taken as [d_k, n_k] instead of [n_k, d_k]",
           by_reference(p_, hin));
}

// Query head h reading kv head h % h_kv (the MHA habit) instead of h / (h_q / h_kv): the problem
// as MHA with K and V repeated in that order.
void Diagnostician::head_mapping_hypotheses() {
  if (!(1 < p_.h_kv && p_.h_kv < p_.h_q)) return;
  Problem hp = p_;
  hp.h_kv = p_.h_q;
  CaseInputs hin{in_.q, Tensor(in_.k.dtype(), {p_.batch, p_.h_q, p_.n_k, p_.d_k}), Tensor(in_.v.dtype(), {p_.batch, p_.h_q, p_.n_k, p_.d_v}),
                 in_.mask};
  for (std::int64_t b = 0; b < p_.batch; ++b)
    for (std::int64_t h = 0; h < p_.h_q; ++h) {
      const std::int64_t g = h % p_.h_kv;
      for (std::int64_t e = 0; e < p_.n_k * p_.d_k; ++e) hin.k.set_bits(hin.k.offset(b, h, 0, 0) + e, in_.k.bits(in_.k.offset(b, g, 0, 0) + e));
      for (std::int64_t e = 0; e < p_.n_k * p_.d_v; ++e) hin.v.set_bits(hin.v.offset(b, h, 0, 0) + e, in_.v.bits(in_.v.offset(b, g, 0, 0) + e));
    }
  consider("kv_head_mapping", "the output matches query head h reading kv head h % h_kv instead of h / (h_q / h_kv)",
           by_reference(hp, hin));
}

void Diagnostician::softmax_hypotheses() {
  consider("weights_not_normalised",
           "the output matches weights not normalised: sum_j exp(s_j - max) v_j never divided by the row sum",
           by_row_rule(RowRule{.normalise = false}));
  const Prediction pr = by_row_rule(RowRule{.subtract_max = false});
  const auto overflowing = std::count(pr.nonfinite.begin(), pr.nonfinite.end(), std::uint8_t{1});
  if (overflowing > 0)
    consider("no_max_subtraction",
             fmt::format("the output matches exp(s) without subtracting the row max: {} of the {} rows checked overflow or underflow to NaN/Inf in {}",
                         overflowing, rows_.size(), p_.dtype == DType::f64 ? "f64" : "f32"),
             pr);
  else
    tried("no_max_subtraction");
}

// Output rows written at the wrong place. The row the worst element is in is compared (long
// double) with the rows it most plausibly came from: the other query rows of its head, the same
// query of the other heads and of the other batches; the nearest one names a mapping (heads or
// batches shifted, rows reversed or shifted within a head), which the reference then confirms on
// every diagnosis row. O written in BSHD order is tried as well.
void Diagnostician::permutation_hypotheses() {
  struct Mapping {
    std::string name;  // explanation
    std::function<std::int64_t(std::int64_t)> source;
  };
  std::vector<Mapping> mappings;
  const std::int64_t worst = judging_.observed.max_abs_index >= 0 ? judging_.observed.max_abs_index / p_.d_v : -1;
  if (worst >= 0 && !row_shows_failure(worst)) {
    const auto [b, h, i] = split(p_, worst);
    Rows candidates;
    for (std::int64_t k = 0; k < p_.h_q; ++k)
      if (k != h) candidates.push_back(join(p_, b, k, i));
    for (std::int64_t k = 0; k < p_.batch; ++k)
      if (k != b) candidates.push_back(join(p_, k, h, i));
    const double per_row = double(p_.n_k) * double(p_.d_k + p_.d_v);
    const auto room = static_cast<std::int64_t>(4 * options_.max_work / std::max(per_row, 1.0));
    if (p_.n_q <= room) {
      for (std::int64_t k = 0; k < p_.n_q; ++k)
        if (k != i) candidates.push_back(join(p_, b, h, k));
    } else {
      for (const std::int64_t k : {p_.n_q - 1 - i, i - 1, i + 1, i - 2, i + 2})
        if (k >= 0 && k < p_.n_q && k != i) candidates.push_back(join(p_, b, h, k));
    }
    // The three nearest: rows that are alike (two heads of one kv head on a one-hot softmax)
    // can tie, and only the reference tells the mapping that holds everywhere.
    std::vector<std::pair<long double, std::int64_t>> nearest;
    std::vector<long double> o;
    for (const std::int64_t c : candidates) {
      if (!row_under<long double>(p_, in_, c, RowRule{}, o)) std::fill(o.begin(), o.end(), 0.0L);
      long double distance = 0;
      for (std::int64_t col = 0; col < p_.d_v; ++col) distance = std::max(distance, std::fabs(o[std::size_t(col)] - out_.get(worst * p_.d_v + col)));
      nearest.emplace_back(distance, c);
    }
    std::sort(nearest.begin(), nearest.end());
    if (nearest.size() > 3) nearest.resize(3);
    for (const auto& [distance, source] : nearest) {
      const auto [sb, sh, si] = split(p_, source);
      const Problem& p = p_;
      if (sh != h) {
        const std::int64_t shift = ((h - sh) % p.h_q + p.h_q) % p.h_q;
        mappings.push_back({fmt::format("the output rows are permuted: head h's rows were written at head (h + {}) % h_q", shift),
                            [&p, shift](std::int64_t r) {
                              const auto [rb, rh, ri] = split(p, r);
                              return join(p, rb, ((rh - shift) % p.h_q + p.h_q) % p.h_q, ri);
                            }});
      } else if (sb != b) {
        const std::int64_t shift = ((b - sb) % p.batch + p.batch) % p.batch;
        mappings.push_back({fmt::format("the output rows are permuted: batch b's rows were written at batch (b + {}) % batch", shift),
                            [&p, shift](std::int64_t r) {
                              const auto [rb, rh, ri] = split(p, r);
                              return join(p, ((rb - shift) % p.batch + p.batch) % p.batch, rh, ri);
                            }});
      } else if (si == p.n_q - 1 - i) {
        mappings.push_back({"the output rows are permuted: each head's query rows are reversed (row i holds row n_q - 1 - i)",
                            [&p](std::int64_t r) {
                              const auto [rb, rh, ri] = split(p, r);
                              return join(p, rb, rh, p.n_q - 1 - ri);
                            }});
      } else {
        const std::int64_t shift = ((i - si) % p.n_q + p.n_q) % p.n_q;
        mappings.push_back({fmt::format("the output rows are permuted: row i of each head holds row (i - {}) mod n_q", shift),
                            [&p, shift](std::int64_t r) {
                              const auto [rb, rh, ri] = split(p, r);
                              return join(p, rb, rh, ((ri - shift) % p.n_q + p.n_q) % p.n_q);
                            }});
      }
    }
  }
  if (p_.h_q > 1 && p_.n_q > 1) {
    const Problem& p = p_;
    mappings.push_back({"the output matches O written in [b, n_q, h_q, d_v] (BSHD) order into the [b, h_q, n_q, d_v] (BHSD) output",
                        [&p](std::int64_t r) {
                          const auto [rb, rh, ri] = split(p, r);
                          const std::int64_t local = rh * p.n_q + ri;  // the position within the batch, read as BSHD
                          return join(p, rb, local % p.h_q, local / p.h_q);
                        }});
  }
  std::set<std::string> tried;
  for (const Mapping& m : mappings) {
    if (!tried.insert(m.name).second) continue;
    Rows source(rows_.size());
    std::transform(rows_.begin(), rows_.end(), source.begin(), m.source);
    if (consider("output_rows_permuted", m.name, by_reference(p_, in_, source))) break;
  }
}

// Softmax normalised down each key's column (over the queries of one (b, h)) instead of along
// the row: every score of a head is needed, so heads are predicted while the work fits in 4x the
// budget (the head of the worst element first); the rows of other heads are not compared.
template <class T>
void column_softmax_rows(const Problem& p, const CaseInputs& in, std::int64_t b, std::int64_t h, const std::vector<std::int64_t>& queries,
                         std::vector<std::vector<T>>& out) {
  const auto nq = static_cast<std::size_t>(p.n_q), nk = static_cast<std::size_t>(p.n_k);
  const std::int64_t g = p.kv_head(h);
  const T scale = static_cast<T>(p.effective_scale());
  const T excluded = -std::numeric_limits<T>::infinity();
  std::vector<T> s(nq * nk);
  for (std::size_t i = 0; i < nq; ++i)
    for (std::size_t j = 0; j < nk; ++j) {
      if (!in.mask.visible(b, h, std::int64_t(i), std::int64_t(j))) {
        s[i * nk + j] = excluded;
        continue;
      }
      T dot = 0;
      for (std::int64_t t = 0; t < p.d_k; ++t)
        dot += static_cast<T>(in.q.get(in.q.offset(b, h, std::int64_t(i), t))) * static_cast<T>(in.k.get(in.k.offset(b, g, std::int64_t(j), t)));
      s[i * nk + j] = dot * scale + static_cast<T>(in.mask.bias(b, h, std::int64_t(i), std::int64_t(j)));
    }
  for (std::size_t j = 0; j < nk; ++j) {
    T m = excluded, sum = 0;
    for (std::size_t i = 0; i < nq; ++i) m = std::max(m, s[i * nk + j]);
    for (std::size_t i = 0; i < nq; ++i) sum += (s[i * nk + j] = m == excluded ? T(0) : std::exp(s[i * nk + j] - m));
    if (sum > 0)
      for (std::size_t i = 0; i < nq; ++i) s[i * nk + j] /= sum;
  }
  out.clear();
  for (const std::int64_t i : queries) {
    std::vector<T> o(static_cast<std::size_t>(p.d_v), T(0));
    for (std::size_t j = 0; j < nk; ++j) {
      const T w = s[std::size_t(i) * nk + j];
      if (w == T(0)) continue;
      for (std::int64_t c = 0; c < p.d_v; ++c) o[std::size_t(c)] += w * static_cast<T>(in.v.get(in.v.offset(b, g, std::int64_t(j), c)));
    }
    out.push_back(std::move(o));
  }
}

void Diagnostician::query_axis_hypothesis() {
  if (p_.n_q < 2) return;  // one query: both axes give the same weights only if n_k = 1; a column of one is all ones
  const auto d_v = static_cast<std::size_t>(p_.d_v);
  std::vector<std::pair<std::int64_t, std::int64_t>> heads;  // (b, h) in the order to predict
  const std::int64_t worst = judging_.observed.max_abs_index >= 0 ? judging_.observed.max_abs_index / p_.d_v : rows_.front();
  heads.push_back({split(p_, worst).b, split(p_, worst).h});
  for (const std::int64_t r : rows_) {
    const auto [b, h, i] = split(p_, r);
    if (std::find(heads.begin(), heads.end(), std::pair{b, h}) == heads.end()) heads.emplace_back(b, h);
  }
  const double per_head = double(p_.n_q) * double(p_.n_k) * double(p_.d_k + p_.d_v);
  const auto affordable = std::max<std::size_t>(1, static_cast<std::size_t>(4 * options_.max_work / std::max(per_head, 1.0)));
  if (heads.size() > affordable) heads.resize(affordable);
  Prediction pr;
  pr.out.assign(rows_.size() * d_v, 0.0);
  pr.nonfinite.assign(rows_.size(), 0);
  pr.uncompared.assign(rows_.size(), 1);
  std::vector<std::vector<long double>> exact;
  std::vector<std::vector<float>> single;
  std::vector<std::vector<double>> twice;
  for (const auto& [b, h] : heads) {
    std::vector<std::size_t> at;
    std::vector<std::int64_t> queries;
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      const auto [rb, rh, ri] = split(p_, rows_[r]);
      if (rb == b && rh == h) at.push_back(r), queries.push_back(ri);
    }
    if (at.empty()) continue;
    column_softmax_rows<long double>(p_, in_, b, h, queries, exact);
    for (std::size_t k = 0; k < at.size(); ++k) {
      pr.uncompared[at[k]] = 0;
      for (std::size_t c = 0; c < d_v; ++c) pr.out[at[k] * d_v + c] = round_to(p_.dtype, static_cast<double>(exact[k][c]));
    }
    // The yardstick: the same in the working precision.
    auto naive = [&](const auto& rows) {
      for (std::size_t k = 0; k < at.size(); ++k)
        for (std::size_t c = 0; c < d_v; ++c) {
          const double err = std::fabs(round_to(p_.dtype, static_cast<double>(rows[k][c])) - pr.out[at[k] * d_v + c]);
          if (std::isfinite(err)) pr.naive_max_abs = std::max(pr.naive_max_abs, err);
        }
    };
    if (p_.dtype == DType::f64) {
      column_softmax_rows<double>(p_, in_, b, h, queries, twice);
      naive(twice);
    } else {
      column_softmax_rows<float>(p_, in_, b, h, queries, single);
      naive(single);
    }
  }
  consider("softmax_over_queries",
           "the output matches the softmax taken over the queries (each key's scores normalised down the column) instead of along "
           "each query's row of keys: check the axis of the max and of the sum",
           pr);
}

// The softmax weights rounded to bf16 before P V: what feeding P to a bf16 tensor core does. For
// bf16 inputs that is the working precision (the pass rule allows it); for the others it is a
// named loss. Which way a weight close to a rounding boundary goes depends on the kernel's order
// of operations: the prediction is an interval there (rounding_ambiguity), judged at its point
// nearest the output, and the pass rule judges the rest.
void Diagnostician::weights_rounding_hypotheses() {
  if (p_.dtype == DType::bf16) return;
  const auto d_v = static_cast<std::size_t>(p_.d_v);
  struct Variant {
    bool before_division;
    const char* explanation;
  };
  for (const Variant& variant :
       {Variant{false, "the output matches the softmax weights P rounded to bf16 before P V (a bf16 matmul fed with P): keep P in the "
                       "input precision, or accept bf16's error and declare that precision"},
        Variant{true, "the output matches exp(s - max) rounded to bf16 before P V and divided by the row sum after (a bf16 matmul "
                      "fed with unnormalised P): keep P in the input precision, or accept bf16's error and declare that precision"}}) {
    RowRule rule;
    rule.weights_rounded_to = DType::bf16;
    rule.rounded_before_division = variant.before_division;
    Prediction pr = by_row_rule(rule);
    pr.slack.assign(rows_.size() * d_v, 0.0);
    pr.uncompared.assign(rows_.size(), 0);
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      const auto slack = rounding_ambiguity(p_, in_, rows_[r], rule);
      if (!slack) {
        pr.uncompared[r] = 1;
        continue;
      }
      for (std::size_t c = 0; c < d_v; ++c) pr.slack[r * d_v + c] = static_cast<double>((*slack)[c]);
    }
    pr.naive_max_abs = 0;  // the interval covers what the order of operations decides
    if (consider("weights_rounded_to_bf16", variant.explanation, pr)) return;
  }
}

// A finite initial row maximum: m = max(m0, scores) with m0 = -1e4 or another stand-in for -inf.
// A row whose scores all lie far below m0 (the large regime, a fully masked row) underflows every
// exp(s - m0) to zero: 0 / 0 = NaN (or zeros behind a guard), or weights of partly underflowed
// keys. The underflow is the working precision's, so the prediction is computed in it.
void Diagnostician::row_max_init_hypotheses() {
  struct Init {
    long double value;
    std::string text;
  };
  const std::vector<Init> inits{{-1e4L, "-1e4"}, {-65504.0L, "-65504"}, {-1e9L, "-1e9"}, {-1e30L, "-1e30"}};
  const auto base = by_row_rule_in_working_precision(RowRule{});
  const auto d_v = static_cast<std::size_t>(p_.d_v);
  for (const bool guarded : {false, true}) {
    std::vector<std::string> matched;
    double worst = 0, tolerance = 0;
    for (const Init& init : inits) {
      RowRule rule;
      rule.max_init = init.value;
      rule.zero_sum_gives_zeros = guarded;
      const Prediction pr = by_row_rule_in_working_precision(rule);
      // Changing only fully masked rows, it is one of the ways those rows break the policy
      // (fully_masked_rows_off_policy says which); it is named where rows that see keys show it.
      bool shows = false;
      for (std::size_t r = 0; r < rows_.size() && !shows; ++r) {
        const auto [b, h, i] = split(p_, rows_[r]);
        if (in_.mask.row_fully_masked(b, h, i)) continue;
        shows = pr.nonfinite[r] != base.nonfinite[r] ||
                !std::equal(pr.out.begin() + std::ptrdiff_t(r * d_v), pr.out.begin() + std::ptrdiff_t((r + 1) * d_v), base.out.begin() + std::ptrdiff_t(r * d_v));
      }
      if (!shows) continue;
      const Trial t = judge_prediction(pr);
      if (t.pass) {
        matched.push_back(init.text);
        if (t.max_abs / std::max(t.tolerance, 1e-300) >= worst / std::max(tolerance, 1e-300)) worst = t.max_abs, tolerance = t.tolerance;
      }
    }
    tried("row_max_init_finite");
    if (matched.empty()) continue;
    std::string list;
    for (std::size_t k = 0; k < matched.size(); ++k) list += (k ? ", " : "") + matched[k];
    diagnosis_.matches.push_back(
        {"row_max_init_finite",
         fmt::format("the output matches the row max initialised to a finite {} instead of -inf: rows whose scores all lie below it "
                     "underflow every exp(s - m) and give {}",
                     matched.size() == 1 ? list : "value (" + list + " all match)", guarded ? "zeros" : "0/0 = NaN"),
         worst, tolerance});
    return;
  }
}

// Query head h reading K and V at its own offset, as if they had h_q heads (GQA ignored): the
// flat block b * h_q + h of the dense [b, h_kv, n_k, d] tensors, which is block (b', g') =
// ((b h_q + h) / h_kv, (b h_q + h) % h_kv) while inside them, and past their end otherwise
// (those rows are not compared: what lies there is not the harness's). Tried when the h % h_kv
// mapping (which predicts every row) did not match and some compared row reads another block
// than its own.
void Diagnostician::kv_offset_hypothesis() {
  if (!(p_.h_kv < p_.h_q) || matched("kv_head_mapping")) return;
  const std::int64_t blocks = p_.batch * p_.h_kv;
  Problem hp = p_;
  hp.h_kv = p_.h_q;
  CaseInputs hin{in_.q, Tensor(in_.k.dtype(), {p_.batch, p_.h_q, p_.n_k, p_.d_k}), Tensor(in_.v.dtype(), {p_.batch, p_.h_q, p_.n_k, p_.d_v}),
                 in_.mask};
  bool differs = false;
  std::int64_t past_end = 0;
  for (std::int64_t b = 0; b < p_.batch; ++b)
    for (std::int64_t h = 0; h < p_.h_q; ++h) {
      const std::int64_t block = b * p_.h_q + h;
      if (block >= blocks) {
        ++past_end;
        continue;
      }
      differs |= block != b * p_.h_kv + p_.kv_head(h);
      for (std::int64_t e = 0; e < p_.n_k * p_.d_k; ++e) hin.k.set_bits(hin.k.offset(b, h, 0, 0) + e, in_.k.bits(block * p_.n_k * p_.d_k + e));
      for (std::int64_t e = 0; e < p_.n_k * p_.d_v; ++e) hin.v.set_bits(hin.v.offset(b, h, 0, 0) + e, in_.v.bits(block * p_.n_k * p_.d_v + e));
    }
  if (!differs) return;
  Prediction pr = by_reference(hp, hin);
  pr.uncompared.assign(rows_.size(), 0);
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    const auto [b, h, i] = split(p_, rows_[r]);
    pr.uncompared[r] = b * p_.h_q + h >= blocks;
  }
  consider("kv_head_as_query_head",
           fmt::format("the output matches query head h reading K and V at head h's own offset, as if they had h_q = {} heads (GQA "
                       "ignored): heads from h_kv = {} on read other heads' or batches' K/V{}; read kv head h / (h_q / h_kv)",
                       p_.h_q, p_.h_kv,
                       past_end ? fmt::format(", and {} of the {} (b, h) read past the end of K and V (not compared)", past_end, p_.batch * p_.h_q)
                                : ""),
           pr);
}

// A tensor handed over as [b, s, h, d] (BSHD) read back as if it were [b, h, s, d]: what a kernel
// sees that declares BSHD but indexes BHSD.
Tensor read_as_bhsd(const Tensor& t) {
  const Tensor::Shape& shape = t.shape();  // logical [b, h, s, d]
  const std::int64_t heads = shape[1], length = shape[2], dim = shape[3];
  Tensor seen(t.dtype(), shape);
  for (std::int64_t f = 0; f < t.numel(); ++f) {
    const std::int64_t d = f % dim, h = (f / dim) % heads, s = (f / (dim * heads)) % length, b = f / (dim * heads * length);
    seen.set_bits(f, t.bits(t.offset(b, h, s, d)));
  }
  return seen;
}

// The tensors came in BSHD and the kernel read and wrote them as BHSD: it computed attention on
// the reinterpreted Q, K, V, and its BHSD output row (b', h', i') lands where the harness reads
// BSHD row (b, h, i) with (b * n_q + i) * h_q + h = (b' * h_q + h') * n_q + i'.
void Diagnostician::layout_hypothesis() {
  if (p_.layout != Layout::bshd) return;
  const CaseInputs hin{read_as_bhsd(in_.q), read_as_bhsd(in_.k), read_as_bhsd(in_.v), in_.mask};
  Rows source;
  for (const std::int64_t row : rows_) {
    const auto [b, h, i] = split(p_, row);
    source.push_back((b * p_.n_q + i) * p_.h_q + h);
  }
  consider("layout_ignored",
           "the output matches a kernel that reads and writes [b, h, s, d] (BHSD) although the tensors came as [b, s, h, d] (BSHD), a "
           "layout it declares: index through the strides it is given, or declare BHSD only",
           by_reference(p_, hin, source));
}

// Non-finite values in masked K/V rows (a cache page never written) reaching visible outputs
// through 0 * NaN or NaN + (-inf): every finite element must agree with the reference, and every
// non-finite one must lie in a row that has a masked key whose K or V holds a non-finite value.
void Diagnostician::masked_nonfinite_hypothesis() {
  std::vector<std::uint8_t> poisoned(static_cast<std::size_t>(p_.batch * p_.h_kv * p_.n_k), 0);  // [b, g, j]
  bool any = false;
  for (std::int64_t b = 0; b < p_.batch; ++b)
    for (std::int64_t g = 0; g < p_.h_kv; ++g)
      for (std::int64_t j = 0; j < p_.n_k; ++j) {
        bool bad = false;
        for (std::int64_t t = 0; t < p_.d_k && !bad; ++t) bad = !std::isfinite(in_.k.get(in_.k.offset(b, g, j, t)));
        for (std::int64_t c = 0; c < p_.d_v && !bad; ++c) bad = !std::isfinite(in_.v.get(in_.v.offset(b, g, j, c)));
        poisoned[static_cast<std::size_t>((b * p_.h_kv + g) * p_.n_k + j)] = bad;
        any |= bad;
      }
  if (!any) return;
  Prediction pr = by_reference(p_, in_);
  pr.uncompared.assign(rows_.size(), 0);
  std::int64_t leaking = 0;
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    const auto [b, h, i] = split(p_, rows_[r]);
    if (in_.mask.row_fully_masked(b, h, i)) continue;
    std::int64_t nonfinite = 0;
    for (std::int64_t c = 0; c < p_.d_v; ++c) nonfinite += !std::isfinite(out_.get(rows_[r] * p_.d_v + c));
    if (nonfinite == 0) continue;
    bool reachable = false;
    for (std::int64_t j = 0; j < p_.n_k && !reachable; ++j)
      reachable = !in_.mask.visible(b, h, i, j) && poisoned[static_cast<std::size_t>((b * p_.h_kv + p_.kv_head(h)) * p_.n_k + j)];
    if (!reachable) return;  // a NaN no masked key explains
    // A whole row poisoned is checked as such; a row poisoned in some columns (the columns whose
    // masked V is non-finite) is left out, its finite values are not compared.
    (nonfinite == p_.d_v ? pr.nonfinite[r] : pr.uncompared[r]) = 1;
    ++leaking;
  }
  if (leaking == 0) return;
  consider("masked_nonfinite_leak",
           fmt::format("non-finite values in masked K/V rows leak into visible outputs: {} of the {} rows checked hold NaN/Inf and every "
                       "other value is right; skip masked keys (or select, not multiply by 0: 0 * NaN = NaN)",
                       leaking, rows_.size()),
           pr);
}

void Diagnostician::zero_output_hypothesis() {
  Prediction pr;
  pr.out.assign(rows_.size() * static_cast<std::size_t>(p_.d_v), 0.0);
  pr.nonfinite.assign(rows_.size(), 0);
  consider("output_all_zeros", "the output is zeros: the kernel did not run or did not write O (a zero-initialised buffer)", pr);
}

// Right wherever a key is visible, wrong only in the fully masked rows.
void Diagnostician::fully_masked_policy_hypothesis() {
  if (judging_.observed.fully_masked_violations == 0) return;
  Prediction pr = by_reference(p_, in_);
  pr.uncompared.assign(rows_.size(), 0);
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    const auto [b, h, i] = split(p_, rows_[r]);
    pr.uncompared[r] = in_.mask.row_fully_masked(b, h, i);
    pr.nonfinite[r] = 0;
  }
  pr.failure_only_where_uncompared = true;
  const bool nan_written = judging_.policy == FullyMaskedPolicy::zeros && judging_.observed.fully_masked_nan_rows > 0;
  consider("fully_masked_rows_off_policy",
           fmt::format("the output is right wherever a key is visible; the fully masked rows break the declared policy ({}): write {} "
                       "where a row sees no key{}",
                       to_string(judging_.policy), judging_.policy == FullyMaskedPolicy::zeros ? "zeros" : "NaN",
                       nan_written ? " (NaN there is 0/0: an empty row's sum, e.g. after a finite initial row max, divided unguarded)" : ""),
           pr);
}

// Two runs on the same inputs: bits that differ say the implementation is nondeterministic.
void Diagnostician::check_rerun() {
  if (judging_.rerun == nullptr || judging_.rerun->numel() != out_.numel()) return;
  std::int64_t differ = 0, first = -1;
  double largest = 0;
  for (std::int64_t e = 0; e < out_.numel(); ++e) {
    if (out_.bits(e) == judging_.rerun->bits(e)) continue;
    ++differ;
    if (first < 0) first = e;
    const double d = std::fabs(out_.get(e) - judging_.rerun->get(e));
    largest = std::isnan(d) ? d : std::max(largest, d);
  }
  if (differ == 0) return;
  runs_differ_ = true;
  diagnosis_.nondeterminism = fmt::format("nondeterministic: two runs on the same inputs differ at {} ({} of {} elements differ, by up to {:.3g})",
                                          output_coordinates(p_, first), differ, out_.numel(), largest);
}

// What fully masked rows that break the policy hold: NaN, Inf, zeros, or which mean of V.
void Diagnostician::describe_fully_masked_rows() {
  if (judging_.observed.fully_masked_violations == 0) return;
  const double u = accumulation_unit_roundoff(p_.dtype);
  std::vector<std::int64_t> rows;
  for (std::int64_t r = 0; r < p_.rows(); ++r) {
    const auto [b, h, i] = split(p_, r);
    if (in_.mask.row_fully_masked(b, h, i)) rows.push_back(r);
  }
  const std::size_t step = std::max<std::size_t>(1, rows.size() / 64);  // at most 64 rows, spread
  Problem no_padding = p_, no_causal = p_;
  no_padding.padding = {};
  no_causal.window = Window::of(Causal::none);
  const Mask causal_only(no_padding), padding_only(no_causal);
  std::vector<std::pair<std::string, std::int64_t>> kinds;  // what, rows
  auto count = [&](const std::string& what) {
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](auto& k) { return k.first == what; });
    if (it == kinds.end())
      kinds.push_back({what, 1});
    else
      ++it->second;
  };
  std::int64_t examined = 0;
  for (std::size_t k = 0; k < rows.size(); k += step) {
    const std::int64_t row = rows[k];
    const auto [b, h, i] = split(p_, row);
    bool any_nan = false, any_inf = false, all_zero = true, poisoned = false;
    for (std::int64_t c = 0; c < p_.d_v; ++c) {
      if (out_.is_poisoned(row * p_.d_v + c)) poisoned = true;
      const double x = out_.get(row * p_.d_v + c);
      any_nan |= std::isnan(x), any_inf |= std::isinf(x), all_zero &= x == 0.0;
    }
    const bool follows = judging_.policy == FullyMaskedPolicy::zeros ? all_zero && !poisoned : any_nan;
    if (follows) continue;
    ++examined;
    if (poisoned) { count("left unwritten"); continue; }
    if (any_nan) { count("hold NaN"); continue; }
    if (any_inf) { count("hold Inf"); continue; }
    if (all_zero) { count("hold zeros"); continue; }
    // The mean of V over a key set, or the softmax over every key (the mask ignored for the row).
    const std::int64_t g = p_.kv_head(h);
    auto matches = [&](auto weight_of) {
      std::vector<long double> w(static_cast<std::size_t>(p_.n_k));
      long double total = 0;
      for (std::int64_t j = 0; j < p_.n_k; ++j) total += (w[std::size_t(j)] = weight_of(j));
      if (!(total > 0)) return false;
      for (std::int64_t c = 0; c < p_.d_v; ++c) {
        long double o = 0, magnitude = 0;
        for (std::int64_t j = 0; j < p_.n_k; ++j) {
          const long double v = in_.v.get(in_.v.offset(b, g, j, c));
          o += w[std::size_t(j)] / total * v, magnitude += std::fabs(v);
        }
        const double want = round_to(p_.dtype, static_cast<double>(o));
        const double tolerance = judging_.rule.k * 4 * (double(p_.n_k) + 2) * u * static_cast<double>(magnitude) +
                                 judging_.rule.floor_ulps * ulp_at(p_.dtype, std::fabs(want));
        if (!(std::fabs(out_.get(row * p_.d_v + c) - want) <= tolerance)) return false;
      }
      return true;
    };
    const long double scale = p_.effective_scale();
    if (matches([](std::int64_t) { return 1.0L; })) {
      count("hold the mean of V over all keys (masked keys given one finite score)");
    } else if (p_.padding.kind != KeyPadding::Kind::none && matches([&](std::int64_t j) { return j < padding_only.key_range(b, i).second ? 1.0L : 0.0L; })) {
      count("hold the mean of V over the keys the padding leaves visible");
    } else if (!p_.window.is_none() && matches([&](std::int64_t j) { return j < causal_only.key_range(b, i).second ? 1.0L : 0.0L; })) {
      count("hold the mean of V over the keys the causal mask leaves visible");
    } else if (matches([&](std::int64_t j) {
                 long double dot = 0;
                 for (std::int64_t t = 0; t < p_.d_k; ++t)
                   dot += static_cast<long double>(in_.q.get(in_.q.offset(b, h, i, t))) * in_.k.get(in_.k.offset(b, g, j, t));
                 return std::exp(dot * scale);  // relative to one another; large scores only where the row max would be subtracted
               })) {
      count("hold the softmax over every key (the mask ignored)");
    } else {
      count("hold finite values of no recognised kind");
    }
  }
  if (kinds.empty()) return;
  std::string text;
  for (const auto& [what, n] : kinds) text += fmt::format("{}{} {}", text.empty() ? "" : ", ", n, what);
  diagnosis_.fully_masked_rows =
      fmt::format("{} (of {} fully masked rows{}) instead of {}", text, rows.size(), examined < std::int64_t(rows.size()) && step > 1 ? ", a spread sample" : "",
                  judging_.policy == FullyMaskedPolicy::zeros ? "zeros" : "NaN");
}

// No mistake explains the whole output, and the failure is confined to a few rows while every
// other compared row agrees with the reference: a kernel right in general but wrong at a place (a
// store to the wrong row, a race between blocks, one tile handled differently).
void Diagnostician::isolated_rows_hypothesis(const Trial& against_truth) {
  tried("isolated_rows");
  std::vector<std::string> where;
  for (std::size_t r = 0; r < rows_.size(); ++r)
    if (failing_[r]) {
      const auto [b, h, i] = split(p_, rows_[r]);
      where.push_back(fmt::format("b={} h={} i={}", b, h, i));
    }
  const std::size_t limit = std::max<std::size_t>(2, rows_.size() / 64);
  if (where.empty() || where.size() > limit || rows_.size() < 16) return;
  diagnosis_.matches.push_back(
      {"isolated_rows",
       fmt::format("the output is right except in {} of the {} rows compared ({}): not a systematic mistake but one place the kernel gets "
                   "wrong (a store to the wrong row, a race between blocks, a tile handled differently)",
                   where.size(), rows_.size(), fmt::join(where, "; ")),
       against_truth.max_abs, against_truth.tolerance});
}

Diagnosis Diagnostician::run() {
  diagnosis_.ran = true;
  diagnosis_.rows = std::int64_t(rows_.size());
  check_rerun();
  describe_fully_masked_rows();
  // No hypothesis predicts an element left unwritten: testing them would cost time and name nothing.
  if (judging_.observed.unwritten > 0) {
    diagnosis_.note = judging_.observed.unwritten == out_.numel()
                          ? "no output element was written: the kernel did not run, or wrote somewhere else"
                          : fmt::format("{} output elements never written, which no hypothesis explains", judging_.observed.unwritten);
    return diagnosis_;
  }
  // The failure must show on the rows the diagnosis compares, else every hypothesis that changes
  // nothing there would "match".
  const Prediction truth = by_reference(p_, in_);
  const Trial against_truth = judge_prediction(truth);
  if (against_truth.pass) {
    diagnosis_.note = "the output agrees with the reference on the rows the diagnosis compares; the failure is elsewhere (LSE or the baseline)";
    return diagnosis_;
  }
  const auto d_v = static_cast<std::size_t>(p_.d_v);
  failing_.assign(rows_.size(), 0);
  for (std::size_t r = 0; r < rows_.size(); ++r)
    for (std::size_t c = 0; c < d_v && !failing_[r] && !unjudged(rows_[r]); ++c) {
      const double got = out_.get(rows_[r] * p_.d_v + std::int64_t(c));
      failing_[r] = truth.nonfinite[r] ? std::isfinite(got) : !(std::fabs(got - truth.out[r * d_v + c]) <= against_truth.tolerance);
    }
  scale_hypotheses();
  mask_hypotheses();
  masked_fill_hypotheses();
  key_layout_hypotheses();
  head_mapping_hypotheses();
  kv_offset_hypothesis();
  layout_hypothesis();
  softmax_hypotheses();
  query_axis_hypothesis();
  weights_rounding_hypotheses();
  row_max_init_hypotheses();
  masked_nonfinite_hypothesis();
  zero_output_hypothesis();
  permutation_hypotheses();
  // Only where no mistake explains the whole output: the rows that see a key are right.
  if (diagnosis_.matches.empty()) fully_masked_policy_hypothesis();
  // Rows that differ from run to run are the nondeterminism's, said already.
  if (diagnosis_.matches.empty() && !runs_differ_) isolated_rows_hypothesis(against_truth);
  std::stable_sort(diagnosis_.matches.begin(), diagnosis_.matches.end(), [](const DiagnosisMatch& a, const DiagnosisMatch& b) {
    return a.max_abs / std::max(a.tolerance, 1e-300) < b.max_abs / std::max(b.tolerance, 1e-300);
  });
  if (diagnosis_.matches.empty() && judging_.lse_agrees)
    diagnosis_.note = "the LSE agrees with the reference: the scores and the softmax statistics are right, the error is in P V or the final division";
  return diagnosis_;
}

}  // namespace

std::string Diagnosis::summary() const {
  if (!ran) return "";
  std::string text;
  if (!nondeterminism.empty())
    text = nondeterminism + (matches.empty() ? "" : "; both runs match: " + matches.front().explanation);
  else if (!matches.empty())
    text = matches.front().explanation;
  else
    text = note.empty() ? "no known mistake matches" : "no known mistake matches (" + note + ")";
  if (!fully_masked_rows.empty()) text += "; fully masked rows: " + fully_masked_rows;
  return text;
}

Diagnosis diagnose(const Problem& problem, const CaseInputs& inputs, const Tensor& out, const DiagnosisJudging& judging,
                   const DiagnosisOptions& options) {
  if (!options.enabled) return {};
  return Diagnostician(problem, inputs, out, judging, options).run();
}

}  // namespace attn

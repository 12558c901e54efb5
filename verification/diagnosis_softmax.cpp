// The diagnosis' hypotheses about the softmax: not normalised, no max subtraction, over the
// query axis, weights rounded to bf16, a finite initial row max.
#include "core/score_pipeline.hpp"
#include "verification/diagnostician.hpp"

namespace attn::diagnosis_detail {

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
  const ScorePipeline pipeline(p, in.mask);
  const long double scale = pipeline.scale();
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
    sj = pipeline.score<long double>(dot, b, h, i, j);
    spread[static_cast<std::size_t>(j)] = magnitude * scale;
    m = std::max(m, sj);
  }
  if (m == -std::numeric_limits<long double>::infinity()) return slack;
  long double sum = 0;
  for (auto& e : s) sum += (e = std::exp(e - m));
  const long double u = accumulation_unit_roundoff(working_dtype(p.numerics()));
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

void Diagnostician::softmax_hypotheses() {
  consider(M::weights_not_normalised,
           "the output matches weights not normalised: sum_j exp(s_j - max) v_j never divided by the row sum",
           by_row_rule(RowRule{.normalise = false}));
  const Prediction pr = by_row_rule(RowRule{.subtract_max = false});
  const auto overflowing = std::count(pr.nonfinite.begin(), pr.nonfinite.end(), std::uint8_t{1});
  if (overflowing > 0)
    consider(M::no_max_subtraction,
             fmt::format("the output matches exp(s) without subtracting the row max: {} of the {} rows checked overflow or underflow to NaN/Inf in {}",
                         overflowing, rows_.size(), to_string(working_dtype(p_.numerics()))),
             pr);
  else
    tried(M::no_max_subtraction);
}

// Softmax normalised down each key's column (over the queries of one (b, h)) instead of along
// the row: every score of a head is needed, so heads are predicted while the work fits in 4x the
// budget (the head of the worst element first); the rows of other heads are not compared.
template <class T>
void column_softmax_rows(const Problem& p, const CaseInputs& in, std::int64_t b, std::int64_t h, const std::vector<std::int64_t>& queries,
                         std::vector<std::vector<T>>& out) {
  const auto nq = static_cast<std::size_t>(p.n_q), nk = static_cast<std::size_t>(p.n_k);
  const std::int64_t g = p.kv_head(h);
  const T excluded = -std::numeric_limits<T>::infinity();
  std::vector<T> s(nq * nk);
  const ScorePipeline pipeline(p, in.mask);
  for (std::size_t i = 0; i < nq; ++i)
    pipeline.row_scores<T>(b, h, std::int64_t(i), p.n_k, [&](std::int64_t j) {
      T dot = 0;
      for (std::int64_t t = 0; t < p.d_k; ++t)
        dot += static_cast<T>(in.q.get(in.q.offset(b, h, std::int64_t(i), t))) * static_cast<T>(in.k.get(in.k.offset(b, g, j, t)));
      return dot;
    }, s.data() + i * nk, excluded);
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
      for (std::size_t c = 0; c < d_v; ++c) pr.out[at[k] * d_v + c] = round_to(p_.dtype_of(Role::o), static_cast<double>(exact[k][c]));
    }
    // The yardstick: the same in the working precision.
    auto naive = [&](const auto& rows) {
      for (std::size_t k = 0; k < at.size(); ++k)
        for (std::size_t c = 0; c < d_v; ++c) {
          const double err = std::fabs(round_to(p_.dtype_of(Role::o), static_cast<double>(rows[k][c])) - pr.out[at[k] * d_v + c]);
          if (std::isfinite(err)) pr.naive_max_abs = std::max(pr.naive_max_abs, err);
        }
    };
    if (working_dtype(p_.numerics()) == DType::f64) {
      column_softmax_rows<double>(p_, in_, b, h, queries, twice);
      naive(twice);
    } else {
      column_softmax_rows<float>(p_, in_, b, h, queries, single);
      naive(single);
    }
  }
  consider(M::softmax_over_queries,
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
  if (p_.dtype_of(Role::v) == DType::bf16) return;  // P V in bf16 is V's own precision
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
    if (consider(M::weights_rounded_to_bf16, variant.explanation, pr)) return;
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
    tried(M::row_max_init_finite);
    if (matched.empty()) continue;
    std::string list;
    for (std::size_t k = 0; k < matched.size(); ++k) list += (k ? ", " : "") + matched[k];
    match(M::row_max_init_finite,
          fmt::format("the output matches the row max initialised to a finite {} instead of -inf: rows whose scores all lie below it "
                     "underflow every exp(s - m) and give {}",
                      matched.size() == 1 ? list : "value (" + list + " all match)", guarded ? "zeros" : "0/0 = NaN"),
          Trial{true, worst, tolerance});
    return;
  }
}

}  // namespace attn::diagnosis_detail

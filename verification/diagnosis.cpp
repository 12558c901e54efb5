#include "verification/diagnosis.hpp"

#include <numbers>

#include "verification/diagnostician.hpp"

namespace attn {
namespace diagnosis_detail {

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
  consider(M::masked_nonfinite_leak,
           fmt::format("non-finite values in masked K/V rows leak into visible outputs: {} of the {} rows checked hold NaN/Inf and every "
                       "other value is right; skip masked keys (or select, not multiply by 0: 0 * NaN = NaN)",
                       leaking, rows_.size()),
           pr);
}

void Diagnostician::zero_output_hypothesis() {
  Prediction pr;
  pr.out.assign(rows_.size() * static_cast<std::size_t>(p_.d_v), 0.0);
  pr.nonfinite.assign(rows_.size(), 0);
  consider(M::output_all_zeros, "the output is zeros: the kernel did not run or did not write O (a zero-initialised buffer)", pr);
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
  consider(M::fully_masked_rows_off_policy,
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
  const double u = accumulation_unit_roundoff(working_dtype(p_.numerics()));
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
        const double want = round_to(p_.dtype_of(Role::o), static_cast<double>(o));
        const double tolerance = judging_.rule.k * 4 * (double(p_.n_k) + 2) * u * static_cast<double>(magnitude) +
                                 judging_.rule.floor_ulps * ulp_at(p_.dtype_of(Role::o), std::fabs(want));
        if (!(std::fabs(out_.get(row * p_.d_v + c) - want) <= tolerance)) return false;
      }
      return true;
    };
    const long double scale = p_.effective_scale();
    if (matches([](std::int64_t) { return 1.0L; })) {
      count("hold the mean of V over all keys (masked keys given one finite score)");
    } else if (p_.padding.kind != KeyPadding::Kind::none && matches([&](std::int64_t j) { return j < padding_only.key_range(b, i).second ? 1.0L : 0.0L; })) {
      count("hold the mean of V over the keys the padding leaves visible");
    } else if (!p_.window.is_none() && matches([&](std::int64_t j) {
                 const auto [lo, hi] = causal_only.key_range(b, i);
                 return lo <= j && j < hi ? 1.0L : 0.0L;
               })) {
      count(p_.window.is_causal() ? "hold the mean of V over the keys the causal mask leaves visible"
                                  : "hold the mean of V over the keys the window leaves visible");
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
  tried(M::isolated_rows);
  std::vector<std::string> where;
  for (std::size_t r = 0; r < rows_.size(); ++r)
    if (failing_[r]) {
      const auto [b, h, i] = split(p_, rows_[r]);
      where.push_back(fmt::format("b={} h={} i={}", b, h, i));
    }
  const std::size_t limit = std::max<std::size_t>(2, rows_.size() / 64);
  if (where.empty() || where.size() > limit || rows_.size() < 16) return;
  match(M::isolated_rows,
        fmt::format("the output is right except in {} of the {} rows compared ({}): not a systematic mistake but one place the kernel gets "
                   "wrong (a store to the wrong row, a race between blocks, a tile handled differently)",
                    where.size(), rows_.size(), fmt::join(where, "; ")),
        against_truth);
}

// The output is right and the LSE is not: the LSE in base 2 (an exp2-based kernel's statistics
// returned as they are), the reference's LSE times log2(e), within the LSE's own tolerance scaled
// alike.
void Diagnostician::lse_hypotheses() {
  if (judging_.lse == nullptr || judging_.lse_agrees || !(judging_.lse_tolerance > 0)) return;
  tried(M::lse_base2);
  const ReferenceResult ref = compute_reference_at(p_, in_, rows_, reference_);
  constexpr double log2e = std::numbers::log2e;
  const double tolerance = judging_.lse_tolerance * log2e;
  double worst = 0;
  bool differs_from_natural = false;
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    const double want = ref.lse[r], got = judging_.lse->get(rows_[r]);
    if (!std::isfinite(want)) continue;  // a fully masked row's -inf is the same in every base
    const double error = std::fabs(got - want * log2e);
    if (!(error <= tolerance)) return;
    worst = std::max(worst, error);
    differs_from_natural |= !(std::fabs(got - want) <= judging_.lse_tolerance);
  }
  if (!differs_from_natural) return;
  match(M::lse_base2,
        "the LSE matches log2 of the row sum (max * log2(e) + log2(sum)): the exp2 softmax's statistics returned in base 2; the "
        "LSE is the natural log (divide by log2(e), or multiply by ln 2)",
        Trial{true, worst, tolerance});
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
    lse_hypotheses();
    if (!diagnosis_.matches.empty()) return diagnosis_;
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
  softcap_hypotheses();
  alibi_hypotheses();
  sink_hypotheses();
  dropout_hypotheses();
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

}  // namespace diagnosis_detail

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
  return diagnosis_detail::Diagnostician(problem, inputs, out, judging, options).run();
}

}  // namespace attn

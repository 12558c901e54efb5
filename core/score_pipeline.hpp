#pragma once
// The score pipeline (core/README.md, "The score pipeline"), written once for the CPU: how the
// product <q_i, k_j> of a visible key becomes its score, and which keys are visible. Every CPU
// computation of scores goes through it in its own arithmetic T: cpu_naive, cpu_blocked's scalar
// path, the diagnosis's hypotheses, the mutants, the scale study and the reference (in its own
// precision; its error bound is its own, reference/README.md). For row (b, h, i) and key j:
//   1. s = <q_i, k_j> * scale (the scale after the product: folding it into Q would round Q);
//   2. soft-capping, when the problem has one (softcap=c): s = c * tanh(s / c), |s| < c;
//   3. the additive terms: + bias[b, h, i, j], ALiBi's -slope_h |i + delta - j| materialised in the
//      mask's bias (core/mask.hpp);
//   4. visibility: the window, the padding and the boolean mask, by intersection (Mask::visible);
//      an invisible key is excluded exactly (its weight is 0, not a large negative score);
//   5. the sink, when the problem has one (sink=, sinks=): head h's logit sigma_h joins the row's
//      softmax as one more term of the denominator that carries no value,
//      P_ij = exp(s_ij - m) / (exp(sigma_h - m) + sum_j' exp(s_ij' - m)), m = max(sigma_h, max_j s_ij),
//      LSE = m + ln(exp(sigma_h - m) + sum_j exp(s_ij - m)). A row that sees no key stays fully
//      masked: zeros and an LSE of -inf, sink or not.
//   6. dropout, when the problem has it (dropout=p): after the softmax each weight P_ij is kept
//      (Z_ij = 1) or dropped (Z_ij = 0) and O_i = sum_j P_ij Z_ij / (1 - p) v_j; the LSE is step 5's.
//      Z is the implementation's own random stream (kept()); the reference and the naive yardstick
//      take the one it reported (Mask::with_keep).
// A new score modification joins here (a field of Problem, a step of score()), and an
// implementation supports it only once it declares so (impls/implementation.hpp, Capabilities).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/inputs.hpp"
#include "core/mask.hpp"
#include "core/problem.hpp"

namespace attn {

// The steps of the pipeline beyond the scale and the masks, named as data: an implementation
// computes only those its Capabilities list, so a new one is unsupported everywhere until an
// implementation lists it. One row each: its name, what a skip's reason calls it, and whether a
// problem uses it.
enum class ScoreModification { softcap, sink, dropout };

// A scalar a kernel is given for a modification a problem uses, named once for every carrier: the
// plugin ABI's call settings (attnbench_call_setting), the Python conventions' keyword and the
// Python judge's, settings.json's key and the case manifests' key, and the reports' grouping. A
// seed is an integer, exact to 64 bits; every other setting is real. `set` puts a value onto a
// problem (what a user's settings give); Problem::validate() then checks it, naming the field.
struct SettingValue {
  double real = 0;             // the value (an integer setting's too, as the nearest double)
  std::uint64_t integer = 0;   // an integer setting's exact value; 0 for a real one
  bool operator==(const SettingValue&) const = default;
};
struct ScoreSetting {
  std::string_view name;  // "softcap", "dropout_p", "dropout_seed"
  bool integer;
  SettingValue (*get)(const Problem&);  // its value in a problem that uses the modification
  void (*set)(Problem&, SettingValue);
};
inline constexpr ScoreSetting softcap_settings[] = {
    {"softcap", false, [](const Problem& p) { return SettingValue{p.softcap.value_or(0.0)}; },
     [](Problem& p, SettingValue v) { p.softcap = v.real; }},
};
inline constexpr ScoreSetting dropout_settings[] = {
    // p as the repro string's dropout= holds it: rounded to f32.
    {"dropout_p", false, [](const Problem& p) { return SettingValue{p.dropout.p}; },
     [](Problem& p, SettingValue v) { p.dropout.p = double(float(v.real)); }},
    {"dropout_seed", true, [](const Problem& p) { return SettingValue{double(dropout_seed(p)), dropout_seed(p)}; },
     [](Problem& p, SettingValue v) { p.dropout.seed = v.integer; }},
};

struct ScoreModificationRow {
  ScoreModification id;
  std::string_view name;         // "softcap": declarations, the plugin ABI's names, JSON
  std::string_view description;  // "soft-capping (softcap=)": skip reasons, attnbench list
  bool (*used_by)(const Problem&);
  std::span<const ScoreSetting> settings;  // its scalars; a tensor (the sink's logits) is a role instead
};
inline constexpr std::array<ScoreModificationRow, 3> score_modification_rows{{
    {ScoreModification::softcap, "softcap", "soft-capping (softcap=)", [](const Problem& p) { return p.softcap.has_value(); }, softcap_settings},
    {ScoreModification::sink, "sink", "attention sinks (sink=, sinks=)", [](const Problem& p) { return p.sinks.enabled; }, {}},
    {ScoreModification::dropout, "dropout", "dropout with its keep mask reported (dropout=)", [](const Problem& p) { return p.dropout.enabled(); },
     dropout_settings},
}};
inline constexpr std::array<ScoreModification, score_modification_rows.size()> all_score_modifications = [] {
  std::array<ScoreModification, score_modification_rows.size()> ids{};
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = score_modification_rows[i].id;
  return ids;
}();
static_assert([] {
  for (std::size_t i = 0; i < score_modification_rows.size(); ++i)
    if (score_modification_rows[i].id != ScoreModification(i)) return false;
  return true;
}(), "score_modification_rows must be in ScoreModification order (row_of indexes it)");
inline constexpr const ScoreModificationRow& row_of(ScoreModification m) { return score_modification_rows[static_cast<std::size_t>(m)]; }
inline constexpr std::string_view to_string(ScoreModification m) { return row_of(m).name; }
inline constexpr std::string_view describe(ScoreModification m) { return row_of(m).description; }
// Those a problem uses.
inline std::vector<ScoreModification> score_modifications_of(const Problem& p) {
  std::vector<ScoreModification> used;
  for (const ScoreModificationRow& row : score_modification_rows)
    if (row.used_by(p)) used.push_back(row.id);
  return used;
}

// The modification of that name, or none; every modification's name, for messages ("softcap,
// sink, dropout"): what a declaration's list names (capability files, the plugin ABI).
inline std::optional<ScoreModification> score_modification_named(std::string_view name) {
  for (const ScoreModificationRow& row : score_modification_rows)
    if (row.name == name) return row.id;
  return std::nullopt;
}
inline std::string score_modification_names() {
  std::string names;
  for (const ScoreModificationRow& row : score_modification_rows) names += (names.empty() ? "" : ", ") + std::string(row.name);
  return names;
}

// The setting of that name, or null; every setting's name, for messages ("softcap, dropout_p, ...").
inline const ScoreSetting* find_score_setting(std::string_view name) {
  for (const ScoreModificationRow& row : score_modification_rows)
    for (const ScoreSetting& s : row.settings)
      if (s.name == name) return &s;
  return nullptr;
}
inline std::string score_setting_names() {
  std::string names;
  for (const ScoreModificationRow& row : score_modification_rows)
    for (const ScoreSetting& s : row.settings) names += (names.empty() ? "" : ", ") + std::string(s.name);
  return names;
}
// The settings of the modifications a problem uses, with their values, in row order: what each
// carrier hands a kernel.
struct NamedSetting {
  const ScoreSetting* setting;  // a row's, so its name is a NUL-terminated literal
  SettingValue value;
  bool operator==(const NamedSetting&) const = default;
};
inline std::vector<NamedSetting> score_settings_of(const Problem& p) {
  std::vector<NamedSetting> settings;
  for (const ScoreModificationRow& row : score_modification_rows)
    if (row.used_by(p))
      for (const ScoreSetting& s : row.settings) settings.push_back({&s, s.get(p)});
  return settings;
}

// The built-in implementations' dropout stream (cpu_naive, cpu_blocked, the mutants): whether the
// weight of (b, h, i, j) is kept, a counter-based hash of the seed and the element's flat index
// ((b h_q + h) n_q + i) n_k + j, so that every element's draw is independent of the order the
// elements are computed in (as Philox gives FlashAttention's kernels). Kept with probability 1 - p.
inline bool builtin_dropout_keeps(std::uint64_t seed, double p, std::uint64_t index) {
  auto mix = [](std::uint64_t z) {  // SplitMix64's finaliser: every input bit reaches every output bit
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  const std::uint64_t bits = mix(mix(seed + 0x9e3779b97f4a7c15ULL) ^ (index * 0xd1b54a32d192ed03ULL + 0x632be59bd9b4e019ULL));
  return double(bits >> 11) * 0x1p-53 >= p;
}

class ScorePipeline {
 public:
  ScorePipeline(const Problem& problem, const Mask& mask)
      : mask_(mask), scale_(problem.effective_scale()), softcap_(problem.softcap.value_or(0.0)), sinks_(sink_logits(problem)),
        dropout_(problem.dropout.p), dropout_seed_(dropout_seed(problem)), h_q_(problem.h_q), n_q_(problem.n_q), n_k_(problem.n_k) {}

  double scale() const { return scale_; }
  const Mask& mask() const { return mask_; }
  // Whether anything but the scale acts on a product: with nothing else, a vectorised path may
  // scale a whole tile of products at once (cpu_blocked).
  bool beyond_scale() const { return mask_.has_bias() || softcap_ > 0; }

  // Step 2 alone, on a scaled product s.
  template <class T>
  T capped(T s) const {
    if (softcap_ <= 0) return s;
    using std::tanh;
    const T c = static_cast<T>(softcap_);
    return c * tanh(s / c);
  }
  // Step 2's error analysis, which the reference's bound takes from here (reference/README.md), so
  // that a change to step 2 brings its own: whether it changes the scaled product at all; its
  // slope f'(x) at x (how a small error in x reaches the score); and the absolute error of f(x)
  // given an error e in x, with |x| = x_abs and |f(x)| = modified_abs, in arithmetic of unit
  // roundoff u whose elementary functions err by fn_error (relative). Soft-capping, c tanh(x / c):
  // the slope sech^2(x / c) is at most 1 and tiny where |x| >> c (and the result stays in (-c, c):
  // at most 2c), plus the step's own rounding: the division (u |x| sech^2(x / c) <= u min(|x|, c/2)),
  // tanh (fn_error |c tanh|) and the product by c (u |c tanh|).
  bool modifies_product() const { return softcap_ > 0; }
  template <class Real>
  Real product_slope(const Real& x) const {
    if (softcap_ <= 0) return Real(1);
    using std::cosh;
    const Real ch = cosh(x / Real(softcap_));
    return Real(1) / (ch * ch);
  }
  double product_step_error(double e, double x_abs, double modified_abs, double u, double fn_error) const {
    if (softcap_ <= 0) return 0.0;
    const double c = softcap_;
    double through = std::min(e, 2 * c);
    if (e < x_abs) {  // the slope is largest where |x| is smallest within e of it
      const double ch = std::cosh((x_abs - e) / c);
      through = std::min(through, e / (ch * ch));
    }
    return through + u * std::min(x_abs, 0.5 * c) + (fn_error + u) * modified_abs;
  }

  // Steps 1 to 3 for a visible key, in T's arithmetic, in the pipeline's order.
  template <class T>
  T score(T dot, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return capped<T>(dot * static_cast<T>(scale_)) + static_cast<T>(mask_.bias(b, h, i, j));
  }
  // Step 4.
  bool visible(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const { return mask_.visible(b, h, i, j); }
  std::pair<std::int64_t, std::int64_t> key_range(std::int64_t b, std::int64_t i) const { return mask_.key_range(b, i); }
  // Step 5: query head h's sink logit, or none.
  bool has_sink() const { return !sinks_.empty(); }
  std::optional<double> sink(std::int64_t h) const {
    return sinks_.empty() ? std::nullopt : std::optional<double>(sinks_[static_cast<std::size_t>(h)]);
  }

  // Step 6: whether the weight of (b, h, i, j) is kept, from the keep mask the mask carries (one an
  // implementation reported, for the reference and the yardstick) or else the built-in stream.
  bool has_dropout() const { return dropout_ > 0; }
  bool kept(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    if (dropout_ <= 0) return true;
    if (mask_.has_keep()) return mask_.kept(b, h, i, j);
    return builtin_dropout_keeps(dropout_seed_, dropout_, static_cast<std::uint64_t>(((b * h_q_ + h) * n_q_ + i) * n_k_ + j));
  }
  // Row (b, h, i)'s keep mask as kept() draws it, written into `keep` ([b, h_q, n_q, n_k], 1 kept,
  // 0 dropped, every key's: a masked key's entry does not matter): what an implementation reports.
  void write_keep_row(Tensor& keep, std::int64_t b, std::int64_t h, std::int64_t i) const {
    for (std::int64_t j = 0; j < n_k_; ++j) keep.set(((b * h_q_ + h) * n_q_ + i) * n_k_ + j, kept(b, h, i, j) ? 1.0 : 0.0);
  }
  // What a kept weight is multiplied by, 1 / (1 - p) in T (1 without dropout).
  template <class T>
  T dropout_rescale() const {
    return dropout_ > 0 ? T(1) / (T(1) - static_cast<T>(dropout_)) : T(1);
  }

  // Row (b, h, i)'s scores s[0, n_k): score(dot(j)) for each visible key, `excluded` (usually
  // -inf: exp(-inf - m) is exactly 0) for the others. dot(j) returns <q_i, k_j> in T.
  template <class T, class Dot>
  void row_scores(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t n_k, Dot&& dot, T* s, T excluded) const {
    for (std::int64_t j = 0; j < n_k; ++j) s[j] = visible(b, h, i, j) ? score<T>(dot(j), b, h, i, j) : excluded;
  }

 private:
  const Mask& mask_;
  double scale_;
  double softcap_;  // 0: none
  std::vector<double> sinks_;  // per query head; empty: none
  double dropout_;             // 0: none
  std::uint64_t dropout_seed_;
  std::int64_t h_q_, n_q_, n_k_;
};

// The whole keep mask of the built-in stream (builtin_dropout_keeps) for a problem with dropout,
// as an implementation on that stream reports it (make_keep's tensor).
inline Tensor builtin_keep_mask(const Problem& p, const Mask& mask) {
  const ScorePipeline pipeline(p, mask);
  Tensor keep = make_keep(p);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) pipeline.write_keep_row(keep, b, h, i);
  return keep;
}

}  // namespace attn

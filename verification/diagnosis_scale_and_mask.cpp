// The diagnosis' hypotheses about the scale (1, 1/d_k, a fitted constant) and the mask (causal
// and sliding-window alignment, ignored parts, a window's lower bound ignored or off by one,
// off-by-one limits, dropped keys, finite fills).
#include "verification/diagnostician.hpp"

namespace attn::diagnosis_detail {

std::string expected_scale_text(const Problem& p) {
  return p.scale ? fmt::format("the given scale {:.6g}", *p.scale) : fmt::format("1/sqrt(d_k) = {:.6g}", p.effective_scale());
}

void Diagnostician::scale_hypotheses() {
  const double expected = p_.effective_scale();
  bool matched = false;
  if (expected != 1.0)
    matched |= try_scale(1.0, M::scale_one,
                         fmt::format("the output matches scale = 1: the scores were not scaled (expected {})", expected_scale_text(p_)));
  const double over_dk = 1.0 / double(p_.d_k);
  if (expected != over_dk && over_dk != 1.0)
    matched |= try_scale(over_dk, M::scale_one_over_dk,
                         fmt::format("the output matches scale = 1/d_k = {:.6g}: divided by d_k instead of sqrt(d_k)", over_dk));
  if (!matched) fit_scale();
}

// Soft-capping (the score pipeline's step 2) ignored: the reference without it; clipped to [-c, c]
// or applied after the bias: row rules (the reference computes the cap as asked only).
void Diagnostician::softcap_hypotheses() {
  if (!p_.softcap) return;
  const double c = *p_.softcap;
  Problem uncapped = p_;
  uncapped.softcap.reset();
  consider(M::softcap_ignored,
           fmt::format("the output matches no soft-cap: the scaled scores were used as they are (expected {:g} tanh(s / {:g}))", c, c),
           by_reference(uncapped, in_));
  consider(M::softcap_clipped,
           fmt::format("the output matches the scores clipped to [-{:g}, {:g}]: a clip where the soft-cap {:g} tanh(s / {:g}) was asked", c, c, c, c),
           by_row_rule(RowRule{.softcap_mistake = M::softcap_clipped}));
  if (in_.mask.has_bias())
    consider(M::softcap_after_bias,
             fmt::format("the output matches the soft-cap applied after the bias, {:g} tanh((s + bias) / {:g}): the bias (or ALiBi) "
                         "belongs after the cap",
                         c, c),
             by_row_rule(RowRule{.softcap_mistake = M::softcap_after_bias}));
}

// ALiBi's slopes in reverse head order, or its bias added with the wrong sign: the reference on
// the case's inputs with the bias as each mistake writes it (alibi_bias_as_written).
void Diagnostician::alibi_hypotheses() {
  if (!p_.bias.enabled || p_.bias.kind != BiasSpec::Kind::alibi) return;
  auto with_alibi_as = [&](MistakeId id) { return CaseInputs{in_.q, in_.k, in_.v, in_.mask.with_bias(alibi_bias_as_written(id, p_))}; };
  if (p_.h_q > 1)
    consider(M::alibi_slopes_reversed,
             fmt::format("the output matches ALiBi's slopes in reverse head order: head h used head {} - h's slope (head 0 has the "
                         "steepest, {:g})",
                         p_.h_q - 1, alibi_slope(0, p_.h_q)),
             by_reference(p_, with_alibi_as(M::alibi_slopes_reversed)));
  consider(M::alibi_sign_flipped,
           "the output matches ALiBi's bias added with the wrong sign, + slope |i + delta - j|: distant keys favoured instead of "
           "penalised",
           by_reference(p_, with_alibi_as(M::alibi_sign_flipped)));
}

// The sink left out of the denominator: the reference without it; its term added to every
// weight's numerator too: a row rule (the reference computes the sink as asked only).
void Diagnostician::sink_hypotheses() {
  if (!p_.sinks.enabled) return;
  Problem without = p_;
  without.sinks = {};
  consider(M::sink_ignored,
           "the output matches no sink: the softmax over the keys alone, without the head's sink logit in its denominator",
           by_reference(without, in_));
  consider(M::sink_in_numerator,
           "the output matches the sink's term exp(sigma - m) added to every key's weight as well as to the denominator: the sink "
           "belongs to the denominator alone (it carries no value)",
           by_row_rule(RowRule{.sink_mistake = M::sink_in_numerator}));
}

// Dropout's kept weights not rescaled: a row rule on the inputs with the reported keep mask.
void Diagnostician::dropout_hypotheses() {
  if (!p_.dropout.enabled()) return;
  consider(M::dropout_not_rescaled,
           fmt::format("the output matches dropout's kept weights without the 1 / (1 - p) = {:g} rescale: every output is {:g} times "
                       "too small",
                       1.0 / (1.0 - p_.dropout.p), 1.0 - p_.dropout.p),
           by_row_rule(RowRule{.dropout_rescaled = false}));
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
    if (try_scale(n.value, M::scale_constant,
                  fmt::format("the output matches scale = {} = {:.6g}: {} (expected {})", n.name, n.value, n.why, expected_scale_text(p_))))
      return;
  }
  try_scale(fitted, M::scale_constant,
            fmt::format("the output matches scale = {:.6g} (fitted): the scores were scaled by a wrong constant (expected {})", fitted,
                        expected_scale_text(p_)));
}

void Diagnostician::mask_hypotheses() {
  if (p_.window.is_causal()) {  // hypotheses about a causal mask
    if (p_.n_q != p_.n_k) {
      Problem hp = p_;
      const bool was_bottom_right = p_.window == Window::of(Causal::bottom_right);
      hp.window = Window::of(was_bottom_right ? Causal::top_left : Causal::bottom_right);
      consider(M::causal_alignment_swapped,
               was_bottom_right
                   ? "the output matches a top-left causal mask where bottom-right was asked: query i saw keys j <= i instead of j <= i + (n_k - n_q)"
                   : "the output matches a bottom-right causal mask where top-left was asked: query i saw keys j <= i + (n_k - n_q) instead of j <= i",
               by_reference(hp, with_mask_of(hp)));
    }
    Problem hp = p_;
    hp.window = Window::of(Causal::none);
    consider(M::causal_ignored, "the output matches no causal mask: the causal part of the mask was ignored",
             by_reference(hp, with_mask_of(hp)));
  } else if (!p_.window.is_none()) {  // another window (a sliding window): its known mistakes
    const Window w = p_.window;
    auto with_window = [&](Window hw, MistakeId id, const std::string& explanation) {
      Problem hp = p_;
      hp.window = hw;
      consider(id, explanation, by_reference(hp, with_mask_of(hp)));
    };
    const std::string asked = to_string(w);
    if (p_.n_q != p_.n_k) {
      Window swapped = w;
      swapped.align = w.align == Align::top_left ? Align::bottom_right : Align::top_left;
      with_window(swapped, M::window_alignment_swapped,
                  fmt::format("the output matches window {} where {} was asked: the diagonal placed {} (query i's diagonal key is {})",
                              to_string(swapped), asked, to_string(swapped.align),
                              swapped.align == Align::top_left ? "i" : "i + (n_k - n_q)"));
    }
    if (w.left != Window::unbounded) {
      Window unbounded_left = w;
      unbounded_left.left = Window::unbounded;
      with_window(unbounded_left, M::window_lower_bound_ignored,
                  fmt::format("the output matches window {} where {} was asked: the {} keys before the diagonal were not the only ones seen "
                              "(the lower bound was ignored)",
                              to_string(unbounded_left), asked, w.left));
      for (const std::int64_t left : {w.left + 1, w.left - 1}) {
        if (left < 0) continue;
        Window off = w;
        off.left = left;
        with_window(off, M::window_lower_bound_off_by_one,
                    fmt::format("the output matches window {} where {} was asked: {} keys before the diagonal instead of {}", to_string(off),
                                asked, left, w.left));
      }
    }
    with_window(Window{}, M::window_ignored, fmt::format("the output matches no window: window {} was ignored", asked));
  }
  if (p_.padding.kind != KeyPadding::Kind::none) {
    Problem hp = p_;
    hp.padding = {};
    consider(M::padding_ignored, "the output matches no key padding: the valid lengths were ignored", by_reference(hp, with_mask_of(hp)));
  }
  // Off-by-one limits: each a per-query padding (the key limit of row (b, i) changed), intersected
  // with the case's own masks. Limits that give the same visibility are one hypothesis, named by
  // the first: a partial last tile of one key is the last key.
  struct Limits {
    MistakeId name;
    std::string explanation;
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
  const std::int64_t delta = p_.window.delta(p_.n_q, p_.n_k);
  if (p_.window.is_causal())
    limits.push_back({M::causal_strict,
                      fmt::format("the output matches a strict causal mask: query i saw keys j < i{} instead of j <= i{} (the diagonal key masked)",
                                  delta ? " + (n_k - n_q)" : "", delta ? " + (n_k - n_q)" : ""),
                      each_row([&](std::int64_t b, std::int64_t i) { return std::min(in_.mask.key_range(b, i).second, i + delta); })});
  if (p_.padding.kind != KeyPadding::Kind::none) {
    // The padding limit alone, one further; causality still applies (the causal limit is kept).
    Limits leak{M::padding_one_key_leaks,
                "the output matches key padding off by one: key valid_len (the first padded key) was visible too (j <= valid_len instead of j < valid_len)",
                {}};
    leak.valid_len = each_row([&](std::int64_t b, std::int64_t i) {
      const auto& v = p_.padding.valid_len;
      return (p_.padding.kind == KeyPadding::Kind::per_batch ? v[static_cast<std::size_t>(b)] : v[static_cast<std::size_t>(b * p_.n_q + i)]) + 1;
    });
    limits.push_back(std::move(leak));
    // Batch 0's valid length for every batch: a kernel that reads valid_len[0] (or a scalar length).
    if (p_.padding.kind == KeyPadding::Kind::per_batch && p_.batch > 1)
      limits.push_back({M::padding_batch0_for_all,
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
    limits.push_back({M::last_key_tile_dropped,
                      fmt::format("the output matches keys {}..{} dropped: the partial last key tile (tile of {} keys, n_k = {}) was not processed",
                                  cut, p_.n_k - 1, tile_text, p_.n_k),
                      each_row([&](std::int64_t b, std::int64_t i) { return std::min(in_.mask.key_range(b, i).second, at); })});
  }
  limits.push_back({M::last_key_dropped,
                    "the output matches the last key of each row's range dropped: keys j < limit - 1 processed instead of j < limit (limit: "
                    "n_k, the causal limit or the valid length, whichever is smallest)",
                    each_row([&](std::int64_t b, std::int64_t i) { return in_.mask.key_range(b, i).second - 1; })});
  limits.push_back({M::last_key_dropped, fmt::format("the output matches key n_k - 1 = {} dropped for every row: the key loop stops one short", p_.n_k - 1),
                    each_row([&](std::int64_t b, std::int64_t i) { return std::min(in_.mask.key_range(b, i).second, p_.n_k - 1); })});
  std::vector<std::vector<std::int64_t>> seen;
  std::vector<Limits*> distinct;
  for (Limits& l : limits) {
    // The padding hypotheses' limits hold only the padding; the others include the case's own limits.
    std::vector<std::int64_t> effective = l.valid_len;
    if (l.name == M::padding_one_key_leaks || l.name == M::padding_batch0_for_all) {
      Problem causal_only = p_;
      causal_only.padding = {};
      const Mask mask = in_.mask.with_visibility_of(causal_only);
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
  tried(M::masked_fill);
  if (matched.empty()) return;
  std::string explanation;
  if (matched.size() == 1) {
    explanation = fmt::format("the output matches masked keys given the finite score {} instead of being excluded", matched[0]);
  } else {
    std::string list;
    for (std::size_t k = 0; k < matched.size(); ++k) list += (k ? ", " : "") + matched[k];
    explanation = fmt::format("the output matches masked keys given a finite score instead of being excluded (fills {} all match)", list);
  }
  match(M::masked_fill, explanation, Trial{true, worst, tolerance});
}

}  // namespace attn::diagnosis_detail

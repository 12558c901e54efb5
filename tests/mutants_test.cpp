// The mutants of tests/mutants/ are what they claim: the control (the same code with no
// mistake) passes verify, each mutant fails verify on at least one case, and on every case where
// its mistake cannot show (no causal mask for causal_ignored, h_q == 1 for the head swap, ...)
// it passes with exactly the control's error, i.e. it makes that one mistake and no other.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/case_sets.hpp"
#include "core/inputs.hpp"
#include "verification/verify.hpp"
#include "tests/mutants/mutants.hpp"

namespace attn::mutants {
namespace {

// quick_cases() and default cases chosen so every mistake shows somewhere: an explicit scale,
// GQA 4:1 with n_k = 129 (a partial key tile), the large regime in f32 and f64, bottom-right
// causal with n_q > n_k, per-query padding with empty rows in f16, a sparse boolean mask.
std::vector<Problem> mutant_cases() {
  std::vector<Problem> cases = quick_cases();
  const std::vector<Problem> all = default_cases();
  // default_cases() holds 4 dtypes per scenario: index scenario * 4 + dtype (f64, f32, f16, bf16).
  const std::pair<int, int> picks[] = {{2, 1},  {3, 2},  {6, 1},  {7, 0},  {8, 1},
                                       {12, 1}, {13, 0}, {15, 2}, {20, 2}, {23, 1}};
  for (auto [scenario, dtype] : picks) cases.push_back(all.at(std::size_t(scenario * 4 + dtype)));
  // Soft-capped, sliding windows, ALiBi: the f32 and bf16 ones.
  for (const Problem& p : all) {
    const bool variant = p.softcap || p.sinks.enabled || p.dropout.enabled() || !p.window.as_causal() ||
                         (p.bias.enabled && p.bias.kind == BiasSpec::Kind::alibi);
    if (variant && (p.dtype == DType::f32 || p.dtype == DType::bf16)) cases.push_back(p);
  }
  return cases;
}

bool same_visibility(std::optional<Mistake> mistake, const Problem& p, const Mask& mask) {
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i)
        for (std::int64_t j = 0; j < p.n_k; ++j)
          if (sees(mistake, p, mask, b, h, i, j) != mask.visible(b, h, i, j)) return false;
  return true;
}

// Whether the mistake cannot change anything on this problem: the mutant then runs exactly the
// control's arithmetic. no_max_subtraction is never inert (exp(s) / sum rounds differently).
bool inert(std::optional<Mistake> which, const Problem& p) {
  if (!which) return true;  // the control
  const Mistake mistake = *which;
  switch (mistake) {
    case Mistake::scale_one: return p.effective_scale() == 1.0;
    case Mistake::scale_one_over_dk: return p.scale.has_value() || p.d_k == 1;
    case Mistake::masked_fill: return Mask(p).count_visible() == p.batch * p.h_q * p.n_q * p.n_k;
    case Mistake::causal_ignored:
    case Mistake::causal_alignment_swapped:
    case Mistake::padding_ignored:
    case Mistake::last_key_tile_dropped: return same_visibility(mistake, p, Mask(p));
    case Mistake::no_max_subtraction: return false;
    case Mistake::kv_head_mapping:
      for (std::int64_t h = 0; h < p.h_q; ++h)
        if (h % p.h_kv != p.kv_head(h)) return false;
      return true;
    case Mistake::weights_not_normalised: return p.n_k == 1 && !p.sinks.enabled;  // a sink is one more term of the sum
    case Mistake::output_rows_permuted: return p.h_q == 1;
    case Mistake::softmax_over_queries: return p.n_q == 1 && p.n_k == 1 && !p.sinks.enabled;  // a column of one query is its row
    case Mistake::causal_strict:
    case Mistake::padding_one_key_leaks:
    case Mistake::last_key_dropped: return same_visibility(mistake, p, Mask(p));
    case Mistake::weights_rounded_to_bf16: return false;
    case Mistake::kv_head_as_query_head: return p.h_q == p.h_kv;
    case Mistake::row_max_init_finite: return false;  // it shows only where every score of a row lies below -1e4
    // 0 * v adds a signed zero, which changes no sum: with finite V (every input verify draws)
    // the mistake cannot show. tests/diagnosis_test.cpp puts NaN in masked V rows to catch it.
    case Mistake::masked_nonfinite_leak: return true;
    case Mistake::output_all_zeros: return false;
    case Mistake::nondeterministic: return p.rows() < 2;
    case Mistake::softcap_ignored:
    case Mistake::softcap_clipped: return !p.softcap;
    case Mistake::softcap_after_bias: return !p.softcap || !p.bias.enabled;
    case Mistake::window_alignment_swapped:
    case Mistake::window_lower_bound_off_by_one: return same_visibility(mistake, p, Mask(p));
    case Mistake::alibi_slopes_reversed:
    case Mistake::alibi_sign_flipped: {
      if (!p.bias.enabled || p.bias.kind != BiasSpec::Kind::alibi) return true;
      const Tensor written = alibi_bias_as_written(mistake, p), right = Mask(p).bias_tensor();
      for (std::int64_t e = 0; e < right.numel(); ++e)
        if (written.get(e) != right.get(e)) return false;
      return true;
    }
    case Mistake::lse_base2: return false;
    case Mistake::sink_ignored:
    case Mistake::sink_in_numerator: return !p.sinks.enabled;
    case Mistake::dropout_not_rescaled: return !p.dropout.enabled();
    default: ADD_FAILURE() << to_string(mistake) << " has a mutant but no inert() rule"; return false;
  }
}

struct Shared {
  std::vector<Problem> cases;
  std::vector<std::unique_ptr<Implementation>> owned;  // control first, then all_mistakes() order
  VerifyRun run;
};

const Shared& shared() {
  static const std::unique_ptr<Shared> instance = [] {
    auto s = std::make_unique<Shared>();
    s->cases = mutant_cases();
    s->owned.push_back(make_correct_control());
    for (auto& m : make_all()) s->owned.push_back(std::move(m));
    std::vector<const Implementation*> impls;
    for (const auto& m : s->owned) impls.push_back(m.get());
    VerifyOptions options;
    options.diagnosis.enabled = false;  // verdicts are what this tests; tests/diagnosis_test.cpp tests the diagnosis
    s->run = verify(impls, s->cases, options);
    return s;
  }();
  return *instance;
}

const Record& record_of(const std::string& implementation, std::size_t case_index) {
  for (const Record& r : shared().run.records)
    if (r.implementation == implementation && r.context->index == case_index) return r;
  throw std::runtime_error("no record for " + implementation);
}

std::string describe(const Record& r) {
  std::string s = std::string(to_string(r.status)) + " " + r.context->problem.repro();
  for (const auto& reason : r.verdict.reasons) s += "\n    " + reason;
  return s;
}

std::string implementation_name(Mistake m) { return "mutant_" + std::string(to_string(m)); }

TEST(Mutants, ThirtyTwoDistinctNamedMutantsAndAControlThatPromiseEverything) {
  const auto all = make_all();
  ASSERT_EQ(all.size(), 32u);
  ASSERT_EQ(all_mistakes().size(), 32u);
  std::set<std::string> names;
  for (std::size_t n = 0; n < all.size(); ++n) {
    EXPECT_EQ(all[n]->name(), implementation_name(all_mistakes()[n]));
    names.insert(all[n]->name());
  }
  EXPECT_EQ(names.size(), 32u);
  const auto control = make_correct_control();
  EXPECT_EQ(control->name(), "mutant_control");
  EXPECT_EQ(names.count(control->name()), 0u);
  for (const Implementation* impl : {control.get(), all[0].get(), all[10].get()}) {
    const Capabilities c = impl->describe();
    EXPECT_TRUE(c.returns_lse && c.returns_weights && c.deterministic) << impl->name();
    EXPECT_EQ(c.fully_masked, FullyMaskedPolicy::zeros);
    EXPECT_EQ(c.dtypes.size(), 4u);
    EXPECT_TRUE(impl->supports(quick_cases().front()).ok);
  }
}

// The mutants' local copies of the mask rules agree with Mask wherever their mistake does not
// apply: the boolean mask's broadcasts, padding of both kinds and the causal limits.
TEST(Mutants, LocalMaskRulesAgreeWithMaskWhereTheMistakeDoesNotApply) {
  int checked = 0;
  for (Broadcast bc : {Broadcast::shared, Broadcast::per_batch, Broadcast::per_head, Broadcast::per_batch_head}) {
    for (auto kind : {KeyPadding::Kind::none, KeyPadding::Kind::per_batch, KeyPadding::Kind::per_query}) {
      for (Causal causal : {Causal::none, Causal::top_left, Causal::bottom_right}) {
        for (auto [n_q, n_k] : {std::pair<std::int64_t, std::int64_t>{7, 7}, {5, 9}, {9, 5}}) {
          Problem p;
          p.batch = 2, p.h_q = 3, p.h_kv = 1, p.n_q = n_q, p.n_k = n_k, p.d_k = p.d_v = 4;
          p.window = Window::of(causal);
          p.bool_mask = {true, 0.6, bc};
          p.seed = std::uint64_t(checked);
          p.padding.kind = kind;
          if (kind == KeyPadding::Kind::per_batch) p.padding.valid_len = {n_k - 2, n_k};
          if (kind == KeyPadding::Kind::per_query)
            for (std::int64_t e = 0; e < p.batch * n_q; ++e) p.padding.valid_len.push_back((e * 3) % (n_k + 1));
          p.validate();
          const Mask mask(p);
          SCOPED_TRACE(p.repro());
          EXPECT_TRUE(same_visibility(std::nullopt, p, mask));
          EXPECT_EQ(same_visibility(Mistake::causal_ignored, p, mask), causal == Causal::none);
          const bool alignment_matters = causal != Causal::none && n_q != n_k;
          EXPECT_EQ(same_visibility(Mistake::causal_alignment_swapped, p, mask), !alignment_matters);
          if (kind == KeyPadding::Kind::none) {
            EXPECT_TRUE(same_visibility(Mistake::padding_ignored, p, mask));
          }
          EXPECT_TRUE(same_visibility(Mistake::last_key_tile_dropped, p, mask));  // n_k <= 16
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 108);
}

TEST(Mutants, TheControlPassesVerifyOnEveryCase) {
  const Shared& s = shared();
  EXPECT_EQ(s.run.skipped(), 0);
  for (std::size_t c = 0; c < s.cases.size(); ++c) {
    const Record& r = record_of("mutant_control", c);
    EXPECT_EQ(r.status, Status::pass) << describe(r);
    EXPECT_TRUE(r.metrics.has_lse);
  }
  std::cout << "[          ] mutant_control passes verify on all " << s.cases.size() << " cases\n";
}

TEST(Mutants, EachMutantFailsVerifySomewhereAndOnlyWhereItsMistakeCanShow) {
  const Shared& s = shared();
  for (Mistake m : all_mistakes()) {
    const std::string name = implementation_name(m);
    SCOPED_TRACE(name);
    int kills = 0, inert_cases = 0;
    std::string killed;
    for (std::size_t c = 0; c < s.cases.size(); ++c) {
      const Record& r = record_of(name, c);
      const Record& control = record_of("mutant_control", c);
      if (r.status == Status::fail) ++kills, killed += fmt::format(" {}", c);
      if (inert(m, s.cases[c])) {
        ++inert_cases;
        EXPECT_EQ(r.status, Status::pass) << describe(r);
        EXPECT_EQ(r.metrics.max_abs, control.metrics.max_abs) << describe(r);
        EXPECT_EQ(r.metrics.lse_max_abs, control.metrics.lse_max_abs) << describe(r);
      }
    }
    if (m != Mistake::masked_nonfinite_leak) {  // inert on finite inputs (see inert())
      EXPECT_GT(kills, 0) << name << " passes every case";
    }
    std::cout << "[          ] " << name << " fails " << kills << " of " << s.cases.size() << " cases (" << inert_cases
              << " inert), cases" << killed << "\n";
  }
}

// Each mistake fails verify on the case made to show it; prints that case and the verdict.
TEST(Mutants, EachMistakeIsCaughtByTheCaseMadeForIt) {
  const Shared& s = shared();
  auto caught = [&](Mistake m, const char* what, auto predicate) {
    const std::string name = implementation_name(m);
    for (std::size_t c = 0; c < s.cases.size(); ++c) {
      if (!predicate(s.cases[c])) continue;
      const Record& r = record_of(name, c);
      if (r.status != Status::fail) continue;
      std::cout << "[          ] " << name << " (" << what << "), case " << c << ": " << s.cases[c].repro() << "\n[          ]     "
                << (r.verdict.reasons.empty() ? std::string("?") : r.verdict.reasons.front()) << "\n";
      return true;
    }
    ADD_FAILURE() << name << " passes every case with " << what;
    return false;
  };
  using M = Mistake;
  caught(M::scale_one, "diffuse", [](const Problem& p) { return p.regime == Regime::diffuse && p.n_k > 1; });
  caught(M::scale_one_over_dk, "diffuse", [](const Problem& p) { return p.regime == Regime::diffuse && p.n_k > 1; });
  caught(M::masked_fill, "f32 causal", [](const Problem& p) { return p.dtype == DType::f32 && !p.window.is_none(); });
  caught(M::masked_fill, "f16, fully masked rows", [](const Problem& p) {
    return p.dtype == DType::f16 && p.padding.kind == KeyPadding::Kind::per_query;
  });
  caught(M::causal_ignored, "top-left causal", [](const Problem& p) { return p.window == Window::of(Causal::top_left); });
  caught(M::causal_ignored, "bottom-right causal", [](const Problem& p) { return p.window == Window::of(Causal::bottom_right); });
  caught(M::causal_alignment_swapped, "bottom-right, n_q > n_k", [](const Problem& p) { return p.window == Window::of(Causal::bottom_right) && p.n_q > p.n_k; });
  caught(M::causal_alignment_swapped, "top-left, n_q < n_k", [](const Problem& p) { return p.window == Window::of(Causal::top_left) && p.n_q < p.n_k; });
  caught(M::padding_ignored, "per-batch padding", [](const Problem& p) { return p.padding.kind == KeyPadding::Kind::per_batch; });
  caught(M::padding_ignored, "per-query padding", [](const Problem& p) { return p.padding.kind == KeyPadding::Kind::per_query; });
  caught(M::no_max_subtraction, "large, f32", [](const Problem& p) { return p.regime == Regime::large && p.dtype == DType::f32; });
  caught(M::no_max_subtraction, "large, f64", [](const Problem& p) { return p.regime == Regime::large && p.dtype == DType::f64; });
  caught(M::last_key_tile_dropped, "n_k = 129", [](const Problem& p) { return p.n_k == 129; });
  caught(M::last_key_tile_dropped, "n_k = 23", [](const Problem& p) { return p.n_k == 23; });
  caught(M::kv_head_mapping, "GQA 8:2", [](const Problem& p) { return p.h_q == 8 && p.h_kv == 2; });
  caught(M::weights_not_normalised, "diffuse", [](const Problem& p) { return p.regime == Regime::diffuse && p.n_k > 1; });
  caught(M::output_rows_permuted, "h_q = 4", [](const Problem& p) { return p.h_q == 4; });
  caught(M::softmax_over_queries, "diffuse, n_q > 1", [](const Problem& p) { return p.regime == Regime::diffuse && p.n_q > 1; });
  caught(M::causal_strict, "top-left causal", [](const Problem& p) { return p.window == Window::of(Causal::top_left); });
  caught(M::causal_strict, "bottom-right causal", [](const Problem& p) { return p.window == Window::of(Causal::bottom_right); });
  caught(M::weights_rounded_to_bf16, "f32", [](const Problem& p) { return p.dtype == DType::f32 && p.n_k > 1; });
  caught(M::weights_rounded_to_bf16, "f64", [](const Problem& p) { return p.dtype == DType::f64 && p.n_k > 1; });
  caught(M::padding_one_key_leaks, "per-batch padding", [](const Problem& p) { return p.padding.kind == KeyPadding::Kind::per_batch; });
  caught(M::padding_one_key_leaks, "per-query padding", [](const Problem& p) { return p.padding.kind == KeyPadding::Kind::per_query; });
  caught(M::kv_head_as_query_head, "GQA 8:2", [](const Problem& p) { return p.h_q == 8 && p.h_kv == 2; });
  caught(M::kv_head_as_query_head, "MQA", [](const Problem& p) { return p.h_kv == 1 && p.h_q > 1; });
  caught(M::row_max_init_finite, "large, causal", [](const Problem& p) { return p.regime == Regime::large && !p.window.is_none(); });
  caught(M::row_max_init_finite, "fully masked rows", [](const Problem& p) { return p.padding.kind == KeyPadding::Kind::per_query; });
  caught(M::last_key_dropped, "no mask", [](const Problem& p) { return !p.has_mask(); });
  caught(M::last_key_dropped, "per-query padding", [](const Problem& p) { return p.padding.kind == KeyPadding::Kind::per_query; });
  caught(M::output_all_zeros, "diffuse", [](const Problem& p) { return p.regime == Regime::diffuse; });
  caught(M::nondeterministic, "more than one row", [](const Problem& p) { return p.rows() > 1; });
  const auto sliding = [](const Problem& p) { return p.window.left != Window::unbounded; };
  caught(M::window_alignment_swapped, "a sliding window, n_q != n_k", [&](const Problem& p) { return sliding(p) && p.n_q != p.n_k; });
  caught(M::window_lower_bound_off_by_one, "a sliding window", sliding);
  const auto alibi = [](const Problem& p) { return p.bias.enabled && p.bias.kind == BiasSpec::Kind::alibi; };
  caught(M::alibi_slopes_reversed, "ALiBi", alibi);
  caught(M::alibi_sign_flipped, "ALiBi", alibi);
  const auto sink = [](const Problem& p) { return p.sinks.enabled; };
  caught(M::sink_ignored, "a sink", sink);
  caught(M::sink_in_numerator, "a sink", sink);
  caught(M::lse_base2, "diffuse", [](const Problem& p) { return p.regime == Regime::diffuse; });
  caught(M::dropout_not_rescaled, "p = 0.1", [](const Problem& p) { return p.dropout.enabled() && p.dropout.p < 0.5; });
  caught(M::dropout_not_rescaled, "p = 0.9", [](const Problem& p) { return p.dropout.p > 0.5; });
}

struct Outputs {
  Tensor out, lse, weights;
};

Outputs run_with_all_outputs(const Implementation& impl, const Problem& p, const CaseInputs& in) {
  Outputs r{make_output(p), make_lse(p), make_weights(p)};
  std::vector<std::byte> workspace(impl.workspace_bytes(p));
  impl.run(RunArgs{p, in, RoleTensors::forward(in, r.out, &r.lse, &r.weights), workspace});
  return r;
}

// The weights the control returns are its softmax: rows sum to 1, masked keys 0, O = W V and
// LSE = log sum exp; a masked key's V (NaN here) changes nothing. weights_not_normalised's rows
// do not sum to 1 but its LSE is the control's.
TEST(Mutants, TheControlsWeightsAndLseAreItsSoftmax) {
  for (const Problem& p : quick_cases()) {
    SCOPED_TRACE(p.repro());
    CaseInputs in = generate_inputs(p);
    const auto control = make_correct_control();
    const Outputs r = run_with_all_outputs(*control, p, in);
    const Outputs unnormalised = run_with_all_outputs(*make_mutant(Mistake::weights_not_normalised), p, in);
    const double tol = p.dtype == DType::f64 ? 1e-12 : 1e-4;
    bool some_sum_differs = false;
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.h_q; ++h)
        for (std::int64_t i = 0; i < p.n_q; ++i) {
          const std::int64_t row = (b * p.h_q + h) * p.n_q + i;
          const bool empty = in.mask.row_fully_masked(b, h, i);
          double sum = 0, sum_unnormalised = 0;
          for (std::int64_t j = 0; j < p.n_k; ++j) {
            const double w = r.weights.get(row * p.n_k + j);
            if (!in.mask.visible(b, h, i, j)) {
              EXPECT_EQ(w, 0.0);
            }
            sum += w;
            sum_unnormalised += unnormalised.weights.get(row * p.n_k + j);
          }
          EXPECT_NEAR(sum, empty ? 0.0 : 1.0, tol);
          if (empty) {
            EXPECT_EQ(r.lse.get(row), -std::numeric_limits<double>::infinity());
          } else {
            EXPECT_EQ(unnormalised.lse.get(row), r.lse.get(row));
            some_sum_differs |= std::fabs(sum_unnormalised - 1.0) > 1e-3;
          }
          for (std::int64_t c = 0; c < p.d_v; ++c) {
            double o = 0;
            for (std::int64_t j = 0; j < p.n_k; ++j)
              if (in.mask.visible(b, h, i, j))
                o += r.weights.get(row * p.n_k + j) * in.v.get(in.v.offset(b, p.kv_head(h), j, c));
            const double got = r.out.get(row * p.d_v + c);
            EXPECT_NEAR(got, o, 1e-2 * (1 + std::fabs(o)));
          }
        }
    if (p.n_k > 1 && p.regime != Regime::large) {  // large: one-hot rows, sum 1 either way
      EXPECT_TRUE(some_sum_differs);
    }
    // NaN in the V of every masked key: the output does not move.
    if (in.mask.count_visible() < p.batch * p.h_q * p.n_q * p.n_k) {
      for (std::int64_t b = 0; b < p.batch; ++b)
        for (std::int64_t g = 0; g < p.h_kv; ++g)
          for (std::int64_t j = 0; j < p.n_k; ++j) {
            bool visible_somewhere = false;
            for (std::int64_t h = 0; h < p.h_q; ++h)
              if (p.kv_head(h) == g)
                for (std::int64_t i = 0; i < p.n_q; ++i) visible_somewhere |= in.mask.visible(b, h, i, j);
            if (!visible_somewhere)
              for (std::int64_t c = 0; c < p.d_v; ++c)
                in.v.set(in.v.offset(b, g, j, c), std::numeric_limits<double>::quiet_NaN());
          }
      EXPECT_TRUE(run_with_all_outputs(*control, p, in).out == r.out);
    }
  }
}

}  // namespace
}  // namespace attn::mutants

// Diagnosis names the mistake: verify runs each mutant of tests/mutants/ on small cases where its
// mistake shows, and every failure is diagnosed as exactly that mistake; the correct control
// passes (nothing to diagnose); a wrong output of no known kind gets "no known mistake matches".
// Mistakes without a mutant (K transposed, another scale constant, rows reversed or written in
// BSHD order, batches swapped) are made here by running the naive algorithm on the changed
// problem or inputs, and must be named too. A nondeterministic kernel is named from verify's
// rerun; NaN leaking from masked V is caught on inputs with NaN there (verify's are finite); a
// fully masked row's failure says what was written. The console lines and the JSON carry it all.
// The diagnosis' naive row is held to cpu_naive's. (Just over 500 lines: one table of cases per
// mistake and the helpers they share read better in one file than split.)
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/case_sets.hpp"
#include "core/inputs.hpp"
#include "impls/cpu_naive/cpu_naive.hpp"
#include "verification/naive_row.hpp"
#include "verification/verify.hpp"
#include "reference/reference.hpp"
#include "records/context.hpp"
#include "reports/report.hpp"
#include "reports/results.hpp"
#include "reports/verify_report.hpp"
#include "tests/mutants/mutants.hpp"

namespace attn {
namespace {

using mutants::Mistake;

Problem small(std::int64_t n_q = 20, std::int64_t n_k = 20, DType dtype = DType::f32) {
  Problem p;
  p.batch = 1, p.h_q = 2, p.h_kv = 2, p.n_q = n_q, p.n_k = n_k, p.d_k = 16, p.d_v = 16;
  p.dtype = dtype;
  p.seed = 7;
  return p;
}

Problem causal(Causal c, std::int64_t n_q, std::int64_t n_k, DType dtype = DType::f32) {
  Problem p = small(n_q, n_k, dtype);
  p.window = Window::of(c);
  return p;
}

Problem padded(KeyPadding::Kind kind, DType dtype = DType::f32) {
  Problem p = small(6, 20, dtype);
  p.batch = 2;
  p.padding.kind = kind;
  if (kind == KeyPadding::Kind::per_batch) p.padding.valid_len = {13, 20};
  if (kind == KeyPadding::Kind::per_query) p.padding.valid_len = {0, 3, 20, 7, 0, 11, 20, 1, 9, 0, 14, 5};
  return p;
}

std::string describe(const Record& r) {
  std::string s = fmt::format("{} on {} ({}): diagnosis [{}]", r.implementation, r.context->problem.repro(), to_string(r.status),
                              r.diagnosis.summary());
  for (const auto& m : r.diagnosis.matches) s += "\n    match " + m.hypothesis + ": " + m.explanation;
  for (const auto& why : r.verdict.reasons) s += "\n    reason: " + why;
  return s;
}

// Every record fails and is diagnosed as exactly `hypothesis` (the only match).
void expect_named(const VerifyRun& run, const std::string& hypothesis, const std::string& words = "") {
  ASSERT_FALSE(run.records.empty());
  for (const Record& r : run.records) {
    SCOPED_TRACE(describe(r));
    ASSERT_EQ(r.status, Status::fail);
    ASSERT_TRUE(r.diagnosis.ran);
    ASSERT_EQ(r.diagnosis.matches.size(), 1u);
    EXPECT_EQ(r.diagnosis.matches[0].hypothesis, hypothesis);
    EXPECT_LE(r.diagnosis.matches[0].max_abs, r.diagnosis.matches[0].tolerance);
    EXPECT_TRUE(r.diagnosis.nondeterminism.empty());
    // The summary is the explanation, then what fully masked rows hold when they break the policy.
    EXPECT_EQ(r.diagnosis.summary().rfind(r.diagnosis.matches[0].explanation, 0), 0u);
    if (!words.empty()) {
      EXPECT_NE(r.diagnosis.summary().find(words), std::string::npos);
    }
  }
}

VerifyRun verify_one(const Implementation& impl, const std::vector<Problem>& cases) { return verify({&impl}, cases, VerifyOptions{}); }

// The hypothesis each mutant must be named by is its mistake's catalogue name (verification/mistakes.hpp).
struct MutantCase {
  Mistake mistake;
  std::string words;  // part of the sentence
  std::vector<Problem> cases;
};

std::vector<MutantCase> mutant_cases() {
  Problem gqa = small(12, 12);
  gqa.h_q = 4, gqa.h_kv = 2;
  Problem three_heads = small(8, 8);
  three_heads.h_q = three_heads.h_kv = 3;
  Problem large = small(8, 8);
  large.regime = Regime::large;
  Problem large64 = large;
  large64.dtype = DType::f64;
  Problem peaked = small(10, 10, DType::bf16);
  peaked.regime = Regime::peaked;
  Problem gqa_two_batches = gqa;
  gqa_two_batches.batch = 2;
  Problem large_causal = causal(Causal::top_left, 20, 20);
  large_causal.regime = Regime::large;
  Problem large_causal64 = large_causal;
  large_causal64.dtype = DType::f64;
  Problem large_padded = padded(KeyPadding::Kind::per_query);
  large_padded.regime = Regime::large;
  // Soft-capped: scores of standard deviation 8 against caps of 2 and 5 (most of them past the
  // knee), with a bias of standard deviation 4 where the cap's place relative to it matters.
  auto capped = [&](double cap, bool bias, DType dtype) {
    Problem p = small(10, 14, dtype);
    p.regime = Regime::peaked;
    p.softcap = cap;
    if (bias) p.bias = {true, 4.0, Broadcast::per_head};
    return p;
  };
  // A sliding window of 5 keys before the diagonal, either alignment, n_q != n_k.
  auto windowed = [&](Align align, std::int64_t n_q, std::int64_t n_k, DType dtype) {
    Problem p = small(n_q, n_k, dtype);
    p.window = Window{5, 0, align};
    return p;
  };
  // ALiBi over 4 heads (slopes 1/4 to 1/256), causal at the bottom right, the peaked regime (so
  // a changed bias is not lost in flat scores).
  auto alibi = [&](DType dtype, std::int64_t h_q) {
    Problem p = causal(Causal::bottom_right, 12, 20, dtype);
    p.h_q = p.h_kv = h_q;
    p.bias = BiasSpec::alibi();
    return p;
  };
  // Sinks around 0 (comparable to the scores) and far above them, with fully masked rows.
  auto with_sink = [&](Problem p, double mean) {
    p.sinks = {true, mean, {}};
    return p;
  };
  // Dropout at p = 0.1 and 0.9, with a causal mask and with a sink.
  auto with_dropout = [&](Problem p, double rate) {
    p.dropout.p = double(float(rate));
    return p;
  };
  return {
      {Mistake::dropout_not_rescaled, "without the 1 / (1 - p)",
       {with_dropout(small(), 0.1), with_dropout(causal(Causal::bottom_right, 12, 20, DType::bf16), 0.9),
        with_dropout(with_sink(causal(Causal::top_left, 20, 20, DType::f64), 1.0), 0.5)}},
      {Mistake::sink_ignored, "no sink",
       {with_sink(small(), 0.0), with_sink(causal(Causal::bottom_right, 12, 20, DType::bf16), 2.0), with_sink(padded(KeyPadding::Kind::per_query), 1.0)}},
      {Mistake::sink_in_numerator, "the denominator alone",
       {with_sink(small(), 0.0), with_sink(causal(Causal::top_left, 20, 20, DType::f64), 3.0), with_sink(alibi(DType::f16, 4), -1.0)}},
      {Mistake::window_alignment_swapped, "placed top_left",
       {windowed(Align::bottom_right, 8, 20, DType::f32), windowed(Align::bottom_right, 20, 12, DType::bf16)}},
      {Mistake::window_alignment_swapped, "placed bottom_right", {windowed(Align::top_left, 12, 20, DType::f64)}},
      {Mistake::window_lower_bound_off_by_one, "6 keys before the diagonal instead of 5",
       {windowed(Align::top_left, 20, 20, DType::f32), windowed(Align::bottom_right, 12, 20, DType::f16)}},
      {Mistake::alibi_slopes_reversed, "reverse head order", {alibi(DType::f32, 4), alibi(DType::bf16, 3)}},
      {Mistake::alibi_sign_flipped, "wrong sign", {alibi(DType::f32, 4), alibi(DType::f64, 1)}},
      {Mistake::lse_base2, "base 2", {small(), causal(Causal::bottom_right, 12, 20, DType::f64), alibi(DType::f16, 2)}},
      {Mistake::softcap_ignored, "no soft-cap", {capped(2, false, DType::f32), capped(5, true, DType::bf16)}},
      {Mistake::softcap_clipped, "clipped to [-2, 2]", {capped(2, false, DType::f32), capped(2, true, DType::f64)}},
      {Mistake::softcap_after_bias, "after the bias", {capped(2, true, DType::f32), capped(5, true, DType::f16)}},
      {Mistake::scale_one, "scale = 1", {small(), small(9, 13, DType::f16)}},
      {Mistake::scale_one_over_dk, "scale = 1/d_k", {small(), peaked}},
      {Mistake::masked_fill, "finite score", {causal(Causal::top_left, 20, 20), padded(KeyPadding::Kind::per_query, DType::f16)}},
      {Mistake::causal_ignored, "no causal mask", {causal(Causal::top_left, 20, 20), causal(Causal::bottom_right, 12, 20)}},
      {Mistake::causal_alignment_swapped, "top-left causal mask where bottom-right",
       {causal(Causal::bottom_right, 12, 20)}},
      {Mistake::causal_alignment_swapped, "bottom-right causal mask where top-left", {causal(Causal::top_left, 20, 12)}},
      {Mistake::padding_ignored, "no key padding", {padded(KeyPadding::Kind::per_batch), padded(KeyPadding::Kind::per_query)}},
      {Mistake::no_max_subtraction, "without subtracting the row max", {large, large64}},
      {Mistake::last_key_tile_dropped, "keys 48..49 dropped", {small(5, 50)}},
      {Mistake::last_key_tile_dropped, "tile of 16 or 32 keys", {causal(Causal::bottom_right, 6, 40)}},
      {Mistake::kv_head_mapping, "h % h_kv", {gqa}},
      {Mistake::weights_not_normalised, "never divided by the row sum", {small(), causal(Causal::top_left, 9, 9, DType::f64)}},
      {Mistake::output_rows_permuted, "written at head (h + 1) % h_q", {small(), three_heads}},
      {Mistake::softmax_over_queries, "over the queries", {small(), causal(Causal::top_left, 20, 20), gqa}},
      {Mistake::causal_strict, "j < i instead of j <= i", {causal(Causal::top_left, 20, 20), causal(Causal::top_left, 12, 20)}},
      {Mistake::causal_strict, "j < i + (n_k - n_q)", {causal(Causal::bottom_right, 12, 20)}},
      {Mistake::weights_rounded_to_bf16, "rounded to bf16",
       {small(), causal(Causal::top_left, 16, 16, DType::f64)}},  // f16's own output rounding hides it on small cases
      {Mistake::padding_one_key_leaks, "j <= valid_len", {padded(KeyPadding::Kind::per_batch), padded(KeyPadding::Kind::per_query)}},
      {Mistake::kv_head_as_query_head, "head h's own offset", {gqa, gqa_two_batches}},
      {Mistake::row_max_init_finite, "row max initialised to a finite", {large_causal, large_causal64, large_padded}},
      {Mistake::last_key_dropped, "j < limit - 1", {small(5, 50), padded(KeyPadding::Kind::per_batch)}},
      {Mistake::output_all_zeros, "did not run", {small(), causal(Causal::bottom_right, 12, 20, DType::f16)}},
  };
}

TEST(Diagnosis, EveryMutantIsDiagnosedAsItsOwnMistake) {
  for (const MutantCase& c : mutant_cases()) {
    SCOPED_TRACE(std::string(mutants::to_string(c.mistake)));
    const auto mutant = mutants::make_mutant(c.mistake);
    expect_named(verify_one(*mutant, c.cases), std::string(name_of(c.mistake)), c.words);
  }
}

std::string hypothesis_of(Mistake m) { return std::string(name_of(m)); }

// The names a failure of mistake m may get on a case: its own, and those whose prediction is
// the same output there (the visibility they give is one).
bool named_as_its_mistake(Mistake m, const Problem& p, const std::string& name) {
  if (name == hypothesis_of(m)) return true;
  switch (m) {
    case Mistake::last_key_dropped:  // causal only: the strict mask; n_k - 1 a tile multiple: the tile
      return name == "causal_strict" || name == "last_key_tile_dropped" || (p.n_k == 1 && name == "output_all_zeros");
    case Mistake::output_all_zeros: return p.n_k == 1 && name == "last_key_dropped";  // the only key dropped: zeros
    case Mistake::row_max_init_finite:  // no row that sees a key lies below -1e4: only the fully masked rows (NaN) show it
      return name == "fully_masked_rows_off_policy";
    default: return false;
  }
}

// The quick case set (every mask kind and regime, GQA, n_q != n_k): wherever a
// mutant's output fails (not only its LSE, which the diagnosis does not judge), its own mistake
// is the best match.
TEST(Diagnosis, OnTheQuickCasesEveryFailureIsNamedAsItsMistake) {
  const auto all = mutants::make_all();
  std::vector<const Implementation*> impls;
  for (const auto& m : all) impls.push_back(m.get());
  // The f32 cases, and a smaller row budget, keep it fast under the sanitizers.
  std::vector<Problem> cases;
  for (const Problem& p : quick_cases())
    if (p.dtype == DType::f32) cases.push_back(p);
  VerifyOptions options;
  options.diagnosis.max_work = 2e4;
  int named = 0;
  for (const Record& r : verify(impls, cases, options).records) {
    const bool output_failed = std::any_of(r.verdict.reasons.begin(), r.verdict.reasons.end(),
                                           [](const std::string& why) { return why.rfind("LSE", 0) != 0; });
    if (r.status != Status::fail || !output_failed) continue;
    SCOPED_TRACE(describe(r));
    const auto at = std::find_if(all.begin(), all.end(), [&](const auto& i) { return i->name() == r.implementation; });
    const Mistake m = mutants::all_mistakes()[std::size_t(at - all.begin())];  // make_all() is in all_mistakes() order
    EXPECT_TRUE(r.diagnosis.ran);
    if (m == Mistake::nondeterministic) {  // named by the rerun, not by a hypothesis
      EXPECT_EQ(r.diagnosis.summary().rfind("nondeterministic: two runs on the same inputs differ at", 0), 0u);
      named += !r.diagnosis.nondeterminism.empty();
      continue;
    }
    EXPECT_FALSE(r.diagnosis.matches.empty());
    if (!r.diagnosis.matches.empty()) {
      const bool own = named_as_its_mistake(m, r.context->problem, r.diagnosis.matches[0].hypothesis);
      EXPECT_TRUE(own) << r.diagnosis.matches[0].hypothesis << " instead of " << hypothesis_of(m);
      named += own;
    }
  }
  EXPECT_GT(named, 50);
}

TEST(Diagnosis, TheControlPassesAndIsNotDiagnosed) {
  const auto control = mutants::make_correct_control();
  std::vector<Problem> cases{small(), causal(Causal::bottom_right, 12, 20), padded(KeyPadding::Kind::per_query, DType::f16)};
  for (const Record& r : verify_one(*control, cases).records) {
    EXPECT_EQ(r.status, Status::pass) << describe(r);
    EXPECT_FALSE(r.diagnosis.ran);
    EXPECT_EQ(r.diagnosis.summary(), "");
  }
}

// An implementation made wrong here: the naive algorithm on a changed problem or changed inputs,
// and/or its output rows moved.
class Planted final : public Implementation {
 public:
  using Change = std::function<void(Problem&, CaseInputs&)>;
  using Move = std::function<std::int64_t(const Problem&, std::int64_t)>;  // output row -> the row it holds
  Planted(std::string name, Change change, Move move = {}, double factor = 1.0)
      : name_(std::move(name)), change_(std::move(change)), move_(std::move(move)), factor_(factor) {}
  std::string name() const override { return name_; }
  Capabilities describe() const override {
    Capabilities c;
    c.dtypes = {DType::f64, DType::f32, DType::f16, DType::bf16};
    declare_every_mask_and_shape(c);
    return c;
  }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem& p) const override { return naive_workspace_bytes(p); }
  void run(const RunArgs& a) const override {
    Problem p = a.problem;
    CaseInputs in = a.inputs;
    if (change_) change_(p, in);
    Tensor out = make_output(a.problem);
    std::vector<std::byte> workspace(naive_workspace_bytes(p));
    naive_attention(RunArgs{p, in, RoleTensors::forward(in, out), workspace});
    for (std::int64_t r = 0; r < p.rows(); ++r)
      for (std::int64_t c = 0; c < p.d_v; ++c)
        a.tensors.required_output(Role::o).set(r * p.d_v + c, factor_ * out.get((move_ ? move_(p, r) : r) * p.d_v + c));
  }

 private:
  std::string name_;
  Change change_;
  Move move_;
  double factor_;
};

TEST(Diagnosis, KReadTransposedIsNamed) {
  const Planted impl("k_transposed", [](Problem& p, CaseInputs& in) {
    const Tensor k = in.k;
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t g = 0; g < p.h_kv; ++g)
        for (std::int64_t j = 0; j < p.n_k; ++j)
          for (std::int64_t t = 0; t < p.d_k; ++t)
            in.k.set_bits(k.offset(b, g, j, t), k.bits(k.offset(b, g, 0, 0) + t * p.n_k + j));
  });
  expect_named(verify_one(impl, {small(), small(7, 24, DType::f16)}), "k_transposed", "K read transposed");
}

// A sliding window's known mistakes, each planted on its own: computed as causal (the lower bound
// ignored), the lower bound one key off either way, the diagonal aligned the other way, no window.
TEST(Diagnosis, SlidingWindowMistakesAreNamed) {
  auto planted = [](const std::string& name, std::function<void(Window&)> change) {
    return Planted(name, [change](Problem& p, CaseInputs& in) {
      change(p.window);
      in.mask = Mask(p);
    });
  };
  const Problem sliding = parse_problem("b=1 hq=2 hkv=1 nq=24 nk=40 dk=16 dv=16 dtype=f32 window=5,0@bottom_right regime=diffuse seed=7");
  expect_named(verify_one(planted("as_causal", [](Window& w) { w.left = Window::unbounded; }), {sliding}), "window_lower_bound_ignored",
               "lower bound was ignored");
  expect_named(verify_one(planted("one_more", [](Window& w) { ++w.left; }), {sliding}), "window_lower_bound_off_by_one",
               "6 keys before the diagonal instead of 5");
  expect_named(verify_one(planted("one_fewer", [](Window& w) { --w.left; }), {sliding}), "window_lower_bound_off_by_one",
               "4 keys before the diagonal instead of 5");
  expect_named(verify_one(planted("top_left", [](Window& w) { w.align = Align::top_left; }), {sliding}), "window_alignment_swapped",
               "the diagonal placed top_left");
  expect_named(verify_one(planted("no_window", [](Window& w) { w = Window{}; }), {sliding}), "window_ignored", "window 5,0@bottom_right was ignored");
}

TEST(Diagnosis, AnotherScaleConstantIsFittedAndNamed) {
  const Planted fitted("scale_0_3", [](Problem& p, CaseInputs&) { p.scale = 0.3; });
  expect_named(verify_one(fitted, {small()}), "scale_constant", "scale = 0.3 (fitted)");
  const Planted by_d_v("scale_d_v", [](Problem& p, CaseInputs&) { p.scale = 1 / std::sqrt(double(p.d_v)); });
  Problem p = small();
  p.d_v = 25;
  expect_named(verify_one(by_d_v, {p}), "scale_constant", "1/sqrt(d_v)");
  // An explicit scale replaced by the default.
  const Planted ignored("explicit_scale_ignored", [](Problem& q, CaseInputs&) { q.scale.reset(); });
  p = small();
  p.scale = 0.5;
  expect_named(verify_one(ignored, {p}), "scale_constant", "explicit scale was ignored");
}

TEST(Diagnosis, PermutedRowsNameTheMapping) {
  const Planted reversed("rows_reversed", {}, [](const Problem& p, std::int64_t r) { return r - r % p.n_q + (p.n_q - 1 - r % p.n_q); });
  expect_named(verify_one(reversed, {small()}), "output_rows_permuted", "reversed");
  const Planted bshd("bshd_output", {}, [](const Problem& p, std::int64_t r) {
    // Row r of the BHSD output holds what a BSHD writer put at its memory position.
    const std::int64_t per_batch = p.h_q * p.n_q, b = r / per_batch, local = r % per_batch;
    return (b * p.h_q + local % p.h_q) * p.n_q + local / p.h_q;
  });
  Problem heads = small(6, 9);
  heads.h_q = heads.h_kv = 3;
  expect_named(verify_one(bshd, {heads}), "output_rows_permuted", "BSHD");
  const Planted batches("batches_swapped", {}, [](const Problem& p, std::int64_t r) { return (r + p.h_q * p.n_q) % p.rows(); });
  expect_named(verify_one(batches, {padded(KeyPadding::Kind::none)}), "output_rows_permuted", "batch (b + 1) % batch");
}

TEST(Diagnosis, AnUnknownMistakeIsNotGivenAFalseName) {
  const Planted scaled_output("output_times_1_01", {}, {}, 1.01);
  const VerifyRun run = verify_one(scaled_output, {small(), causal(Causal::top_left, 20, 12, DType::f16)});
  for (const Record& r : run.records) {
    SCOPED_TRACE(describe(r));
    ASSERT_EQ(r.status, Status::fail);
    ASSERT_TRUE(r.diagnosis.ran);
    EXPECT_TRUE(r.diagnosis.matches.empty());
    EXPECT_EQ(r.diagnosis.summary().rfind("no known mistake matches", 0), 0u);
    EXPECT_GE(r.diagnosis.tested.size(), 5u);
  }
}

TEST(Diagnosis, CanBeTurnedOff) {
  const auto mutant = mutants::make_mutant(Mistake::scale_one);
  VerifyOptions options;
  options.diagnosis.enabled = false;
  const VerifyRun run = verify({mutant.get()}, {small()}, options);
  ASSERT_EQ(run.records.size(), 1u);
  EXPECT_EQ(run.records[0].status, Status::fail);
  EXPECT_FALSE(run.records[0].diagnosis.ran);
}

// Sampled rows on a larger problem: the diagnosis stays within its row budget and still names it.
TEST(Diagnosis, LargeProblemsAreSampled) {
  const auto mutant = mutants::make_mutant(Mistake::scale_one_over_dk);
  Problem p = small(64, 64);
  p.h_q = p.h_kv = 4;
  p.d_k = p.d_v = 32;
  VerifyOptions options;
  options.diagnosis.max_work = 1e5;
  const VerifyRun run = verify({mutant.get()}, {p}, options);
  expect_named(run, "scale_one_over_dk");
  EXPECT_LT(run.records[0].diagnosis.rows, p.rows());
  EXPECT_GE(run.records[0].diagnosis.rows, options.diagnosis.min_rows);
}

// A nondeterministic kernel is named as such (verify reruns a failing implementation on the same
// inputs and compares bits), not as the permutation its first run happens to look like.
TEST(Diagnosis, NondeterminismIsNamedAsNondeterminism) {
  const auto mutant = mutants::make_mutant(Mistake::nondeterministic);
  const VerifyRun run = verify_one(*mutant, {small(), causal(Causal::top_left, 9, 9, DType::f64)});
  for (const Record& r : run.records) {
    SCOPED_TRACE(describe(r));
    ASSERT_EQ(r.status, Status::fail);  // runs 0 and 2 swap two rows; the reruns (1 and 3) are right
    EXPECT_EQ(r.diagnosis.nondeterminism.rfind("nondeterministic: two runs on the same inputs differ at b=0 h=0 i=", 0), 0u);
    EXPECT_EQ(r.diagnosis.summary().rfind(r.diagnosis.nondeterminism, 0), 0u);
    EXPECT_TRUE(r.diagnosis.matches.empty());  // a match must hold for both runs
  }
  std::ostringstream summary;
  print_verify_summary(summary, run);
  EXPECT_NE(summary.str().find("  diagnosis: nondeterministic: two runs on the same inputs differ at"), std::string::npos) << summary.str();
  const nlohmann::json j = verify_to_json(run, VerifyOptions{}, nlohmann::json::object());
  EXPECT_EQ(j.at("records").at(0).at("diagnosis").at("nondeterminism"), run.records.at(0).diagnosis.nondeterminism);
}

// Verify's steps on inputs of the test's making (verify draws its own): the reference, the naive
// yardstick, the implementation's verdict and its diagnosis.
struct Judged {
  ErrorMetrics metrics;
  Verdict verdict;
  Diagnosis diagnosis;
};
Judged judge_on(const Implementation& impl, const Problem& p, const CaseInputs& in) {
  const ReferenceResult ref = compute_reference(p, in);
  const Expected expected{ref.rows, ref.out, ref.lse, ref.fully_masked};
  auto run = [&](auto&& body) {
    Tensor out = make_output(p);
    std::vector<std::byte> workspace(std::max(naive_workspace_bytes(p), impl.workspace_bytes(p)));
    body(RunArgs{p, in, RoleTensors::forward(in, out), workspace});
    return out;
  };
  const Tensor naive = run([](const RunArgs& a) { naive_attention(a); });
  const ErrorMetrics baseline = measure(p, in.mask, expected, naive, nullptr, FullyMaskedPolicy::zeros);
  const Tensor out = run([&](const RunArgs& a) { impl.run(a); });
  Judged j;
  j.metrics = measure(p, in.mask, expected, out, nullptr, FullyMaskedPolicy::zeros);
  j.verdict = judge(PassRule{}, p.numerics(), j.metrics, baseline, ref.score_rounding);
  j.diagnosis = diagnose(p, in, out, DiagnosisJudging{PassRule{}, baseline, ref.score_rounding, 1.0, FullyMaskedPolicy::zeros, j.metrics, false, nullptr});
  return j;
}

// NaN in the V rows of keys no query sees (a cache page never written): the control keeps them
// out; the mutant that multiplies them by a zero weight is caught and named. verify's inputs are
// finite, so this mistake shows only here (and in the property suite's masked K/V check).
TEST(Diagnosis, NanLeakingFromMaskedValuesIsNamed) {
  for (const Problem& p : {padded(KeyPadding::Kind::per_batch), causal(Causal::top_left, 8, 20)}) {
    SCOPED_TRACE(p.repro());
    CaseInputs in = generate_inputs(p);
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t g = 0; g < p.h_kv; ++g)
        for (std::int64_t j = 0; j < p.n_k; ++j) {
          bool seen = false;
          for (std::int64_t h = 0; h < p.h_q; ++h)
            for (std::int64_t i = 0; i < p.n_q; ++i) seen |= p.kv_head(h) == g && in.mask.visible(b, h, i, j);
          if (!seen)
            for (std::int64_t c = 0; c < p.d_v; ++c) in.v.set(in.v.offset(b, g, j, c), std::numeric_limits<double>::quiet_NaN());
        }
    EXPECT_TRUE(judge_on(*mutants::make_correct_control(), p, in).verdict.pass);
    const Judged leak = judge_on(*mutants::make_mutant(Mistake::masked_nonfinite_leak), p, in);
    EXPECT_FALSE(leak.verdict.pass);
    EXPECT_GT(leak.metrics.nan, 0);
    ASSERT_EQ(leak.diagnosis.matches.size(), 1u) << leak.diagnosis.summary();
    EXPECT_EQ(leak.diagnosis.matches[0].hypothesis, "masked_nonfinite_leak");
    EXPECT_NE(leak.diagnosis.summary().find("non-finite values in masked K/V rows leak into visible outputs"), std::string::npos);
  }
}

// A fully masked row's failure says what the kernel wrote there, and verify.json counts NaN and
// Inf there too.
TEST(Diagnosis, FullyMaskedRowsSayWhatWasWritten) {
  Problem large = padded(KeyPadding::Kind::per_query);
  large.regime = Regime::large;
  struct Expect {
    Mistake mistake;
    Problem problem;
    std::string holds;
  };
  for (const Expect& e : {Expect{Mistake::masked_fill, padded(KeyPadding::Kind::per_query, DType::f16), "6 hold the mean of V over all keys"},
                          Expect{Mistake::padding_ignored, padded(KeyPadding::Kind::per_query), "6 hold the softmax over every key"},
                          Expect{Mistake::row_max_init_finite, large, "6 hold NaN (of 6 fully masked rows) instead of zeros"}}) {
    const auto mutant = mutants::make_mutant(e.mistake);
    const VerifyRun run = verify_one(*mutant, {e.problem});
    const Record& r = run.records.at(0);
    SCOPED_TRACE(describe(r));
    EXPECT_NE(r.diagnosis.fully_masked_rows.find(e.holds), std::string::npos);
    EXPECT_NE(r.diagnosis.summary().find("; fully masked rows: " + e.holds), std::string::npos);
    if (e.mistake != Mistake::row_max_init_finite) continue;
    EXPECT_TRUE(std::any_of(r.verdict.reasons.begin(), r.verdict.reasons.end(), [](const std::string& why) {
      return why.find("fully masked rows break the declared policy (zeros): 6 hold NaN") != std::string::npos;
    }));
    const nlohmann::json j = verify_to_json(run, VerifyOptions{}, nlohmann::json::object());
    const auto& metrics = j.at("records").at(0).at("metrics");
    EXPECT_EQ(metrics.at("nan").get<std::int64_t>(), r.metrics.nan);
    EXPECT_GE(metrics.at("nan").get<std::int64_t>(), 6 * large.d_v);  // the fully masked rows' NaN are counted
    EXPECT_EQ(metrics.at("fully_masked_nan").get<std::int64_t>(), 6 * large.d_v);
    EXPECT_EQ(metrics.at("fully_masked_holding").at("nan").get<std::int64_t>(), 6);
  }
  // Right everywhere else: that is the finding.
  class NanWhereNothingIsVisible final : public Implementation {
   public:
    std::string name() const override { return "nan_where_nothing_is_visible"; }
    Capabilities describe() const override {
      Capabilities c;
      c.dtypes = {DType::f32};
      declare_every_mask_and_shape(c);
      return c;
    }
    Support supports(const Problem&) const override { return Support::yes(); }
    std::size_t workspace_bytes(const Problem& p) const override { return naive_workspace_bytes(p); }
    void run(const RunArgs& a) const override {
      naive_attention(a);
      const Problem& p = a.problem;
      for (std::int64_t r = 0; r < p.rows(); ++r)
        if (a.inputs.mask.row_fully_masked(r / (p.n_q * p.h_q), (r / p.n_q) % p.h_q, r % p.n_q))
          for (std::int64_t c = 0; c < p.d_v; ++c) a.tensors.required_output(Role::o).set(r * p.d_v + c, std::numeric_limits<double>::quiet_NaN());
    }
  } nan_where_nothing_is_visible;
  expect_named(verify_one(nan_where_nothing_is_visible, {padded(KeyPadding::Kind::per_query)}), "fully_masked_rows_off_policy",
               "right wherever a key is visible");
}

// What `attnbench verify` prints and writes (cli/main.cpp uses these functions).
TEST(Diagnosis, ConsoleAndJsonCarryIt) {
  const auto mutant = mutants::make_mutant(Mistake::scale_one_over_dk);
  const auto unknown = std::make_unique<Planted>("output_times_1_01", Planted::Change{}, Planted::Move{}, 1.01);
  const auto control = mutants::make_correct_control();
  const VerifyRun run = verify({mutant.get(), unknown.get(), control.get()}, {small()}, VerifyOptions{});
  std::ostringstream rows, summary;
  for (const Record& r : run.records) print_verify_row(rows, r);
  print_verify_summary(summary, run);
  EXPECT_NE(rows.str().find("diagnosis: the output matches scale = 1/d_k = 0.0625: divided by d_k instead of sqrt(d_k)"), std::string::npos)
      << rows.str();
  EXPECT_NE(rows.str().find("diagnosis: no known mistake matches"), std::string::npos) << rows.str();
  std::size_t lines = 0;
  for (std::size_t at = rows.str().find("diagnosis:"); at != std::string::npos; at = rows.str().find("diagnosis:", at + 1)) ++lines;
  EXPECT_EQ(lines, 2u) << "one under each failing row, none under the control's pass";
  EXPECT_NE(summary.str().find("  diagnosis: the output matches scale = 1/d_k"), std::string::npos) << summary.str();

  const nlohmann::json j = verify_to_json(run, VerifyOptions{}, nlohmann::json::object());
  const auto& records = j.at("records");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].at("diagnosis").at("matches").at(0).at("hypothesis"), "scale_one_over_dk");
  EXPECT_EQ(records[0].at("diagnosis").at("summary"), run.records[0].diagnosis.summary());
  EXPECT_TRUE(records[1].at("diagnosis").at("matches").empty());
  EXPECT_FALSE(records[2].contains("diagnosis"));  // a pass has nothing to diagnose

  // The report shows it beside the worst errors.
  const nlohmann::json document = verify_to_json(run, VerifyOptions{}, run_context(1));
  const Report report = render_report(merge_results({parse_result_file("verify.json", document.dump())}));
  EXPECT_NE(report.markdown.find("mutant_scale_one_over_dk case 0: diagnosis: the output matches scale = 1/d_k"), std::string::npos)
      << report.markdown;
  EXPECT_NE(report.markdown.find("output_times_1_01 case 0: diagnosis: no known mistake matches"), std::string::npos);
  EXPECT_NE(report.html.find("divided by d_k instead of sqrt(d_k)"), std::string::npos);
}

// The diagnosis' own naive row (verification/naive_row.hpp, which it needs for rows and rules
// cpu_naive cannot be asked for) is, with no rule, cpu_naive's row: the same operations in the same
// order, so they agree to a few roundings (not to the bit: the compiler contracts a * b + c into
// an FMA in one loop and not the other), far inside the naive algorithm's own error.
template <class Acc>
void expect_naive_rows_equal(const Problem& p) {
  SCOPED_TRACE(p.repro());
  const CaseInputs in = generate_inputs(p);
  Tensor out = make_output(p);
  std::vector<std::byte> workspace(naive_workspace_bytes(p));
  naive_attention(RunArgs{p, in, RoleTensors::forward(in, out), workspace});
  double max_v = 0;
  for (std::int64_t e = 0; e < in.v.numel(); ++e) max_v = std::max(max_v, std::fabs(in.v.get(e)));
  const double u = std::numeric_limits<Acc>::epsilon() / 2;
  const double allowed = 8 * double(p.d_k + p.n_k) * u * max_v + ulp_at(p.dtype, max_v);
  std::vector<Acc> row;
  for (std::int64_t r = 0; r < p.rows(); ++r) {
    const bool sees_a_key = diagnosis_detail::row_under<Acc>(p, in, r, diagnosis_detail::RowRule{}, row);
    for (std::int64_t c = 0; c < p.d_v; ++c) {
      const double want = sees_a_key ? round_to(p.dtype, static_cast<double>(row[std::size_t(c)])) : 0.0;
      ASSERT_LE(std::fabs(out.get(r * p.d_v + c) - want), allowed) << "row " << r << " column " << c;
    }
  }
}

TEST(Diagnosis, ItsNaiveRowIsCpuNaivesRow) {
  Problem gqa = causal(Causal::bottom_right, 12, 20, DType::f16);
  gqa.h_q = 4, gqa.h_kv = 2;
  for (const Problem& p : {small(), gqa, padded(KeyPadding::Kind::per_query), padded(KeyPadding::Kind::per_batch, DType::bf16)})
    expect_naive_rows_equal<float>(p);
  expect_naive_rows_equal<double>(small(9, 13, DType::f64));
  expect_naive_rows_equal<double>(causal(Causal::top_left, 20, 12, DType::f64));
}

}  // namespace
}  // namespace attn

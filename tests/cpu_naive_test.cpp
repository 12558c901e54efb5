// cpu_naive against the high-precision reference in every input regime, dtype and mask kind:
// every element written, every element within the a-priori bound the reference states for the
// naive algorithm, fully masked rows zero, LSE and weights consistent. Then the registry.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/inputs.hpp"
#include "core/problem.hpp"
#include "impls/cpu_naive/cpu_naive.hpp"
#include "impls/implementation.hpp"
#include "impls/registry.hpp"
#include "reference/reference.hpp"

namespace attn {
namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

enum class MaskCase { none, causal_br_wide, causal_br_tall, padq_with_zeros, bool_mask, bias, sliding_window, window_with_padding };

const char* name_of(MaskCase m) {
  switch (m) {
    case MaskCase::none: return "none";
    case MaskCase::causal_br_wide: return "causal_br_wide";
    case MaskCase::causal_br_tall: return "causal_br_tall";
    case MaskCase::padq_with_zeros: return "padq_with_zeros";
    case MaskCase::bool_mask: return "bool_mask";
    case MaskCase::bias: return "bias";
    case MaskCase::sliding_window: return "sliding_window";
    case MaskCase::window_with_padding: return "window_with_padding";
  }
  return "?";
}

Problem make_problem(Regime regime, DType dtype, MaskCase mask, std::uint64_t seed) {
  Problem p;
  p.batch = 2;
  p.h_q = 4;
  p.h_kv = 2;  // GQA 2:1
  p.n_q = 7;
  p.n_k = 11;
  p.d_k = 16;
  p.d_v = 12;
  p.dtype = dtype;
  p.regime = regime;
  p.seed = seed;
  switch (mask) {
    case MaskCase::none: break;
    case MaskCase::causal_br_wide:  // n_q < n_k: every query sees n_k - n_q + i + 1 keys
      p.window = Window::of(Causal::bottom_right);
      break;
    case MaskCase::causal_br_tall:  // n_q > n_k: the first n_q - n_k queries see nothing
      p.window = Window::of(Causal::bottom_right);
      p.n_q = 13;
      p.n_k = 9;
      break;
    case MaskCase::padq_with_zeros:
      p.padding.kind = KeyPadding::Kind::per_query;
      for (std::int64_t b = 0; b < p.batch; ++b)
        for (std::int64_t i = 0; i < p.n_q; ++i) p.padding.valid_len.push_back((i * 5 + b * 2) % (p.n_k + 1));
      break;
    case MaskCase::bool_mask: p.bool_mask = {true, 0.4, Broadcast::per_batch_head}; break;
    case MaskCase::bias: p.bias = {true, 2.0, Broadcast::per_head}; break;
    case MaskCase::sliding_window: p.window = {3, 0, Align::bottom_right}; break;  // 4 keys up to the diagonal
    case MaskCase::window_with_padding:  // keys i - 1 .. i + 2, clipped by per-batch padding
      p.window = {1, 2, Align::top_left};
      p.padding = {KeyPadding::Kind::per_batch, {4, 11}};
      p.bias = {true, 1.0, Broadcast::shared};
      break;
  }
  p.validate();
  return p;
}

struct NaiveRun {
  Tensor out, lse, weights;
};

NaiveRun run_naive(const Problem& p, const CaseInputs& in) {
  NaiveRun r{make_output(p), make_lse(p), make_weights(p)};
  std::vector<std::byte> workspace(naive_workspace_bytes(p));
  naive_attention(RunArgs{p, in, RoleTensors::forward(in, r.out, &r.lse, &r.weights), workspace});
  return r;
}

struct Coords {
  std::int64_t b, h, i;
};
Coords coords(const Problem& p, std::int64_t row) { return {row / (p.n_q * p.h_q), (row / p.n_q) % p.h_q, row % p.n_q}; }

// The largest |naive - reference| / bound seen, to show the bound is not vacuous.
double worst_bound_ratio = 0;

// Checks one case; returns the max abs error of the visible rows.
double check_case(const Problem& p) {
  SCOPED_TRACE(p.repro());
  const CaseInputs in = generate_inputs(p);
  ReferenceOptions options;
  options.weights = true;
  const ReferenceResult ref = compute_reference(p, in, options);
  EXPECT_FALSE(ref.sampled);
  const NaiveRun run = run_naive(p, in);
  const auto d_v = std::size_t(p.d_v), n_k = std::size_t(p.n_k);

  for (std::int64_t e = 0; e < run.out.numel(); ++e) EXPECT_FALSE(run.out.is_poisoned(e)) << "output element " << e;
  for (std::int64_t e = 0; e < run.lse.numel(); ++e) EXPECT_FALSE(run.lse.is_poisoned(e)) << "LSE element " << e;
  for (std::int64_t e = 0; e < run.weights.numel(); ++e) EXPECT_FALSE(run.weights.is_poisoned(e)) << "weight " << e;

  double v_max = 0;
  for (std::int64_t e = 0; e < in.v.numel(); ++e) v_max = std::max(v_max, std::fabs(in.v.get(e)));
  const double u = accumulation_unit_roundoff(p.dtype);
  double max_err = 0;
  int over_bound = 0;
  for (std::size_t r = 0; r < ref.rows.size(); ++r) {
    const std::int64_t row = ref.rows[r];
    const auto [b, h, i] = coords(p, row);
    const std::int64_t g = p.kv_head(h);
    if (ref.fully_masked[r]) {
      for (std::size_t c = 0; c < d_v; ++c) EXPECT_EQ(run.out.get(row * p.d_v + std::int64_t(c)), 0.0) << "row " << row;
      EXPECT_EQ(run.lse.get(row), -inf) << "row " << row;
      for (std::size_t j = 0; j < n_k; ++j) EXPECT_EQ(run.weights.get(row * p.n_k + std::int64_t(j)), 0.0) << "row " << row;
      continue;
    }
    for (std::size_t c = 0; c < d_v; ++c) {
      const double got = run.out.get(row * p.d_v + std::int64_t(c));
      const double want = ref.out[r * d_v + c];
      const double err = std::fabs(got - want);
      max_err = std::max(max_err, err);
      const double bound = ref.naive_bound[r * d_v + c];
      if (bound > 0) worst_bound_ratio = std::max(worst_bound_ratio, err / bound);
      if (!(err <= bound) && over_bound++ < 5)
        ADD_FAILURE() << "row " << row << " c " << c << ": |naive - reference| = " << err << " > a-priori bound " << bound
                      << " (naive " << got << ", reference " << want << ")";
    }

    // LSE: scores carry gamma(d_k + 3) * A relative error in the working precision, the log one more.
    double a_max = 0;
    for (std::int64_t j = 0; j < p.n_k; ++j) {
      if (!in.mask.visible(b, h, i, j)) continue;
      double a = 0;
      for (std::int64_t t = 0; t < p.d_k; ++t)
        a += std::fabs(in.q.get(in.q.offset(b, h, i, t)) * in.k.get(in.k.offset(b, g, j, t)));
      a_max = std::max(a_max, p.effective_scale() * a + std::fabs(in.mask.bias(b, h, i, j)));
    }
    const double lse_want = ref.lse[r];
    const double lse_tol = 2 * double(p.d_k + 4) * u * (a_max + std::fabs(lse_want)) + 4 * u * (1 + std::log(double(p.n_k)));
    EXPECT_NEAR(run.lse.get(row), lse_want, lse_tol) << "row " << row;

    // Weights: a distribution over the visible keys, exactly zero elsewhere, close to the reference's.
    double sum = 0;
    for (std::int64_t j = 0; j < p.n_k; ++j) {
      const double w = run.weights.get(row * p.n_k + j);
      if (!in.mask.visible(b, h, i, j)) {
        EXPECT_EQ(w, 0.0) << "row " << row << " masked key " << j;
        continue;
      }
      EXPECT_GE(w, 0.0);
      EXPECT_LE(w, 1.0);
      sum += w;
      const double w_ref = ref.weights[r * n_k + std::size_t(j)];
      // exp's argument is off by at most (scores' error + the max's), so w is off by that times w.
      EXPECT_NEAR(w, w_ref, 4 * double(p.d_k + 4) * u * a_max * w_ref + 4 * double(p.n_k) * u + 1e-300)
          << "row " << row << " key " << j;
    }
    EXPECT_NEAR(sum, 1.0, 2 * double(p.n_k + 2) * u) << "row " << row;
  }
  EXPECT_EQ(over_bound, 0);
  if (p.dtype == DType::f64) {
    EXPECT_LT(max_err, 1e-12 * v_max);
  }
  return max_err;
}

class NaiveAgainstReference : public ::testing::TestWithParam<Regime> {};

TEST_P(NaiveAgainstReference, EveryDtypeAndMaskIsWithinTheNaiveBound) {
  const Regime regime = GetParam();
  std::uint64_t seed = 100 * std::uint64_t(regime);
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16})
    for (MaskCase m : {MaskCase::none, MaskCase::causal_br_wide, MaskCase::causal_br_tall, MaskCase::padq_with_zeros,
                       MaskCase::bool_mask, MaskCase::bias, MaskCase::sliding_window, MaskCase::window_with_padding}) {
      SCOPED_TRACE(std::string(to_string(d)) + " " + name_of(m));
      check_case(make_problem(regime, d, m, ++seed));
    }
}

// The window rule itself, written out here rather than read from Mask: cpu_naive's weights are
// zero exactly outside i + delta - left <= j <= i + delta + right (and the padding), and positive
// inside, for both alignments.
TEST(NaiveWindow, WeightsVanishExactlyOutsideTheWindow) {
  for (Align a : {Align::top_left, Align::bottom_right})
    for (auto [left, right] : {std::pair<std::int64_t, std::int64_t>{2, 0}, {0, 3}, {Window::unbounded, 1}, {4, Window::unbounded}}) {
      Problem p = make_problem(Regime::diffuse, DType::f64, MaskCase::none, 7);
      p.window = {left, right, a};
      p.validate();
      SCOPED_TRACE(p.repro());
      check_case(p);
      const CaseInputs in = generate_inputs(p);
      const NaiveRun run = run_naive(p, in);
      const std::int64_t delta = a == Align::bottom_right ? p.n_k - p.n_q : 0;
      for (std::int64_t row = 0; row < p.rows(); ++row) {
        const std::int64_t i = row % p.n_q;
        for (std::int64_t j = 0; j < p.n_k; ++j) {
          const bool inside = (left == Window::unbounded || j >= i + delta - left) && (right == Window::unbounded || j <= i + delta + right);
          const double w = run.weights.get(row * p.n_k + j);
          if (inside) {
            EXPECT_GT(w, 0.0) << "row " << row << " key " << j;
          } else {
            EXPECT_EQ(w, 0.0) << "row " << row << " key " << j;
          }
        }
      }
    }
}

// Longer rows (n_k = 200, d_k = 64): more terms in every sum, so more rounding to bound.
TEST_P(NaiveAgainstReference, LongRowsAreWithinTheNaiveBound) {
  const Regime regime = GetParam();
  std::uint64_t seed = 100 * std::uint64_t(regime) + 50;
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16})
    for (Causal causal : {Causal::none, Causal::top_left}) {
      Problem p;
      p.batch = 1, p.h_q = 2, p.h_kv = 1, p.n_q = 9, p.n_k = 200, p.d_k = 64, p.d_v = 32;
      p.dtype = d, p.regime = regime, p.window = Window::of(causal), p.seed = ++seed;
      p.validate();
      check_case(p);
    }
}

TEST(CpuNaive, TheNaiveBoundIsNotVacuous) {
  // The ratio accumulates over every case checked so far; these cases suffice on their own.
  for (DType d : {DType::f32, DType::bf16})
    for (Regime regime : {Regime::diffuse, Regime::peaked})
      check_case(make_problem(regime, d, MaskCase::none, 77));
  // The errors use a visible share of the bound: a bound many orders too loose would show here.
  EXPECT_GT(worst_bound_ratio, 1e-3);
  EXPECT_LE(worst_bound_ratio, 1.0);
  RecordProperty("worst_bound_ratio", std::to_string(worst_bound_ratio));
}

INSTANTIATE_TEST_SUITE_P(AllRegimes, NaiveAgainstReference, ::testing::ValuesIn(all_regimes()),
                         [](const ::testing::TestParamInfo<Regime>& info) { return std::string(to_string(info.param)); });

TEST(CpuNaive, EdgeShapesAreWithinTheNaiveBound) {
  std::vector<Problem> problems;
  auto add = [&](std::int64_t b, std::int64_t hq, std::int64_t hkv, std::int64_t nq, std::int64_t nk, std::int64_t dk,
                 std::int64_t dv, DType d, Regime regime) {
    Problem p;
    p.batch = b, p.h_q = hq, p.h_kv = hkv, p.n_q = nq, p.n_k = nk, p.d_k = dk, p.d_v = dv, p.dtype = d, p.regime = regime;
    p.seed = problems.size() + 900;
    p.validate();
    problems.push_back(p);
  };
  add(1, 1, 1, 1, 1, 64, 64, DType::f32, Regime::diffuse);  // single token
  add(1, 4, 1, 17, 33, 8, 3, DType::f16, Regime::peaked);   // MQA, d_k != d_v
  add(3, 2, 2, 1, 129, 1, 5, DType::bf16, Regime::uniform01);  // d_k = 1, decode
  add(1, 6, 3, 65, 2, 40, 24, DType::f64, Regime::saturated);
  for (const Problem& p : problems) check_case(p);
}

TEST(CpuNaive, F64IsAccurateToNearlyFullPrecision) {
  Problem p = make_problem(Regime::diffuse, DType::f64, MaskCase::none, 5);
  const double err = check_case(p);
  EXPECT_LT(err, 1e-14);
}

TEST(CpuNaive, IsDeterministic) {
  const Problem p = make_problem(Regime::peaked, DType::f16, MaskCase::bias, 6);
  const CaseInputs in = generate_inputs(p);
  const NaiveRun first = run_naive(p, in), second = run_naive(p, in);
  EXPECT_TRUE(first.out == second.out);
  EXPECT_TRUE(first.lse == second.lse);
  EXPECT_TRUE(first.weights == second.weights);
}

TEST(CpuNaive, WithoutLseOrWeightsOnlyTheOutputIsWritten) {
  const Problem p = make_problem(Regime::diffuse, DType::f32, MaskCase::causal_br_tall, 7);
  const CaseInputs in = generate_inputs(p);
  Tensor out = make_output(p);
  std::vector<std::byte> workspace(naive_workspace_bytes(p));
  naive_attention(RunArgs{p, in, RoleTensors::forward(in, out), workspace});
  for (std::int64_t e = 0; e < out.numel(); ++e) ASSERT_FALSE(out.is_poisoned(e));
  const NaiveRun full = run_naive(p, in);
  EXPECT_TRUE(out == full.out);
}

TEST(CpuNaive, RejectsATooSmallWorkspace) {
  const Problem p = make_problem(Regime::diffuse, DType::f32, MaskCase::none, 8);
  const CaseInputs in = generate_inputs(p);
  Tensor out = make_output(p);
  std::vector<std::byte> workspace(naive_workspace_bytes(p) - 1);
  EXPECT_THROW(naive_attention(RunArgs{p, in, RoleTensors::forward(in, out), workspace}), std::runtime_error);
}

TEST(CpuNaive, ScaleOverrideIsUsed) {
  // The explicit scale changes the result, and the reference agrees with it.
  Problem p = make_problem(Regime::diffuse, DType::f64, MaskCase::none, 9);
  const CaseInputs in = generate_inputs(p);
  const NaiveRun default_scale = run_naive(p, in);
  p.scale = 0.7;
  check_case(p);
  const NaiveRun explicit_scale = run_naive(p, in);
  EXPECT_FALSE(default_scale.out == explicit_scale.out);
}

// ---------------------------------------------------------------------------------------------
// The registry
// ---------------------------------------------------------------------------------------------

class Named final : public Implementation {
 public:
  explicit Named(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  Capabilities describe() const override { return {}; }
  Support supports(const Problem&) const override { return Support::no("test double"); }
  std::size_t workspace_bytes(const Problem&) const override { return 0; }
  void run(const RunArgs&) const override { throw std::runtime_error("not runnable"); }

 private:
  std::string name_;
};

TEST(Registry, BuiltinsIncludeCpuNaive) {
  Registry registry;
  EXPECT_TRUE(registry.all().empty());
  register_builtin_implementations(registry);
  const Implementation* naive = registry.find("cpu_naive");
  ASSERT_NE(naive, nullptr);
  EXPECT_EQ(naive->name(), "cpu_naive");
  const auto names = registry.names();
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu_naive"), names.end());
  EXPECT_EQ(names.size(), registry.all().size());

  const Capabilities caps = naive->describe();
  EXPECT_EQ(caps.device, "cpu");
  EXPECT_EQ(caps.dtypes.size(), 4u);
  EXPECT_TRUE(caps.returns_lse);
  EXPECT_TRUE(caps.deterministic);
  EXPECT_EQ(caps.fully_masked, FullyMaskedPolicy::zeros);
  const Problem p = make_problem(Regime::diffuse, DType::bf16, MaskCase::bias, 10);
  EXPECT_TRUE(naive->supports(p).ok);
  EXPECT_EQ(naive->workspace_bytes(p), naive_workspace_bytes(p));

  // Running it through the interface is the same as calling the algorithm.
  const CaseInputs in = generate_inputs(p);
  Tensor out = make_output(p);
  std::vector<std::byte> workspace(naive->workspace_bytes(p));
  naive->run(RunArgs{p, in, RoleTensors::forward(in, out), workspace});
  EXPECT_TRUE(out == run_naive(p, in).out);
}

TEST(Registry, DuplicateNamesThrowAndUnknownNamesAreNull) {
  Registry registry;
  register_builtin_implementations(registry);
  const std::size_t before = registry.all().size();
  EXPECT_THROW(register_cpu_naive(registry), std::invalid_argument);
  EXPECT_THROW(registry.add(std::make_unique<Named>("cpu_naive")), std::invalid_argument);
  EXPECT_EQ(registry.all().size(), before);

  EXPECT_EQ(registry.find("nosuch"), nullptr);
  EXPECT_EQ(registry.find(""), nullptr);
  EXPECT_EQ(registry.find("cpu_naiv"), nullptr);

  registry.add(std::make_unique<Named>("private_variant"));
  ASSERT_NE(registry.find("private_variant"), nullptr);
  EXPECT_EQ(registry.find("private_variant")->name(), "private_variant");
  EXPECT_EQ(registry.all().size(), before + 1);
  EXPECT_EQ(registry.names().back(), "private_variant");  // registration order is kept
  EXPECT_THROW(registry.add(std::make_unique<Named>("private_variant")), std::invalid_argument);
}

}  // namespace
}  // namespace attn

// core/inputs.hpp: seeded generation gives the same bits for the same problem (checked against
// golden bit patterns, so "the same bits on any machine" is a real check), stores values
// representable in the dtype, and each input regime has the statistics it promises.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <gtest/gtest.h>

#include "core/dtype.hpp"
#include "core/inputs.hpp"
#include "core/precision.hpp"
#include "core/problem.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"

namespace attn {

void PrintTo(const Problem& p, std::ostream* os) { *os << p.repro(); }

namespace {

Problem make(DType dtype, Regime regime, std::int64_t n = 64, std::int64_t d_k = 64) {
  Problem p;
  p.batch = 1, p.h_q = 4, p.h_kv = 2, p.n_q = n, p.n_k = n, p.d_k = d_k, p.d_v = 32;
  p.dtype = dtype, p.regime = regime, p.seed = 2024;
  return p;
}

// scale * q.k for every (b, h, i, j), in double (query head h reads kv head kv_head(h)).
std::vector<double> scaled_scores(const Problem& p, const CaseInputs& in) {
  std::vector<double> s;
  s.reserve(static_cast<std::size_t>(p.batch * p.h_q * p.n_q * p.n_k));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i)
        for (std::int64_t j = 0; j < p.n_k; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < p.d_k; ++c)
            dot += in.q.get(in.q.offset(b, h, i, c)) * in.k.get(in.k.offset(b, p.kv_head(h), j, c));
          s.push_back(p.effective_scale() * dot);
        }
  return s;
}

double mean_of(const std::vector<double>& x) {
  double sum = 0;
  for (double v : x) sum += v;
  return sum / double(x.size());
}

double variance_of(const std::vector<double>& x) {
  const double m = mean_of(x);
  double sum = 0;
  for (double v : x) sum += (v - m) * (v - m);
  return sum / double(x.size());
}

template <class F>
void for_each_value(const CaseInputs& in, F f) {
  for (const Tensor* t : {&in.q, &in.k, &in.v})
    for (std::int64_t e = 0; e < t->numel(); ++e) f(t->get(e));
}

// ---------------------------------------------------------------------------------------
// Determinism.

TEST(InputGeneration, SameProblemGivesBitwiseIdenticalTensors) {
  for (Regime r : all_regimes()) {
    Problem p = make(DType::f16, r, 37, 16);
    p.bias = {true, 1.0, Broadcast::per_head};
    p.bool_mask = {true, 0.5, Broadcast::shared};
    SCOPED_TRACE(std::string(to_string(r)));
    const CaseInputs a = generate_inputs(p), b = generate_inputs(p);
    EXPECT_EQ(a.q, b.q);
    EXPECT_EQ(a.k, b.k);
    EXPECT_EQ(a.v, b.v);
    EXPECT_EQ(a.mask.bool_flags(), b.mask.bool_flags());
    EXPECT_EQ(a.mask.bias_tensor(), b.mask.bias_tensor());
  }
}

TEST(InputGeneration, TensorsHaveTheProblemsShapesAndDType) {
  Problem p = make(DType::bf16, Regime::diffuse, 5, 16);
  p.n_k = 7;
  const CaseInputs in = generate_inputs(p);
  EXPECT_EQ(in.q.shape(), (Tensor::Shape{1, 4, 5, 16}));
  EXPECT_EQ(in.k.shape(), (Tensor::Shape{1, 2, 7, 16}));
  EXPECT_EQ(in.v.shape(), (Tensor::Shape{1, 2, 7, 32}));
  EXPECT_EQ(in.q.dtype(), DType::bf16);
  EXPECT_EQ(in.v.dtype(), DType::bf16);
}

TEST(InputGeneration, DifferentSeedChangesEveryTensor) {
  for (Regime r : all_regimes()) {
    const Problem p = make(DType::f32, r, 16, 16);
    Problem other = p;
    other.seed = p.seed + 1;
    SCOPED_TRACE(std::string(to_string(r)));
    const CaseInputs a = generate_inputs(p), b = generate_inputs(other);
    EXPECT_NE(a.q, b.q);
    EXPECT_NE(a.k, b.k);
    EXPECT_NE(a.v, b.v);
  }
}

// Each quantity has its own random stream: adding a mask or bias does not move Q, K or V.
TEST(InputGeneration, MaskAndBiasDoNotShiftTheDataStreams) {
  const Problem plain = make(DType::f16, Regime::diffuse, 40, 16);
  Problem masked = plain;
  masked.bool_mask = {true, 0.3, Broadcast::per_batch_head};
  masked.bias = {true, 2.0, Broadcast::shared};
  masked.window = Window::of(Causal::top_left);
  const CaseInputs a = generate_inputs(plain), b = generate_inputs(masked);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.k, b.k);
  EXPECT_EQ(a.v, b.v);
}

// Golden bit patterns recorded once. Generation is chunked (4096 elements per chunk, each with
// its own generator) and run on however many threads the machine has; a change of platform,
// thread count, compiler flags (e.g. FMA contraction) or of the generator shows up here. The
// tensors span several chunks so that chunk boundaries are covered (elements 4095 and 4096).
struct Golden {
  std::int64_t index;
  std::uint64_t q, k, v;
};

void expect_golden(const Problem& p, const std::vector<Golden>& golden) {
  const CaseInputs in = generate_inputs(p);
  SCOPED_TRACE(p.repro());
  for (const auto& g : golden) {
    EXPECT_EQ(in.q.bits(g.index), g.q) << "q[" << g.index << "]";
    EXPECT_EQ(in.k.bits(g.index), g.k) << "k[" << g.index << "]";
    EXPECT_EQ(in.v.bits(g.index), g.v) << "v[" << g.index << "]";
  }
}

Problem golden_problem(DType dtype, Regime regime) {
  Problem p;
  p.batch = 2, p.h_q = 4, p.h_kv = 2, p.n_q = 100, p.n_k = 70, p.d_k = 48, p.d_v = 40;  // Q: 38400, K: 13440, V: 11200
  p.dtype = dtype, p.regime = regime, p.seed = 0xC0FFEE;
  return p;
}

TEST(InputGeneration, MatchesGoldenBitsAcrossChunkBoundaries) {
  expect_golden(golden_problem(DType::f32, Regime::diffuse), {
      {0, 0x3F8F4CBC, 0x3FB98B9A, 0x3F617BD6},
      {1, 0x3F634C70, 0x3FF28845, 0xBEE386BB},
      {4095, 0xBFCDA159, 0x3FB29B3F, 0x3FA5F87F},
      {4096, 0xBB3B0D7F, 0xBF879B84, 0x3BB28797},
      {8191, 0xBFB87217, 0xBF965CFD, 0x3F91B8CE},
      {8192, 0xBF28CCA6, 0x3F45AF7C, 0xBF79B745},
      {11199, 0xBF195E86, 0xBEE19786, 0xBF8A637D},
  });
  // Same seed, peaked: Q and K are the diffuse draws times a different sigma, V is unchanged.
  expect_golden(golden_problem(DType::f32, Regime::peaked), {
      {0, 0x404AA80D, 0x4083334A, 0x3F617BD6},
      {1, 0x4020B970, 0x40AB7F09, 0xBEE386BB},
      {4095, 0xC091670E, 0x407C966F, 0x3FA5F87F},
      {4096, 0xBC044429, 0xC03FC727, 0x3BB28797},
      {8191, 0xC0826C3B, 0xC054A54F, 0x3F91B8CE},
      {8192, 0xBFEEB7EA, 0x400BC8E6, 0xBF79B745},
      {11199, 0xBFD8E598, 0xBF9F847F, 0xBF8A637D},
  });
  expect_golden(golden_problem(DType::f16, Regime::saturated), {
      {0, 0xAE75, 0x3DCC, 0x3B0C},
      {1, 0x39E4, 0x3F94, 0xB71C},
      {4095, 0x2C99, 0x3D95, 0x3D30},
      {4096, 0x21AA, 0xBC3D, 0x1D94},
      {8191, 0xBD20, 0xBB5E, 0x3C8E},
      {8192, 0xB5FB, 0xC22C, 0xBBCE},
      {11199, 0xB92B, 0xB70D, 0xBC53},
  });
  expect_golden(golden_problem(DType::bf16, Regime::large), {
      {0, 0x5DD9, 0x5E0D, 0x3F61},
      {1, 0x5DAC, 0x5E38, 0xBEE4},
      {4095, 0xDE1C, 0x5E07, 0x3FA6},
      {4096, 0xD98E, 0xDDCE, 0x3BB3},
      {8191, 0xDE0C, 0xDDE4, 0x3F92},
      {8192, 0xDD80, 0x5D96, 0xBF7A},
      {11199, 0xDD69, 0xDD2B, 0xBF8A},
  });
  expect_golden(golden_problem(DType::f64, Regime::sparse_int), {
      {0, 0x3FF0000000000000, 0x0, 0xBFF0000000000000},
      {1, 0xC000000000000000, 0xBFF0000000000000, 0xBFF0000000000000},
      {4095, 0xBFF0000000000000, 0xBFF0000000000000, 0x0},
      {4096, 0x0, 0x0, 0x0},
      {8191, 0xC000000000000000, 0x0, 0x4000000000000000},
      {8192, 0x3FF0000000000000, 0x4000000000000000, 0x0},
      {11199, 0xC000000000000000, 0x4000000000000000, 0x0},
  });
  expect_golden(golden_problem(DType::f16, Regime::uniform01), {
      {0, 0x3A80, 0x31D0, 0x38CD},
      {1, 0x38F0, 0x3BA8, 0x36A4},
      {4095, 0x39C4, 0x31F0, 0x368C},
      {4096, 0x370E, 0x2DE8, 0x1E80},
      {8191, 0x381E, 0x3A7F, 0x3A0A},
      {8192, 0x3A4E, 0x38D6, 0x33AC},
      {11199, 0x3A46, 0x39C4, 0x34F4},
  });
}

// The generation scheme rng.hpp documents (fixed chunks of 4096 elements, chunk c drawn from
// Rng(seed, stream, c) in order) replayed on one thread gives every element of V: whatever
// threads generate_inputs used, the result is the single-threaded one.
TEST(InputGeneration, EqualsASingleThreadedReplayOfTheChunkScheme) {
  const Problem p = golden_problem(DType::f32, Regime::diffuse);  // V: 11200 elements, 3 chunks
  const CaseInputs in = generate_inputs(p);
  Tensor replay(DType::f32, in.v.shape());
  constexpr std::int64_t chunk = 4096;
  for (std::int64_t c = 0; c * chunk < replay.numel(); ++c) {
    Rng rng(p.seed, stream_v, static_cast<std::uint64_t>(c));
    for (std::int64_t e = c * chunk; e < std::min(replay.numel(), (c + 1) * chunk); ++e) replay.set(e, rng.normal());
  }
  EXPECT_EQ(in.v, replay);
}

// ---------------------------------------------------------------------------------------
// Representability and finiteness in every dtype and regime.

TEST(InputGeneration, StoredValuesAreRepresentableAndFinite) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16})
    for (Regime r : all_regimes()) {
      const Problem p = make(d, r, 24, 32);
      SCOPED_TRACE(p.repro());
      const CaseInputs in = generate_inputs(p);
      std::int64_t bad = 0, non_finite = 0;
      for_each_value(in, [&](double x) {
        bad += round_to(d, x) != x;
        non_finite += !std::isfinite(x);
      });
      EXPECT_EQ(bad, 0);
      EXPECT_EQ(non_finite, 0);
    }
}

// ---------------------------------------------------------------------------------------
// Regime statistics.

// diffuse: scale * q.k has unit variance, with the default scale and with an explicit one.
TEST(InputRegimes, DiffuseScoresHaveUnitVariance) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    Problem p = make(d, Regime::diffuse, 96, 64);
    SCOPED_TRACE(p.repro());
    EXPECT_NEAR(variance_of(scaled_scores(p, generate_inputs(p))), 1.0, 0.2);
    p.scale = 0.02;  // the generator must account for a non-default scale
    p.d_k = 40;
    EXPECT_NEAR(variance_of(scaled_scores(p, generate_inputs(p))), 1.0, 0.2);
  }
}

// peaked: score standard deviation 8, what unscaled d_k = 64 gives.
TEST(InputRegimes, PeakedScoresHaveStandardDeviationEight) {
  for (DType d : {DType::f32, DType::bf16}) {
    Problem p = make(d, Regime::peaked, 96, 64);
    SCOPED_TRACE(p.repro());
    EXPECT_NEAR(std::sqrt(variance_of(scaled_scores(p, generate_inputs(p)))), 8.0, 1.6);
    p.d_k = 128;
    EXPECT_NEAR(std::sqrt(variance_of(scaled_scores(p, generate_inputs(p)))), 8.0, 1.6);
  }
}

// saturated: one dominant key per head, so each row's softmax is close to one-hot.
TEST(InputRegimes, SaturatedSoftmaxIsNearlyOneHot) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    const Problem p = make(d, Regime::saturated, 80, 64);
    SCOPED_TRACE(p.repro());
    const std::vector<double> s = scaled_scores(p, generate_inputs(p));
    double sum_max_weight = 0;
    const std::int64_t rows = p.rows();
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto first = s.begin() + r * p.n_k, last = first + p.n_k;
      const double m = *std::max_element(first, last);
      double z = 0;
      for (auto it = first; it != last; ++it) z += std::exp(*it - m);
      sum_max_weight += 1.0 / z;  // the largest weight is exp(0) / z
    }
    EXPECT_GT(sum_max_weight / double(rows), 0.8);
  }
}

// A diffuse row, for contrast, is far from one-hot: the saturated check is not vacuous.
TEST(InputRegimes, DiffuseSoftmaxIsNotOneHot) {
  const Problem p = make(DType::f32, Regime::diffuse, 80, 64);
  const std::vector<double> s = scaled_scores(p, generate_inputs(p));
  double sum_max_weight = 0;
  for (std::int64_t r = 0; r < p.rows(); ++r) {
    const auto first = s.begin() + r * p.n_k, last = first + p.n_k;
    const double m = *std::max_element(first, last);
    double z = 0;
    for (auto it = first; it != last; ++it) z += std::exp(*it - m);
    sum_max_weight += 1.0 / z;
  }
  EXPECT_LT(sum_max_weight / double(p.rows()), 0.5);
}

// large: scores far beyond exp's range, yet every stored input is finite.
TEST(InputRegimes, LargeScoresAreHugeButInputsFinite) {
  struct Case {
    DType dtype;
    double min_max_score;
  };
  for (const Case c : {Case{DType::f16, 1e3}, Case{DType::bf16, 1e30}, Case{DType::f32, 1e30}}) {
    const Problem p = make(c.dtype, Regime::large, 32, 64);
    SCOPED_TRACE(p.repro());
    const CaseInputs in = generate_inputs(p);
    bool finite = true;
    for_each_value(in, [&](double x) { finite = finite && std::isfinite(x); });
    EXPECT_TRUE(finite);
    double max_abs = 0;
    for (double x : scaled_scores(p, in)) max_abs = std::max(max_abs, std::fabs(x));
    EXPECT_TRUE(std::isfinite(max_abs));
    EXPECT_GT(max_abs, c.min_max_score);
  }
}

// sparse_int: small integers, mostly zero, every value of [-2, 2] present.
TEST(InputRegimes, SparseIntIsSmallIntegersMostlyZero) {
  for (DType d : {DType::f64, DType::f16, DType::bf16}) {
    const Problem p = make(d, Regime::sparse_int, 32, 32);
    SCOPED_TRACE(p.repro());
    std::int64_t total = 0, zeros = 0, bad = 0, seen[5] = {};
    for_each_value(generate_inputs(p), [&](double x) {
      ++total;
      if (x != std::floor(x) || x < -2 || x > 2) {
        ++bad;
        return;
      }
      zeros += x == 0;
      ++seen[static_cast<int>(x) + 2];
    });
    EXPECT_EQ(bad, 0);
    EXPECT_GE(2 * zeros, total);
    for (int v = 0; v < 5; ++v) EXPECT_GT(seen[v], 0) << "value " << v - 2 << " never drawn";
  }
}

// uniform01: every stored input in [0, 1), including after rounding to a short dtype.
TEST(InputRegimes, Uniform01StaysInTheHalfOpenUnitInterval) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    const Problem p = make(d, Regime::uniform01, 64, 64);
    SCOPED_TRACE(p.repro());
    std::int64_t total = 0, outside = 0;
    double sum = 0;
    for_each_value(generate_inputs(p), [&](double x) {
      ++total;
      outside += !(x >= 0.0 && x < 1.0);
      sum += x;
    });
    EXPECT_EQ(outside, 0) << "of " << total;
    EXPECT_NEAR(sum / double(total), 0.5, 0.01);
  }
}

// ---------------------------------------------------------------------------------------
// Output buffers.

TEST(InputOutputBuffers, PoisonsEveryElement) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    Problem p = make(d, Regime::diffuse, 9, 16);
    p.n_k = 11;
    SCOPED_TRACE(std::string(to_string(d)));
    const Tensor out = make_output(p);
    EXPECT_EQ(out.dtype(), d);
    EXPECT_EQ(out.shape(), (Tensor::Shape{1, 4, 9, 32}));
    std::int64_t clean = 0;
    for (std::int64_t e = 0; e < out.numel(); ++e) clean += !out.is_poisoned(e) || !std::isnan(out.get(e));
    EXPECT_EQ(clean, 0);
    const Tensor lse = make_lse(p);
    EXPECT_EQ(lse.dtype(), working_dtype(d));
    EXPECT_EQ(lse.shape(), (Tensor::Shape{1, 4, 9, 1}));
    clean = 0;
    for (std::int64_t e = 0; e < lse.numel(); ++e) clean += !lse.is_poisoned(e);
    EXPECT_EQ(clean, 0);
  }
}

}  // namespace
}  // namespace attn

namespace attn {
namespace {

// dO for the backward pass: seeded, in d_o's dtype, on its own stream (the forward inputs are the
// same bits with or without op=backward), drawn as V is in each regime.
TEST(InputGeneration, TheUpstreamGradientIsSeededInItsRolesDtypeAndRegime) {
  const std::string shape = "b=2 hq=4 hkv=2 nq=9 nk=11 dk=8 dv=6 causal=none";
  for (const char* regime : {"diffuse", "peaked", "saturated", "large", "sparse_int", "uniform01"})
    for (const char* dtype : {"f64", "f32", "f16", "bf16"}) {
      const std::string repro = fmt::format("op=backward {} dtype={} regime={} seed=5", shape, dtype, regime);
      SCOPED_TRACE(repro);
      const Problem p = parse_problem(repro);
      const Tensor d_o = generate_d_o(p);
      EXPECT_EQ(d_o.shape(), (Tensor::Shape{2, 4, 9, 6}));
      EXPECT_EQ(d_o.dtype(), p.dtype_of(Role::d_o));
      EXPECT_TRUE(d_o == generate_d_o(p));  // the same bits again
      Problem other = p;
      other.seed = 6;
      EXPECT_FALSE(d_o == generate_d_o(other));
      // The forward inputs do not move.
      const Problem forward = parse_problem(fmt::format("{} dtype={} regime={} seed=5", shape, dtype, regime));
      EXPECT_TRUE(generate_inputs(p).v == generate_inputs(forward).v);
      double lo = 1e300, hi = -1e300;
      for (std::int64_t e = 0; e < d_o.numel(); ++e) {
        const double x = d_o.get(e);
        ASSERT_TRUE(std::isfinite(x));
        lo = std::min(lo, x), hi = std::max(hi, x);
        if (std::string(regime) == "sparse_int") {
          EXPECT_TRUE(x == 0 || x == 1 || x == -1 || x == 2 || x == -2) << x;
        }
        if (std::string(regime) == "uniform01") {
          EXPECT_TRUE(x >= 0 && x < 1) << x;
        }
      }
      if (std::string(regime) != "uniform01") {
        EXPECT_LT(lo, 0.0);
      }
      EXPECT_GT(hi, 0.0);
    }
  // Its own dtype where the problem gives d_o one.
  EXPECT_EQ(generate_d_o(parse_problem("op=backward b=1 hq=1 hkv=1 nq=2 nk=2 dk=4 dv=4 dtype=f16 dtypes=d_o:f32 causal=none regime=diffuse seed=1")).dtype(),
            DType::f32);
}

}  // namespace
}  // namespace attn

// The backward reference (reference/reference_backward.hpp) against the forward reference it
// differentiates: for L = <dO, O>, the directional derivative of L along a random direction of Q,
// K, V, the sinks or the bias, by central differences of the forward reference on f64 problems,
// equals <gradient, direction>; through every step of the score pipeline (GQA, windows, padding,
// soft-capping, bias, sinks, dropout with a fixed keep mask). And the invariants DESIGN.md names:
// keys masked in every row get dK = dV = 0 exactly, fully masked rows dQ = 0, doubling dO doubles
// every gradient exactly, and the threads do not change a bit.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/inputs.hpp"
#include "core/problem.hpp"
#include "core/score_pipeline.hpp"
#include "reference/reference.hpp"
#include "reference/reference_backward.hpp"

namespace attn {
namespace {

Tensor seeded(DType dtype, Tensor::Shape shape, std::uint64_t seed) {
  Tensor t(dtype, shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  for (std::int64_t e = 0; e < t.numel(); ++e) t.set(e, normal(rng));
  return t;
}

Tensor d_o_of(const Problem& p, std::uint64_t seed) { return seeded(DType::f64, {p.batch, p.h_q, p.n_q, p.d_v}, seed); }

// L = <dO, O> with O the forward reference (f64: rounded to double once, ~1e-16 relative).
double loss(const Problem& p, const CaseInputs& in, const Tensor& d_o) {
  ReferenceOptions options;
  options.bounded_pass = false;
  const ReferenceResult r = compute_reference(p, in, options);
  double l = 0;
  for (std::size_t e = 0; e < r.out.size(); ++e) l += d_o.get(std::int64_t(e)) * r.out[e];
  return l;
}

double dot(const std::vector<double>& a, const Tensor& b) {
  double s = 0;
  for (std::size_t e = 0; e < a.size(); ++e) s += a[e] * b.get(std::int64_t(e));
  return s;
}

// Central differences along `direction` of one tensor, the tensor put back by `with`.
template <class With>
double directional(const Problem& p, const Tensor& base, const Tensor& direction, With with, const Tensor& d_o, double eps) {
  Tensor plus = base, minus = base;
  for (std::int64_t e = 0; e < base.numel(); ++e) {
    plus.set(e, base.get(e) + eps * direction.get(e));
    minus.set(e, base.get(e) - eps * direction.get(e));
  }
  return (loss(p, with(plus), d_o) - loss(p, with(minus), d_o)) / (2 * eps);
}

void expect_close(double analytic, double numeric, const std::string& what) {
  EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::fabs(numeric))) << what;
}

void check_by_differences(const std::string& repro) {
  SCOPED_TRACE(repro);
  const Problem p = parse_problem(repro);
  CaseInputs in = generate_inputs(p);
  if (p.dropout.enabled()) in.mask = in.mask.with_keep(builtin_keep_mask(p, in.mask));  // a fixed Z
  const Tensor d_o = d_o_of(p, 7);
  const BackwardReference g = compute_reference_backward(p, in, d_o);
  const double eps = 1e-5;
  const Tensor dir_q = seeded(DType::f64, in.q.shape(), 11), dir_k = seeded(DType::f64, in.k.shape(), 12),
               dir_v = seeded(DType::f64, in.v.shape(), 13);
  expect_close(dot(g.dq, dir_q), directional(p, in.q, dir_q, [&](const Tensor& t) { return CaseInputs{t, in.k, in.v, in.mask}; }, d_o, eps), "dQ");
  expect_close(dot(g.dk, dir_k), directional(p, in.k, dir_k, [&](const Tensor& t) { return CaseInputs{in.q, t, in.v, in.mask}; }, d_o, eps), "dK");
  expect_close(dot(g.dv, dir_v), directional(p, in.v, dir_v, [&](const Tensor& t) { return CaseInputs{in.q, in.k, t, in.mask}; }, d_o, eps), "dV");
  if (in.mask.has_bias()) {
    const Tensor& bias = in.mask.bias_tensor();
    const Tensor dir = seeded(DType::f64, bias.shape(), 14);
    ASSERT_EQ(g.d_bias.size(), std::size_t(bias.numel()));
    expect_close(dot(g.d_bias, dir),
                 directional(p, bias, dir, [&](const Tensor& t) { return CaseInputs{in.q, in.k, in.v, in.mask.with_bias(t)}; }, d_o, eps), "dBias");
  } else {
    EXPECT_TRUE(g.d_bias.empty());
  }
  if (p.sinks.enabled) {
    ASSERT_EQ(g.d_sink.size(), std::size_t(p.h_q));
    for (std::int64_t h = 0; h < p.h_q; ++h) {
      Problem plus = p, minus = p;
      plus.sinks.given = minus.sinks.given = sink_logits(p);
      plus.sinks.given[std::size_t(h)] += eps;
      minus.sinks.given[std::size_t(h)] -= eps;
      expect_close(g.d_sink[std::size_t(h)], (loss(plus, in, d_o) - loss(minus, in, d_o)) / (2 * eps), "dsink head " + std::to_string(h));
    }
  } else {
    EXPECT_TRUE(g.d_sink.empty());
  }
}

TEST(ReferenceBackward, AgreesWithDifferencesOfTheForwardReferenceThroughThePipeline) {
  for (const char* repro : {
           "b=2 hq=4 hkv=2 nq=7 nk=11 dk=8 dv=5 dtype=f64 causal=bottom_right regime=diffuse seed=1",
           "b=1 hq=2 hkv=1 nq=9 nk=6 dk=4 dv=4 dtype=f64 causal=top_left regime=peaked seed=2",
           "b=2 hq=2 hkv=2 nq=8 nk=13 dk=6 dv=3 dtype=f64 window=3,1@bottom_right softcap=1.5 bias=1@bh regime=peaked seed=3",
           "b=2 hq=3 hkv=1 nq=5 nk=9 dk=4 dv=6 dtype=f64 causal=none bias=0.5@h softcap=4 regime=diffuse seed=4",
           "b=1 hq=4 hkv=2 nq=6 nk=10 dk=4 dv=4 dtype=f64 causal=none bias=alibi regime=diffuse seed=5",
           "b=2 hq=2 hkv=1 nq=6 nk=8 dk=4 dv=4 dtype=f64 causal=none pad=5,8 sinks=0.5,-1 regime=diffuse seed=6",
           "b=1 hq=2 hkv=2 nq=7 nk=9 dk=4 dv=4 dtype=f64 causal=bottom_right sink=1 dropout=0.25 regime=diffuse seed=7",
           "b=1 hq=2 hkv=1 nq=5 nk=12 dk=4 dv=4 dtype=f64 causal=none bool=0.5@bh regime=diffuse seed=8",
       })
    check_by_differences(repro);
}

TEST(ReferenceBackward, MaskedKeysAndFullyMaskedRowsGetExactlyZero) {
  // Top-left causal with n_q < n_k: keys j >= n_q are masked in every row; per-query padding
  // leaves some rows without keys.
  const Problem p = parse_problem("b=2 hq=2 hkv=1 nq=5 nk=9 dk=4 dv=3 dtype=f64 causal=top_left padq=0,3,9,2,0,5,1,0,7,9 regime=diffuse seed=9");
  const CaseInputs in = generate_inputs(p);
  const BackwardReference g = compute_reference_backward(p, in, d_o_of(p, 3));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t j = p.n_q; j < p.n_k; ++j) {
      for (std::int64_t t = 0; t < p.d_k; ++t) EXPECT_EQ(g.dk[std::size_t(in.k.offset(b, 0, j, t))], 0.0);
      for (std::int64_t c = 0; c < p.d_v; ++c) EXPECT_EQ(g.dv[std::size_t(in.v.offset(b, 0, j, c))], 0.0);
    }
  int fully_masked = 0;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        const auto [lo, hi] = in.mask.key_range(b, i);
        if (lo < hi) continue;
        ++fully_masked;
        for (std::int64_t t = 0; t < p.d_k; ++t) EXPECT_EQ(g.dq[std::size_t(in.q.offset(b, h, i, t))], 0.0);
      }
  EXPECT_GT(fully_masked, 0) << "the case was meant to have fully masked rows";
}

TEST(ReferenceBackward, DoublingDOutDoublesEveryGradientAndTheThreadsChangeNoBit) {
  const Problem p = parse_problem("b=2 hq=4 hkv=2 nq=9 nk=14 dk=8 dv=8 dtype=f32 causal=bottom_right sink=0 bias=1@b regime=peaked seed=10");
  const CaseInputs in = generate_inputs(p);
  const Tensor d_o = d_o_of(p, 5);
  Tensor doubled = d_o;
  for (std::int64_t e = 0; e < d_o.numel(); ++e) doubled.set(e, 2 * d_o.get(e));
  const BackwardReference one = compute_reference_backward(p, in, d_o, 1);
  const BackwardReference many = compute_reference_backward(p, in, d_o, 3);
  const BackwardReference twice = compute_reference_backward(p, in, doubled, 2);
  for (auto member : {&BackwardReference::dq, &BackwardReference::dk, &BackwardReference::dv, &BackwardReference::d_sink, &BackwardReference::d_bias}) {
    EXPECT_EQ(one.*member, many.*member);
    ASSERT_EQ((one.*member).size(), (twice.*member).size());
    for (std::size_t e = 0; e < (one.*member).size(); ++e) EXPECT_EQ(2 * (one.*member)[e], (twice.*member)[e]);
  }
  EXPECT_EQ(one.d_sink.size(), std::size_t(p.h_q));
  EXPECT_EQ(one.d_bias.size(), std::size_t(in.mask.bias_tensor().numel()));
}

TEST(ReferenceBackward, RefusesADOutOfAnotherShape) {
  const Problem p = parse_problem("b=1 hq=2 hkv=2 nq=3 nk=4 dk=4 dv=2 dtype=f32 causal=none regime=diffuse seed=1");
  EXPECT_THROW(compute_reference_backward(p, generate_inputs(p), Tensor(DType::f32, {1, 2, 3, 4})), std::invalid_argument);
}

}  // namespace
}  // namespace attn

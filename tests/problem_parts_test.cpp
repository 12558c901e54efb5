// Problem v2's parts and operation (core/problem.hpp): the parts are views of the one problem;
// the operation and the accumulation round-trip through the repro string and JSON and are left
// out where they keep their defaults (so every older string and verify JSON prints unchanged); an
// accumulation nothing honours is refused; and a backward problem, which nothing implements yet,
// is skipped with a reason naming it by every built-in implementation and never judged. A bias
// may be a function of the positions (ALiBi): it round-trips, and its values are the paper's.
// Soft-capping round-trips, is applied where the pipeline says, and is skipped where not listed.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/inputs.hpp"
#include "core/mask.hpp"
#include "core/score_pipeline.hpp"
#include "impls/capability_space.hpp"
#include "impls/registry.hpp"
#include "judge/judge.hpp"
#include "verification/verify.hpp"

namespace attn {
namespace {

constexpr const char* forward_repro = "b=2 hq=4 hkv=2 nq=5 nk=7 dk=8 dv=16 dtype=f16 causal=bottom_right regime=peaked seed=9";

Problem backward_problem() {
  Problem p = parse_problem(forward_repro);
  p.operation = Operation::backward;
  return p;
}

TEST(ProblemParts, ArePartsOfTheOneProblem) {
  Problem p;
  p.shape().n_q = 17;
  p.variant().window = Window::of(Causal::top_left);
  p.numerics().dtype = DType::bf16;
  p.data().seed = 5;
  EXPECT_EQ(p.n_q, 17);
  EXPECT_EQ(p.window, Window::of(Causal::top_left));
  EXPECT_EQ(p.dtype, DType::bf16);
  EXPECT_EQ(p.seed, 5u);
  Problem q = p;
  q.shape().d_v = 32;
  EXPECT_FALSE(p == q);  // each part takes part in equality
  EXPECT_FALSE(p.shape() == q.shape());
  EXPECT_TRUE(p.variant() == q.variant());
  EXPECT_EQ(Problem{}.operation, Operation::forward);
}

TEST(ProblemParts, ForwardPrintsAsBefore) {
  const Problem p = parse_problem(forward_repro);
  EXPECT_EQ(p.repro(), forward_repro);
  const nlohmann::json j = p;
  EXPECT_FALSE(j.contains("operation"));
  EXPECT_FALSE(j.contains("accumulation"));
  EXPECT_EQ(p.label().find("forward"), std::string::npos) << p.label();
}

TEST(ProblemParts, BackwardRoundTripsThroughReproAndJson) {
  const Problem p = backward_problem();
  EXPECT_EQ(p.repro(), std::string("op=backward ") + forward_repro);
  EXPECT_EQ(parse_problem(p.repro()), p);
  EXPECT_EQ(parse_problem(std::string(forward_repro) + " op=backward"), p);  // any order
  EXPECT_EQ(parse_problem(std::string(forward_repro) + " op=forward"), parse_problem(forward_repro));
  const nlohmann::json j = p;
  EXPECT_EQ(j.at("operation"), "backward");
  EXPECT_EQ(j.get<Problem>(), p);
  EXPECT_EQ(p.label().rfind("backward ", 0), 0u) << p.label();
  EXPECT_FALSE(p == parse_problem(forward_repro));
}

// The backward pass's figures: the exact count with S recomputed, 2 P (3 d_k + 2 d_v) per batch
// and head; the published one 2.5 times the forward's; dO, the LSE and the three gradients in bytes.
TEST(ProblemParts, BackwardCountsItsFlopsAndBytes) {
  const Problem forward = parse_problem(forward_repro);  // b2 h4/2 n5x7 d8/16 f16, causal bottom-right
  const Problem backward = backward_problem();
  const double pairs = double(forward.visible_pairs());
  EXPECT_EQ(backward.visible_pairs(), forward.visible_pairs());
  EXPECT_EQ(forward.flops(), 2 * pairs * (8 + 16));
  EXPECT_EQ(backward.flops(), 2 * pairs * (3 * 8 + 2 * 16));
  EXPECT_EQ(backward.flops_published(), 2.5 * forward.flops_published());
  // d_k = d_v with no window or a causal one: the two conventions agree on the backward pass.
  for (const char* repro : {"op=backward b=1 hq=2 hkv=2 nq=6 nk=6 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=1"}) {
    const Problem p = parse_problem(repro);
    EXPECT_EQ(p.flops(), p.flops_published()) << repro;
  }
  // f16 data, f32 LSE: dO (f16 like O) + LSE (4 bytes a row) + dQ, dK, dV (f16, shaped as Q, K, V).
  const double rows = 2.0 * 4 * 5;
  const double extra = 2 * rows * 16 + 4 * rows + 2 * (2.0 * 4 * 5 * 8) + 2 * (2.0 * 2 * 7 * 8) + 2 * (2.0 * 2 * 7 * 16);
  EXPECT_EQ(backward.bytes_min(), forward.bytes_min() + extra);
}

TEST(ProblemParts, UnknownOperationIsNamed) {
  try {
    parse_problem(std::string(forward_repro) + " op=sideways");
    FAIL() << "accepted op=sideways";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("op: unknown operation 'sideways'"), std::string::npos) << e.what();
  }
}

TEST(ProblemParts, AccumulationDefaultsToTheWorkingPrecision) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    Problem p;
    p.dtype = d;
    EXPECT_EQ(working_dtype(p.numerics()), working_dtype(d)) << to_string(d);
    // Naming the working precision is the same problem, printed without it.
    Problem named = p;
    named.accumulation = working_dtype(d);
    EXPECT_EQ(named, p);
    EXPECT_EQ(named.repro(), p.repro());
    EXPECT_NO_THROW(named.validate());
  }
  const Problem parsed = parse_problem(std::string(forward_repro) + " acc=f32");
  EXPECT_EQ(parsed, parse_problem(forward_repro));
  EXPECT_EQ(parsed.repro(), forward_repro);
}

TEST(ProblemParts, AnAccumulationNothingHonoursIsRefused) {
  for (const char* acc : {"acc=f64", "acc=f16"}) {
    try {
      parse_problem(std::string(forward_repro) + " " + acc);
      FAIL() << "accepted " << acc;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(acc) + ": f16 inputs accumulate in f32"), std::string::npos) << e.what();
    }
  }
  Problem p = parse_problem(forward_repro);
  p.accumulation = DType::f64;
  EXPECT_EQ(p.repro(), std::string(forward_repro).replace(std::string(forward_repro).find(" causal"), 0, " acc=f64"));
  EXPECT_THROW(p.validate(), InputError);
}

// A built-in without a backward skips a backward case naming it (never projected to a forward);
// one with a backward runs it, end to end, and passes, unless it cannot run it for another reason
// (a GPU one without a device, or outside its dtypes), which its skip names instead.
TEST(ProblemOperation, EveryBuiltInWithoutABackwardSkipsItNamingIt) {
  Registry registry;
  register_builtin_implementations(registry);
  ASSERT_FALSE(registry.all().empty());
  const Problem p = backward_problem();
  int runnable = 0;
  for (const Implementation* impl : registry.all()) {
    const Capabilities caps = impl->describe();
    const bool declares = std::find(caps.operations.begin(), caps.operations.end(), Operation::backward) != caps.operations.end();
    const Support s = covers(caps, p);
    if (declares) {
      EXPECT_EQ(s.reason.find("operation"), std::string::npos) << impl->name() << ": " << s.reason;
      runnable += s.ok && impl->supports(p).ok;
      continue;
    }
    EXPECT_FALSE(s.ok) << impl->name();
    EXPECT_EQ(s.reason, "operation backward not declared (declared: forward)") << impl->name();
    const Resolution r = resolve(*impl, p);
    EXPECT_FALSE(r.problem) << impl->name() << ": a backward case was projected to " << r.problem->repro();
    EXPECT_EQ(r.skip_reason, s.reason) << impl->name();
  }
  EXPECT_GE(runnable, 1) << "cpu_naive declares its backward";
  const VerifyRun run = verify(registry.all(), {p}, VerifyOptions{});
  EXPECT_EQ(run.passed(), runnable);
  EXPECT_EQ(run.failed(), 0);
  EXPECT_EQ(run.skipped(), int(registry.all().size()) - runnable);
  for (const Record& r : run.records) {
    const Implementation* impl = registry.find(r.implementation);
    ASSERT_NE(impl, nullptr) << r.implementation;
    const Capabilities caps = impl->describe();
    const bool declares = std::find(caps.operations.begin(), caps.operations.end(), Operation::backward) != caps.operations.end();
    if (r.status != Status::skip)
      EXPECT_EQ(r.verdict.roles.size(), 3u) << r.implementation << ": dq, dk and dv judged";
    else if (declares)
      EXPECT_EQ(r.skip_reason.find("operation"), std::string::npos) << r.implementation << ": " << r.skip_reason;
    else
      EXPECT_EQ(r.skip_reason, "operation backward not declared (declared: forward)") << r.implementation;
  }
}

// Declares a backward and writes nothing it is asked for: every backward case fails (a run that
// throws), never passes or skips; and the forward's yardstick refuses a backward problem.
class ClaimsBackward final : public Implementation {
 public:
  std::string name() const override { return "claims_backward"; }
  Capabilities describe() const override {
    Capabilities c;
    c.dtypes = {DType::f16};
    declare_every_mask_and_shape(c);
    c.operations = {Operation::forward, Operation::backward};
    return c;
  }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem&) const override { return 0; }
  void run(const RunArgs&) const override { throw std::logic_error("never implemented"); }
};

TEST(ProblemOperation, ADeclaredBackwardThatComputesNothingFails) {
  const ClaimsBackward impl;
  const Problem p = backward_problem();
  EXPECT_TRUE(covers(impl.describe(), p).ok);
  const VerifyRun run = verify({&impl}, {p}, VerifyOptions{});
  ASSERT_EQ(run.records.size(), 1u);
  EXPECT_EQ(run.records[0].status, Status::fail);
  ASSERT_FALSE(run.records[0].verdict.reasons.empty());
  EXPECT_NE(run.records[0].verdict.reasons.front().find("never implemented"), std::string::npos) << run.records[0].verdict.reasons.front();
  EXPECT_THROW(make_yardstick(p, generate_inputs(p), ReferenceOptions{}), InputError);
}

TEST(ProblemOperation, CapabilitiesNameTheOperationsTheyDeclare) {
  Capabilities backward_only;
  backward_only.dtypes = {DType::f32};
  backward_only.operations = {Operation::backward};
  const Problem forward = parse_problem("b=1 hq=1 hkv=1 nq=2 nk=2 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=1");
  EXPECT_EQ(covers(backward_only, forward).reason, "operation forward not declared (declared: backward)");
  EXPECT_FALSE(project_onto(backward_only, forward));
  Problem backward = forward;
  backward.operation = Operation::backward;
  EXPECT_TRUE(covers(backward_only, backward).ok);
  Capabilities forward_only;
  forward_only.dtypes = {DType::f32};
  EXPECT_FALSE(project_onto(forward_only, backward));
}

TEST(ProblemBias, AlibiRoundTripsAndIsThePapersLinearBias) {
  const Problem p = parse_problem("b=2 hq=12 hkv=4 nq=5 nk=9 dk=8 dv=8 dtype=f32 causal=bottom_right bias=alibi regime=diffuse seed=3");
  EXPECT_EQ(p.bias, BiasSpec::alibi());
  EXPECT_EQ(p.bias.broadcast, Broadcast::per_head);
  EXPECT_EQ(parse_problem(p.repro()), p);
  EXPECT_NE(p.repro().find(" bias=alibi "), std::string::npos) << p.repro();
  EXPECT_EQ(p.label(), "f32 b2 h12/4 n5x9 d8 causal_br+alibi diffuse");
  const nlohmann::json j = p;
  EXPECT_EQ(j["bias"], (nlohmann::json{{"kind", "alibi"}, {"broadcast", "h"}}));
  // A drawn bias of the same broadcast is another problem.
  EXPECT_NE(p, parse_problem("b=2 hq=12 hkv=4 nq=5 nk=9 dk=8 dv=8 dtype=f32 causal=bottom_right bias=1@h regime=diffuse seed=3"));

  // Slopes: 2^(-8(h+1)/8) for the first eight of 12 heads, then every other slope of 16 heads.
  for (int h = 0; h < 8; ++h) EXPECT_EQ(alibi_slope(h, 12), std::exp2(-(h + 1.0))) << h;
  for (int h = 8; h < 12; ++h) EXPECT_DOUBLE_EQ(alibi_slope(h, 12), std::exp2(-0.5 - (h - 8))) << h;
  EXPECT_EQ(alibi_slope(0, 1), 1.0 / 256);

  // The values: -slope_h |i + n_k - n_q - j|, in the bias's dtype, for every batch alike.
  const Mask mask(p);
  for (std::int64_t h : {0, 5, 11})
    for (std::int64_t i = 0; i < p.n_q; ++i)
      for (std::int64_t j = 0; j < p.n_k; ++j) {
        const double want = static_cast<float>(-alibi_slope(h, p.h_q) * double(std::llabs(i + p.n_k - p.n_q - j)));
        ASSERT_EQ(mask.bias(0, h, i, j), want) << h << " " << i << " " << j;
        ASSERT_EQ(mask.bias(1, h, i, j), want);
      }
  EXPECT_EQ(mask.bias_tensor().shape(), (Tensor::Shape{1, 12, 5, 9}));
  // The diagonal is the window's: top-left under a top-left causal mask, bottom-right without one.
  Problem top_left = p;
  top_left.window = Window::of(Causal::top_left);
  EXPECT_EQ(Mask(top_left).bias(0, 0, 2, 0), -0.5 * 2);
  Problem unmasked = p;
  unmasked.window = Window{};
  EXPECT_EQ(Mask(unmasked).bias(0, 0, 2, 0), -0.5 * 6);

  Problem wrong = p;
  wrong.bias.broadcast = Broadcast::per_batch_head;
  EXPECT_THROW(wrong.validate(), InputError);
  try {
    parse_problem("b=1 hq=1 hkv=1 nq=2 nk=2 dk=8 dv=8 dtype=f32 causal=none bias=alibis regime=diffuse seed=1");
    ADD_FAILURE() << "bias=alibis was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bias: expected STD@BROADCAST (e.g. 0.5@bh) or alibi, got 'alibis'"), std::string::npos) << e.what();
  }
}

// Each token, put into `repro` at {}, is bad input whose message names `field`.
void expect_refused_naming(std::string_view field, std::string_view repro, std::initializer_list<const char*> tokens) {
  for (const char* token : tokens) {
    try {
      parse_problem(fmt::format(fmt::runtime(repro), token)).validate();
      ADD_FAILURE() << token << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
}

// Soft-capping (core/score_pipeline.hpp, step 2): a field that round-trips and is left out when
// unset, refused unless finite and positive, applied between the scale and the bias, and
// unsupported by every implementation that does not list it.
TEST(ProblemSoftcap, RoundTripsAndIsAppliedBetweenTheScaleAndTheBias) {
  const Problem p = parse_problem("b=1 hq=2 hkv=2 nq=3 nk=5 dk=4 dv=4 dtype=f32 causal=none bias=1@h softcap=2.5 regime=diffuse seed=3");
  ASSERT_EQ(p.softcap, 2.5);
  EXPECT_EQ(parse_problem(p.repro()), p);
  EXPECT_NE(p.repro().find(" softcap=2.5 "), std::string::npos) << p.repro();
  EXPECT_EQ(nlohmann::json(p)["softcap"], 2.5);
  EXPECT_EQ(p.label(), "f32 b1 h2 n3x5 d4 bias+softcap2.5 diffuse");
  Problem plain = p;
  plain.softcap.reset();
  EXPECT_NE(plain, p);
  EXPECT_EQ(plain.repro().find("softcap"), std::string::npos) << plain.repro();
  EXPECT_FALSE(nlohmann::json(plain).contains("softcap"));

  const Mask mask(p);
  const ScorePipeline pipeline(p, mask);
  const double scale = p.effective_scale(), bias = mask.bias(0, 1, 2, 3);
  ASSERT_NE(bias, 0.0);
  for (double dot : {0.0, 1.0, -3.0, 40.0, 1e30})
    EXPECT_DOUBLE_EQ(pipeline.score<double>(dot, 0, 1, 2, 3), 2.5 * std::tanh(dot * scale / 2.5) + bias) << dot;
  // Far above the cap the score is the cap (plus the bias), never the raw product.
  EXPECT_LE(pipeline.score<double>(1e30, 0, 1, 2, 3), 2.5 + bias);
  EXPECT_EQ(score_modifications_of(p), std::vector<ScoreModification>{ScoreModification::softcap});
  EXPECT_TRUE(score_modifications_of(plain).empty());

  expect_refused_naming("softcap", "b=1 hq=1 hkv=1 nq=2 nk=2 dk=8 dv=8 dtype=f16 causal=none {} regime=diffuse seed=1",
                        {"softcap=0", "softcap=-1", "softcap=inf", "softcap=nan", "softcap=1e39"});
}

// Capabilities declare what is supported and nothing else: an implementation that names no
// feature computes plain attention only, and every feature beyond it is refused naming it.
TEST(Capabilities, NothingButPlainAttentionUnlessDeclared) {
  Capabilities plain;
  plain.dtypes = {DType::f32};
  EXPECT_TRUE(covers(plain, parse_problem("b=1 hq=2 hkv=2 nq=3 nk=5 dk=4 dv=4 dtype=f32 causal=none regime=diffuse seed=3")).ok);
  for (const char* feature : {"hkv=1 causal=none", "hkv=2 causal=top_left", "hkv=2 causal=bottom_right", "hkv=2 causal=none pad=3",
                              "hkv=2 causal=none bool=0.5@shared", "hkv=2 causal=none bias=1@shared", "hkv=2 causal=none bias=alibi",
                              "hkv=2 window=2,0@top_left", "hkv=2 causal=none softcap=2"}) {
    const Problem p = parse_problem(fmt::format("b=1 hq=2 {} nq=3 nk=5 dk=4 dv=4 dtype=f32 regime=diffuse seed=3", feature));
    const Support s = covers(plain, p);
    EXPECT_FALSE(s.ok) << feature;
    EXPECT_NE(s.reason.find("not declared"), std::string::npos) << feature << ": " << s.reason;
  }
  EXPECT_FALSE(covers(plain, parse_problem("b=1 hq=2 hkv=2 nq=3 nk=5 dk=4 dv=8 dtype=f32 causal=none regime=diffuse seed=3")).ok);
  // Every built-in names what it computes; none claims a mask kind it does not list.
  Registry registry;
  register_builtin_implementations(registry);
  for (const Implementation* impl : registry.all()) {
    const Capabilities c = impl->describe();
    EXPECT_TRUE(c.masks.causal_top_left && c.masks.padding_per_query && c.gqa) << impl->name() << " lists its masks and GQA";
  }
}

// Sinks: drawn per head from the seed or given, f32 values either way; the repro string reads back
// the same problem; a count other than h_q, or a logit that is not a number, is bad input naming it.
TEST(ProblemSinks, TokensRoundTripAndValidateNamingTheField) {
  const Problem drawn = parse_problem("b=1 hq=3 hkv=1 nq=2 nk=4 dk=8 dv=8 dtype=f16 causal=none sink=2.5 regime=diffuse seed=9");
  const std::vector<double> logits = sink_logits(drawn);
  ASSERT_EQ(logits.size(), 3u);
  for (double s : logits) EXPECT_EQ(s, double(float(s)));
  EXPECT_NE(logits[0], logits[1]);
  EXPECT_EQ(sink_logits(parse_problem(drawn.repro())), logits);
  Problem other_seed = drawn;
  other_seed.seed = 10;
  EXPECT_NE(sink_logits(other_seed), logits);
  const Problem given = parse_problem("b=1 hq=2 hkv=1 nq=2 nk=4 dk=8 dv=8 dtype=f32 causal=none sinks=0.1,-3 regime=diffuse seed=9");
  EXPECT_EQ(sink_logits(given), (std::vector<double>{double(0.1f), -3.0}));
  EXPECT_EQ(parse_problem(given.repro()), given);
  EXPECT_NE(given.label().find("sink"), std::string::npos);
  EXPECT_EQ(parse_problem("b=1 hq=2 hkv=1 nq=2 nk=4 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=9").repro().find("sink"), std::string::npos);
  expect_refused_naming("sink", "b=1 hq=2 hkv=1 nq=2 nk=4 dk=8 dv=8 dtype=f32 causal=none {} regime=diffuse seed=1",
                        {"sinks=1,2,3", "sinks=1,x", "sink=nan", "sink=1e31", "sinks=1,inf"});
  Capabilities caps;
  declare_every_dtype(caps);
  declare_every_mask_and_shape(caps);
  EXPECT_EQ(covers(caps, given).reason, "attention sinks (sink=, sinks=) not declared");
  caps.score_modifications = {ScoreModification::sink};
  EXPECT_TRUE(covers(caps, given).ok);
}

TEST(ProblemSoftcap, AnImplementationThatDoesNotListItSkipsItNamingIt) {
  const Problem p = parse_problem("b=1 hq=2 hkv=2 nq=3 nk=5 dk=4 dv=4 dtype=f32 causal=none softcap=2.5 regime=diffuse seed=3");
  Capabilities caps;
  declare_every_dtype(caps);
  const Support s = covers(caps, p);
  EXPECT_FALSE(s.ok);
  EXPECT_EQ(s.reason, "soft-capping (softcap=) not declared");
  caps.score_modifications = {ScoreModification::softcap};
  EXPECT_TRUE(covers(caps, p).ok) << covers(caps, p).reason;
  // No projection drops it: without the cap the problem is another function.
  Capabilities none;
  declare_every_dtype(none);
  const std::optional<Problem> projected = project_onto(none, p);
  ASSERT_TRUE(projected);
  EXPECT_EQ(projected->softcap, 2.5);
  // The built-ins that compute it list it; the others do not, and skip it saying so.
  Registry registry;
  register_builtin_implementations(registry);
  for (const Implementation* impl : registry.all()) {
    const Capabilities c = impl->describe();
    const bool listed = lists(c, ScoreModification::softcap);
    EXPECT_EQ(listed, impl->name() == "cpu_naive" || impl->name() == "cpu_blocked") << impl->name();
    if (!listed) {
      EXPECT_EQ(covers(c, p).reason, "soft-capping (softcap=) not declared") << impl->name();
    }
  }
}


// Dropout: p is an f32 and reads back the same; its seed is the problem's unless given, and a
// seed without dropout, or a p outside [0, 1), is bad input naming the field.
TEST(ProblemDropout, TokensRoundTripAndValidateNamingTheField) {
  const Problem p = parse_problem("b=1 hq=2 hkv=1 nq=2 nk=4 dk=8 dv=8 dtype=f32 causal=none dropout=0.1 regime=diffuse seed=9");
  EXPECT_EQ(p.dropout.p, double(0.1f));
  EXPECT_EQ(dropout_seed(p), 9u);
  EXPECT_NE(p.repro().find("dropout=0.1 "), std::string::npos) << p.repro();
  EXPECT_EQ(parse_problem(p.repro()), p);
  EXPECT_NE(p.label().find("dropout0.1"), std::string::npos) << p.label();
  const Problem seeded = parse_problem("b=1 hq=2 hkv=1 nq=2 nk=4 dk=8 dv=8 dtype=f32 causal=none dropout=0.5 dropout_seed=77 regime=diffuse seed=9");
  EXPECT_EQ(dropout_seed(seeded), 77u);
  EXPECT_EQ(parse_problem(seeded.repro()), seeded);
  EXPECT_FALSE(seeded == p);
  const nlohmann::json j = seeded;
  EXPECT_EQ(j.at("dropout").at("seed"), 77u);
  EXPECT_EQ(j.at("dropout").at("p"), 0.5);
  expect_refused_naming("dropout", "b=1 hq=2 hkv=1 nq=2 nk=4 dk=8 dv=8 dtype=f32 causal=none {} regime=diffuse seed=1",
                        {"dropout=1", "dropout=-0.1", "dropout=nan", "dropout=x"});
  expect_refused_naming("dropout_seed", "b=1 hq=2 hkv=1 nq=2 nk=4 dk=8 dv=8 dtype=f32 causal=none {} regime=diffuse seed=1",
                        {"dropout_seed=3", "dropout=0.2 dropout_seed=-1"});
  Capabilities caps;
  declare_every_dtype(caps);
  declare_every_mask_and_shape(caps);
  EXPECT_EQ(covers(caps, p).reason, "dropout with its keep mask reported (dropout=) not declared");
  caps.score_modifications = {ScoreModification::dropout};
  EXPECT_TRUE(covers(caps, p).ok);
}

// The built-in stream keeps at the rate 1 - p, differs between seeds, and does not depend on the
// order it is asked in; judge_keep passes it and fails a mask that keeps everything, one that is
// not 0/1, and one of the wrong shape, naming each.
TEST(ProblemDropout, TheBuiltinStreamKeepsAtItsRateAndTheKeepMaskIsJudgedByItself) {
  Problem p = parse_problem("b=2 hq=3 hkv=3 nq=40 nk=50 dk=8 dv=8 dtype=f32 causal=bottom_right dropout=0.9 regime=diffuse seed=4");
  const Mask mask(p);
  const ScorePipeline pipeline(p, mask);
  Tensor keep = make_keep(p);
  std::int64_t kept = 0, same_as_other_seed = 0;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i)
        for (std::int64_t j = 0; j < p.n_k; ++j) {
          const std::uint64_t index = std::uint64_t(keep.offset(b, h, i, j));
          const bool k = pipeline.kept(b, h, i, j);
          EXPECT_EQ(k, builtin_dropout_keeps(4, p.dropout.p, index));
          keep.set(keep.offset(b, h, i, j), k ? 1.0 : 0.0);
          kept += k;
          same_as_other_seed += k == builtin_dropout_keeps(5, p.dropout.p, index);
        }
  const double n = double(keep.numel());
  EXPECT_NEAR(double(kept) / n, 0.1, 5 * std::sqrt(0.09 / n));
  EXPECT_LT(double(same_as_other_seed), 0.9 * n);  // independent masks agree on 82% of pairs
  const KeepJudgement fine = judge_keep(p, mask, keep);
  EXPECT_TRUE(fine.verdict.pass && fine.usable) << (fine.verdict.reasons.empty() ? "" : fine.verdict.reasons.front());
  EXPECT_EQ(fine.verdict.role, Role::keep);
  Tensor all_kept = keep;
  for (std::int64_t e = 0; e < all_kept.numel(); ++e) all_kept.set(e, 1.0);
  const KeepJudgement everything = judge_keep(p, mask, all_kept);
  EXPECT_FALSE(everything.verdict.pass);
  EXPECT_TRUE(everything.usable);
  ASSERT_FALSE(everything.verdict.reasons.empty());
  EXPECT_NE(everything.verdict.reasons.front().find("visible weights kept"), std::string::npos) << everything.verdict.reasons.front();
  Tensor half = keep;
  half.set(half.offset(1, 2, 39, 49), 0.5);  // visible under bottom-right causal
  const KeepJudgement not_binary = judge_keep(p, mask, half);
  EXPECT_FALSE(not_binary.verdict.pass || not_binary.usable);
  EXPECT_NE(not_binary.verdict.reasons.front().find("(b=1, h=2, i=39, j=49)"), std::string::npos) << not_binary.verdict.reasons.front();
  Tensor masked_garbage = keep;
  masked_garbage.set(masked_garbage.offset(0, 0, 0, 49), 0.5);  // masked: i = 0 sees keys 0..10
  EXPECT_TRUE(judge_keep(p, mask, masked_garbage).verdict.pass);
  EXPECT_FALSE(judge_keep(p, mask, make_lse(p)).usable);
  // judge_case needs the keep mask of a dropout problem, naming it.
  const CaseInputs in = generate_inputs(p);
  Tensor out = make_output(p);
  EXPECT_THROW(judge_case(p, in, out, nullptr), InputError);
}

}  // namespace
}  // namespace attn

// core/problem.hpp: validation names the offending field; the repro string and JSON round-trip
// to an equal problem; malformed repro strings are rejected with a message naming the token;
// derived figures (visible pairs, FLOPs, bytes) match hand counts.
// Over 500 lines: one suite for Problem, whose field table every case below exercises.
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/case_sets.hpp"
#include "core/error.hpp"
#include "core/problem.hpp"

namespace attn {

// Failure messages show the repro string instead of raw bytes.
void PrintTo(const Problem& p, std::ostream* os) { *os << p.repro(); }

namespace {

// True when `word` occurs in `text` as a whole word (not inside a longer identifier), so that
// "hq" is not found in "hkv" and "b" is not found in "bias".
bool has_word(const std::string& text, const std::string& word) {
  auto is_ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (std::size_t pos = text.find(word); pos != std::string::npos; pos = text.find(word, pos + 1)) {
    const bool left = pos == 0 || !is_ident(text[pos - 1]);
    const bool right = pos + word.size() == text.size() || !is_ident(text[pos + word.size()]);
    if (left && right) return true;
  }
  return false;
}

// Runs f, expects an InputError whose message names `field`; returns the message.
std::string expect_input_error(const std::function<void()>& f, const std::string& field) {
  try {
    f();
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_TRUE(has_word(message, field)) << "message does not name '" << field << "': " << message;
    return message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError naming '" << field << "', got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected InputError naming '" << field << "', nothing was thrown";
  return {};
}

void expect_invalid(const Problem& p, const std::string& field) {
  SCOPED_TRACE(p.repro());
  expect_input_error([&] { p.validate(); }, field);
}

Problem small() {
  Problem p;
  p.batch = 2, p.h_q = 4, p.h_kv = 2, p.n_q = 5, p.n_k = 7, p.d_k = 16, p.d_v = 8;
  return p;
}

// ---------------------------------------------------------------------------------------
// Validation.

TEST(ProblemValidate, DefaultAndSmallProblemsAreValid) {
  EXPECT_NO_THROW(Problem{}.validate());
  EXPECT_NO_THROW(small().validate());
}

TEST(ProblemValidate, NonPositiveExtentsNameTheirField) {
  const std::pair<const char*, std::int64_t Problem::*> fields[] = {
      {"b", &Problem::batch}, {"hq", &Problem::h_q}, {"hkv", &Problem::h_kv}, {"nq", &Problem::n_q},
      {"nk", &Problem::n_k},  {"dk", &Problem::d_k}, {"dv", &Problem::d_v}};
  for (auto [name, member] : fields) {
    for (std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, std::numeric_limits<std::int64_t>::min()}) {
      Problem p = small();
      p.*member = bad;
      expect_invalid(p, name);
    }
  }
}

TEST(ProblemValidate, AbsurdExtentsAreRejected) {
  Problem p = small();
  p.n_k = (std::int64_t{1} << 31) + 1;  // beyond the per-dimension limit
  expect_invalid(p, "nk");
  p = small();
  p.n_q = std::int64_t{1} << 20, p.d_k = std::int64_t{1} << 20;  // Q alone would hold 2^43 elements
  expect_invalid(p, "Q");
}

TEST(ProblemValidate, QueryHeadsMustBeAMultipleOfKvHeads) {
  Problem p = small();
  p.h_q = 6, p.h_kv = 4;
  const std::string message = expect_input_error([&] { p.validate(); }, "hq");
  EXPECT_TRUE(has_word(message, "hkv")) << message;
  p.h_q = 2, p.h_kv = 4;  // fewer query heads than kv heads
  expect_invalid(p, "hq");
  p.h_q = 8, p.h_kv = 1;  // MQA is fine
  EXPECT_NO_THROW(p.validate());
}

TEST(ProblemValidate, PerBatchPaddingLengths) {
  Problem p = small();  // b = 2, nk = 7
  p.padding.kind = KeyPadding::Kind::per_batch;
  p.padding.valid_len = {7, 0};  // both ends of [0, nk] are allowed
  EXPECT_NO_THROW(p.validate());
  p.padding.valid_len = {8, 1};  // longer than nk
  expect_invalid(p, "pad");
  p.padding.valid_len = {3, -1};  // negative
  expect_invalid(p, "pad");
  p.padding.valid_len = {3};  // one per batch expected
  expect_invalid(p, "pad");
  p.padding.valid_len = {3, 3, 3};
  expect_invalid(p, "pad");
}

TEST(ProblemValidate, PerQueryPaddingLengths) {
  Problem p = small();  // b * nq = 10
  p.padding.kind = KeyPadding::Kind::per_query;
  p.padding.valid_len = {0, 1, 2, 3, 4, 5, 6, 7, 0, 7};
  EXPECT_NO_THROW(p.validate());
  p.padding.valid_len[4] = 8;
  expect_invalid(p, "padq");
  p.padding.valid_len[4] = -3;
  expect_invalid(p, "padq");
  p.padding.valid_len = {1, 2};  // per batch count given for per-query padding
  expect_invalid(p, "padq");
}

TEST(ProblemValidate, LengthsWithoutAPaddingKindAreRejected) {
  Problem p = small();
  p.padding.valid_len = {3, 3};
  expect_invalid(p, "pad");
}

TEST(ProblemValidate, ScaleMustBeFiniteAndPositive) {
  for (double bad : {0.0, -0.0, -0.125, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    Problem p = small();
    p.scale = bad;
    expect_invalid(p, "scale");
  }
  Problem p = small();
  p.scale = 1e-300;  // tiny but positive is allowed
  EXPECT_NO_THROW(p.validate());
}

TEST(ProblemValidate, BoolKeepMustLieInTheUnitInterval) {
  for (double bad : {-0.01, 1.01, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    Problem p = small();
    p.bool_mask = {true, bad, Broadcast::shared};
    expect_invalid(p, "bool");
  }
  for (double ok : {0.0, 0.5, 1.0}) {
    Problem p = small();
    p.bool_mask = {true, ok, Broadcast::per_batch_head};
    EXPECT_NO_THROW(p.validate()) << ok;
  }
}

TEST(ProblemValidate, BiasStddevMustBeFiniteAndNonNegative) {
  for (double bad : {-1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    Problem p = small();
    p.bias = {true, bad, Broadcast::per_head};
    expect_invalid(p, "bias");
  }
}

// ---------------------------------------------------------------------------------------
// Repro strings.

void expect_round_trip(const Problem& p) {
  const std::string repro = p.repro();
  SCOPED_TRACE(repro);
  EXPECT_EQ(repro.find('\n'), std::string::npos) << "a repro string is one line";
  Problem back;
  ASSERT_NO_THROW(back = parse_problem(repro));
  EXPECT_EQ(back, p);
  EXPECT_EQ(back.repro(), repro);  // printing is stable
  if (p.scale) {
    ASSERT_TRUE(back.scale.has_value());
    EXPECT_EQ(std::bit_cast<std::uint64_t>(*back.scale), std::bit_cast<std::uint64_t>(*p.scale));
  }
}

TEST(ProblemRepro, EveryDTypeCausalKindAndRegimeRoundTrips) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16})
    for (Causal c : {Causal::none, Causal::top_left, Causal::bottom_right})
      for (Regime r : all_regimes()) {
        Problem p = small();
        p.dtype = d, p.window = Window::of(c), p.regime = r;
        p.seed = 17;
        expect_round_trip(p);
      }
}

TEST(ProblemRepro, PaddingRoundTrips) {
  Problem p = small();
  p.padding = {KeyPadding::Kind::per_batch, {7, 0}};
  expect_round_trip(p);
  p.padding = {KeyPadding::Kind::per_query, {0, 1, 2, 3, 4, 5, 6, 7, 7, 0}};
  expect_round_trip(p);
}

TEST(ProblemRepro, BoolMaskAndBiasRoundTripWithEachBroadcast) {
  for (Broadcast b : {Broadcast::shared, Broadcast::per_batch, Broadcast::per_head, Broadcast::per_batch_head}) {
    Problem p = small();
    p.bool_mask = {true, 0.3, b};
    expect_round_trip(p);
    p.bool_mask.keep = 1.0 / 7.0;  // not a short decimal: needs the shortest round-trip form
    expect_round_trip(p);
    p.bias = {true, 2.5, b};
    expect_round_trip(p);
    p.bool_mask = {};
    p.bias.stddev = 0.1;
    expect_round_trip(p);
  }
}

// Scales are printed so that they parse back to the same double, bit for bit.
TEST(ProblemRepro, ExplicitScalesRoundTripExactly) {
  for (double s : {0.1, 1.0 / 3.0, 0.125, 1.0 / std::sqrt(128.0), std::nextafter(0.125, 1.0), 1e-300,
                   5e-324, 1e300, 0.30000000000000004}) {
    Problem p = small();
    p.scale = s;
    if (s > 1e38) p.dtype = DType::f64;  // beyond f32's range: an f32 problem refuses it
    expect_round_trip(p);
  }
  // An explicit scale equal to the default is still explicit.
  Problem p = small();
  p.scale = 1.0 / std::sqrt(double(p.d_k));
  expect_round_trip(p);
  EXPECT_NE(parse_problem(p.repro()), small());
}

TEST(ProblemRepro, ExtremeSeedsRoundTrip) {
  for (std::uint64_t seed : {std::uint64_t{0}, std::uint64_t{1} << 63, std::numeric_limits<std::uint64_t>::max()}) {
    Problem p = small();
    p.seed = seed;
    expect_round_trip(p);
  }
}

TEST(ProblemRepro, EverythingAtOnceRoundTrips) {
  Problem p;
  p.batch = 3, p.h_q = 12, p.h_kv = 3, p.n_q = 1013, p.n_k = 17, p.d_k = 40, p.d_v = 24;
  p.dtype = DType::bf16, p.window = Window::of(Causal::bottom_right);
  p.padding = {KeyPadding::Kind::per_batch, {17, 1, 9}};
  p.bool_mask = {true, 0.05, Broadcast::per_head};
  p.bias = {true, 3.0, Broadcast::per_batch};
  p.scale = 1.0 / 3.0;
  p.regime = Regime::large;
  p.seed = std::numeric_limits<std::uint64_t>::max();
  expect_round_trip(p);
}

TEST(ProblemRepro, BuiltInCaseSetsRoundTrip) {
  for (const auto& cases : {default_cases(), quick_cases()}) {
    ASSERT_FALSE(cases.empty());
    for (const Problem& p : cases) expect_round_trip(p);
  }
}

const char* const required_fields[] = {"b=2", "hq=1", "hkv=1", "nq=1", "nk=1", "dk=64", "dv=64", "dtype=f32", "causal=none", "regime=diffuse", "seed=9"};

// `tokens` with every required field it does not name added, so a malformed token is what fails,
// not a missing field.
std::string complete(const std::string& tokens) {
  std::set<std::string> keys;
  std::istringstream stream(tokens);
  for (std::string token; stream >> token;) keys.insert(token.substr(0, token.find('=')));
  std::string out = tokens;
  for (std::string_view field : required_fields)
    if (!keys.contains(std::string(field.substr(0, field.find('='))))) out.append(" ").append(field);
  return out;
}

TEST(ProblemRepro, ParsesKeysInAnyOrder) {
  Problem expected;
  expected.batch = 2;
  expected.seed = 9;
  EXPECT_EQ(parse_problem("seed=9 regime=diffuse causal=none dtype=f32 dv=64 dk=64 nk=1 nq=1 hkv=1 hq=1 b=2"), expected);
  EXPECT_EQ(parse_problem("  b=2 \t hq=1 hkv=1 nq=1 nk=1 dk=64 dv=64 dtype=f32 causal=none regime=diffuse seed=9  "), expected);
}

// A field left out is never filled in: the message lists every one missing.
TEST(ProblemRepro, MissingFieldsAreNamed) {
  const std::string message = expect_input_error([] { (void)parse_problem("b=1 hq=2"); }, "hkv");
  EXPECT_NE(message.find("lacks hkv nq nk dk dv dtype causal regime seed"), std::string::npos) << message;
  for (std::string field : required_fields) {
    const std::string key = field.substr(0, field.find('='));
    std::string repro;
    for (std::string other : required_fields)
      if (other != field) repro += other + " ";
    SCOPED_TRACE("without " + key);
    const std::string without = expect_input_error([&] { (void)parse_problem(repro); }, key);
    EXPECT_NE(without.find("lacks " + key + " ("), std::string::npos) << without;
  }
  // The optional fields may be left out: their defaults are what repro() leaves unprinted.
  EXPECT_FALSE(parse_problem(complete("")).scale.has_value());
  EXPECT_EQ(parse_problem(complete("")).layout, Layout::bhsd);
}

// A case file may note something after a case; the comment is not part of it.
TEST(ProblemRepro, TrailingCommentIsIgnored) {
  const Problem plain = parse_problem(complete(""));
  EXPECT_EQ(parse_problem(complete("") + " # from the nightly log"), plain);
  EXPECT_EQ(parse_problem(complete("") + "#no space"), plain);
  expect_input_error([] { (void)parse_problem("# only a comment"); }, "empty");
  expect_input_error([] { (void)parse_problem("b=2 # hq=1 hkv=1 nq=1 nk=1 dk=64 dv=64 dtype=f32 causal=none regime=diffuse seed=9"); }, "hq");
}

struct Malformed {
  const char* repro;
  const char* names;  // a word the message must contain
};

TEST(ProblemRepro, MalformedStringsThrowNamingTheToken) {
  const Malformed blank[] = {{"", "empty"}, {"   ", "empty"}, {"\t\n", "empty"}};
  for (const auto& c : blank) {
    SCOPED_TRACE(std::string("repro: '") + c.repro + "'");
    expect_input_error([&] { (void)parse_problem(c.repro); }, c.names);
  }
  // Each completed with the fields it lacks: the message is about the token, not a missing field.
  const Malformed cases[] = {
      {"b=", "b"},                      // no value
      {"=1", "key"},                    // no key
      {"b", "b"},                       // no '='
      {"b=x", "b"},                     // not an integer
      {"b=1x", "b"},                    // trailing junk
      {"b=1.5", "b"},
      {"nq=99999999999999999999", "nq"},  // does not fit in 64 bits
      {"b=1 b=2", "b"},                 // duplicate key
      {"foo=1", "foo"},                 // unknown key
      {"dtype=f8", "dtype"},
      {"causal=left", "causal"},
      {"regime=hot", "regime"},
      {"pad=1,,2", "pad"},              // empty list element
      {"pad=1,", "pad"},
      {"pad=1 padq=1", "padq"},         // exclusive
      {"bool=0.5", "bool"},             // missing @BROADCAST
      {"bool=0.5@z", "bool"},           // unknown broadcast
      {"bool=x@h", "bool"},
      {"bias=1@", "bias"},
      {"scale=abc", "scale"},
      {"scale=nan", "scale"},           // parses, then fails validation: not finite
      {"scale=inf", "scale"},
      {"scale=0", "scale"},
      {"seed=-1", "seed"},              // seeds are unsigned
      {"seed=18446744073709551616", "seed"},  // UINT64_MAX + 1
      {"b=0", "b"},                     // well-formed but invalid
      {"hq=3 hkv=2", "hq"},
      {"b=2 pad=1", "pad"},             // one length per batch expected
  };
  for (const auto& c : cases) {
    const std::string repro = complete(c.repro);
    SCOPED_TRACE("repro: '" + repro + "'");
    const std::string message = expect_input_error([&] { (void)parse_problem(repro); }, c.names);
    EXPECT_EQ(message.find("lacks"), std::string::npos) << message;
  }
}

// Windows: a causal window prints as the causal= token it always did; any other as window=.
TEST(ProblemRepro, WindowsRoundTripAndCausalKeepsItsToken) {
  const std::string base = "b=1 hq=1 hkv=1 nq=4 nk=6 dk=8 dv=8 dtype=f32 ";
  Problem p = parse_problem(base + "window=inf,0@bottom_right regime=diffuse seed=1");
  EXPECT_EQ(p.window, Window::of(Causal::bottom_right));
  EXPECT_NE(p.repro().find(" causal=bottom_right "), std::string::npos) << p.repro();
  EXPECT_EQ(parse_problem(base + "window=inf,inf@bottom_right regime=diffuse seed=1").repro().find("window"), std::string::npos);
  for (Window w : {Window{2, 0, Align::top_left}, Window{0, 3, Align::bottom_right}, Window{Window::unbounded, 5, Align::top_left},
                   Window{7, Window::unbounded, Align::bottom_right}, Window{0, 0, Align::top_left}}) {
    Problem q = small();
    q.window = w;
    q.padding = {KeyPadding::Kind::per_batch, {3, 7}};
    expect_round_trip(q);
    EXPECT_EQ(q.repro().find("causal="), std::string::npos) << q.repro();
    EXPECT_NE(q.repro().find(" window=" + to_string(w) + " "), std::string::npos) << q.repro();
    EXPECT_NE(q.label().find("window"), std::string::npos) << q.label();
    EXPECT_TRUE(q.has_mask());
  }
  EXPECT_EQ(to_string(Window{128, 0, Align::bottom_right}), "128,0@bottom_right");
  EXPECT_EQ(to_string(Window{Window::unbounded, 4, Align::top_left}), "inf,4@top_left");
}

TEST(ProblemRepro, MalformedWindowsNameTheToken) {
  const std::string base = "b=1 hq=1 hkv=1 nq=4 nk=6 dk=8 dv=8 dtype=f32 regime=diffuse seed=1 ";
  for (std::string bad : {"window=2", "window=2,0", "window=2,0@left", "window=x,0@top_left", "window=-1,0@top_left",
                          "window=2,-3@top_left", "window=4294967296,0@top_left", "window=@top_left"})
    expect_input_error([&] { (void)parse_problem(base + bad); }, "window");
  expect_input_error([&] { (void)parse_problem(base + "window=2,0@top_left causal=none"); }, "exclusive");
  Problem p = small();
  p.window = {-2, 0, Align::top_left};
  expect_invalid(p, "window");
}

TEST(ProblemJson, AGeneralWindowIsAnObjectAndACausalOneKeepsItsKey) {
  Problem p = small();
  p.window = {3, Window::unbounded, Align::bottom_right};
  const nlohmann::json j = p;
  EXPECT_FALSE(j.contains("causal"));
  EXPECT_EQ(j.at("window"), (nlohmann::json{{"left", 3}, {"right", nullptr}, {"align", "bottom_right"}}));
  EXPECT_EQ(j.get<Problem>(), p);
  p.window = Window::of(Causal::top_left);
  EXPECT_EQ(nlohmann::json(p).at("causal"), "top_left");
  EXPECT_FALSE(nlohmann::json(p).contains("window"));
}

// ---------------------------------------------------------------------------------------
// JSON.

TEST(ProblemJson, CarriesTheReproAndReadsBackEqual) {
  Problem p = small();
  p.dtype = DType::f16, p.window = Window::of(Causal::top_left);
  p.padding = {KeyPadding::Kind::per_batch, {3, 7}};
  p.bias = {true, 0.5, Broadcast::per_head};
  p.scale = 1.0 / 3.0;
  p.seed = std::numeric_limits<std::uint64_t>::max();
  const nlohmann::json j = p;
  ASSERT_TRUE(j.contains("repro"));
  EXPECT_EQ(j["repro"].get<std::string>(), p.repro());
  EXPECT_EQ(j["b"].get<std::int64_t>(), 2);
  EXPECT_EQ(j["dtype"].get<std::string>(), "f16");
  EXPECT_EQ(j.get<Problem>(), p);
  // Through text, as a report file would carry it.
  EXPECT_EQ(nlohmann::json::parse(j.dump()).get<Problem>(), p);
}

TEST(ProblemJson, EveryBuiltInCaseRoundTrips) {
  for (const Problem& p : quick_cases()) {
    const nlohmann::json j = p;
    EXPECT_EQ(nlohmann::json::parse(j.dump()).get<Problem>(), p) << p.repro();
  }
}

TEST(ProblemJson, MissingOrMalformedReproThrows) {
  EXPECT_THROW((void)nlohmann::json::object().get<Problem>(), InputError);
  const nlohmann::json not_a_string = {{"repro", 3}}, invalid = {{"repro", "b=0 hq=1 hkv=1 nq=1 nk=1 dk=64 dv=64 dtype=f32 causal=none regime=diffuse seed=9"}};
  EXPECT_THROW((void)not_a_string.get<Problem>(), InputError);
  EXPECT_THROW((void)invalid.get<Problem>(), InputError);
  EXPECT_THROW((void)nlohmann::json::array().get<Problem>(), InputError);
}

// ---------------------------------------------------------------------------------------
// Derived figures, counted by hand.

TEST(ProblemFigures, UnmaskedSeesEveryPair) {
  Problem p = small();  // b = 2, hq = 4, nq = 5, nk = 7
  EXPECT_EQ(p.visible_pairs(), 2 * 4 * 5 * 7);
  EXPECT_FALSE(p.has_mask());
}

TEST(ProblemFigures, CausalTopLeftSquareIsATriangle) {
  Problem p = small();
  p.n_q = p.n_k = 9;
  p.window = Window::of(Causal::top_left);
  EXPECT_EQ(p.visible_pairs(), 2 * 4 * (9 * 10 / 2));
  p.window = Window::of(Causal::bottom_right);  // square: both alignments agree
  EXPECT_EQ(p.visible_pairs(), 2 * 4 * (9 * 10 / 2));
}

TEST(ProblemFigures, CausalAlignmentsDifferWhenLengthsDiffer) {
  Problem p;
  p.n_q = 4, p.n_k = 6;
  p.window = Window::of(Causal::bottom_right);  // rows see 3, 4, 5, 6 keys
  EXPECT_EQ(p.visible_pairs(), 18);
  p.window = Window::of(Causal::top_left);  // rows see 1, 2, 3, 4
  EXPECT_EQ(p.visible_pairs(), 10);
  p.n_q = 6, p.n_k = 4;
  p.window = Window::of(Causal::bottom_right);  // rows see 0, 0, 1, 2, 3, 4
  EXPECT_EQ(p.visible_pairs(), 10);
  p.window = Window::of(Causal::top_left);  // rows see 1, 2, 3, 4, 4, 4
  EXPECT_EQ(p.visible_pairs(), 18);
  p.batch = 3, p.h_q = 2, p.h_kv = 1;  // scales with b * hq, not hkv
  EXPECT_EQ(p.visible_pairs(), 3 * 2 * 18);
}

// A sliding window counts its band exactly; the published FLOPs of a non-causal window are the
// exact ones (no convention to halve by).
TEST(ProblemFigures, SlidingWindowCountsItsBand) {
  Problem p;
  p.n_q = p.n_k = 10;
  p.window = {3, 0, Align::top_left};  // rows see 1, 2, 3, 4, 4, ... keys
  EXPECT_EQ(p.visible_pairs(), 1 + 2 + 3 + 4 * 7);
  EXPECT_DOUBLE_EQ(p.flops(), 2.0 * 34 * double(p.d_k + p.d_v));
  EXPECT_DOUBLE_EQ(p.flops_published(), p.flops());
  p.window = {1, 1, Align::bottom_right};
  p.n_q = 3;  // delta = 7: rows see keys 6..8, 7..9, 8..9
  EXPECT_EQ(p.visible_pairs(), 3 + 3 + 2);
}

TEST(ProblemFigures, PaddingCountsLeadingKeys) {
  Problem p = small();  // nq = 5
  p.padding = {KeyPadding::Kind::per_batch, {3, 0}};
  EXPECT_EQ(p.visible_pairs(), 4 * (5 * 3 + 0));
  p.padding = {KeyPadding::Kind::per_query, {0, 1, 2, 3, 4, 7, 7, 7, 7, 7}};
  EXPECT_EQ(p.visible_pairs(), 4 * (10 + 35));
  p.window = Window::of(Causal::top_left);  // intersection: min(i + 1, len) = 0,1,2,3,4 and 1,2,3,4,5
  EXPECT_EQ(p.visible_pairs(), 4 * (10 + 15));
}

TEST(ProblemFigures, FlopsUseTheExactVisiblePairs) {
  Problem p = small();
  p.d_k = 16, p.d_v = 8;
  // Unmasked: the exact count and the published convention agree.
  EXPECT_EQ(p.flops(), 2.0 * 2 * 4 * 5 * 7 * (16 + 8));
  EXPECT_EQ(p.flops_published(), 4.0 * 2 * 4 * 5 * 7 * ((16 + 8) / 2.0));
  EXPECT_EQ(p.flops(), p.flops_published());
  // Causal: the exact count follows the triangle, the published one simply halves.
  p.n_q = p.n_k = 9;
  p.window = Window::of(Causal::top_left);
  EXPECT_EQ(p.flops(), 2.0 * double(p.visible_pairs()) * (16 + 8));
  EXPECT_EQ(p.flops(), 2.0 * 2 * 4 * 45 * (16 + 8));
  Problem unmasked = p;
  unmasked.window = Window::of(Causal::none);
  EXPECT_EQ(p.flops_published(), unmasked.flops_published() / 2);
  EXPECT_NE(p.flops(), p.flops_published());  // 45 of 81 pairs is not one half
  p.window = Window::of(Causal::bottom_right);
  EXPECT_EQ(p.flops_published(), unmasked.flops_published() / 2);
}

TEST(ProblemFigures, BytesCountQKVAndOOnce) {
  Problem p = small();  // b 2, hq 4, hkv 2, nq 5, nk 7, dk 16, dv 8
  p.dtype = DType::f16;
  const double q = 2 * 4 * 5 * 16, k = 2 * 2 * 7 * 16, v = 2 * 2 * 7 * 8, o = 2 * 4 * 5 * 8;
  EXPECT_EQ(p.bytes_min(), 2.0 * (q + k + v + o));
  p.dtype = DType::f64;
  EXPECT_EQ(p.bytes_min(), 8.0 * (q + k + v + o));
  p.window = Window::of(Causal::top_left);  // causality is computed, not read
  EXPECT_EQ(p.bytes_min(), 8.0 * (q + k + v + o));
  // A materialised mask or bias is read too, and a per-head one is bigger than a shared one.
  Problem shared = p, per_head = p;
  shared.bias = {true, 1.0, Broadcast::shared};
  per_head.bias = {true, 1.0, Broadcast::per_head};
  EXPECT_GT(shared.bytes_min(), p.bytes_min());
  EXPECT_GT(per_head.bytes_min(), shared.bytes_min());
  Problem with_bool = p;
  with_bool.bool_mask = {true, 0.5, Broadcast::shared};
  EXPECT_GT(with_bool.bytes_min(), p.bytes_min());
}

// A long bad token (a file pasted by mistake) is echoed cut, with its length: one readable line.
TEST(ProblemParse, ALongBadTokenIsEchoedCut) {
  const std::string junk(10000, 'x');
  for (const std::string& repro : {"b=1 hq=1 hkv=1 nq=1 nk=1 dk=8 dv=8 dtype=f32 causal=" + junk + " regime=diffuse seed=1",
                                   "b=1 hq=1 hkv=1 nq=1 nk=1 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=1 " + junk,
                                   "b=1 hq=1 hkv=1 nq=1 nk=1 dk=8 dv=8 dtype=f32 causal=none regime=" + junk + " seed=1",
                                   "b=1 hq=1 hkv=1 nq=1 nk=1 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=1 layout=" + junk,
                                   "b=1 hq=1 hkv=1 nq=1 nk=1 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=1 op=" + junk}) {
    try {
      parse_problem(repro);
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_LT(what.size(), 300u) << what;
      EXPECT_NE(what.find("(10000 characters)"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace attn

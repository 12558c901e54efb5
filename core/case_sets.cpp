#include "core/case_sets.hpp"

#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/input_file.hpp"

namespace attn {
namespace {

struct Shape {
  std::int64_t batch, h_q, h_kv, n_q, n_k, d_k, d_v;
};

enum class MaskKind { none, causal_tl, causal_br, pad, padq, bool_half, bias, causal_br_pad_bias, sparse_bool_causal, sliding_br, local_tl, alibi, alibi_causal_br, sliding_alibi_br };

void apply_mask(Problem& p, MaskKind kind) {
  auto pad_per_batch = [&] {
    p.padding.kind = KeyPadding::Kind::per_batch;
    for (std::int64_t b = 0; b < p.batch; ++b) p.padding.valid_len.push_back(p.n_k * (b + 1) / (p.batch + 1) + b);
  };
  switch (kind) {
    case MaskKind::none: break;
    case MaskKind::causal_tl: p.window = Window::of(Causal::top_left); break;
    case MaskKind::causal_br: p.window = Window::of(Causal::bottom_right); break;
    case MaskKind::pad: pad_per_batch(); break;
    case MaskKind::padq:
      // Lengths cycle through 0 (a fully masked row), short, and full.
      p.padding.kind = KeyPadding::Kind::per_query;
      for (std::int64_t b = 0; b < p.batch; ++b)
        for (std::int64_t i = 0; i < p.n_q; ++i) p.padding.valid_len.push_back((i * 7 + b * 3) % (p.n_k + 1));
      break;
    case MaskKind::bool_half: p.bool_mask = {true, 0.5, Broadcast::per_batch_head}; break;
    case MaskKind::bias: p.bias = {true, 1.0, Broadcast::per_head}; break;
    case MaskKind::alibi: p.bias = BiasSpec::alibi(); break;
    case MaskKind::alibi_causal_br:  // a decoder's ALiBi (BLOOM, MPT): causal, keys past the prompt
      p.bias = BiasSpec::alibi();
      p.window = Window::of(Causal::bottom_right);
      break;
    case MaskKind::causal_br_pad_bias:
      p.window = Window::of(Causal::bottom_right);
      pad_per_batch();
      p.bias = {true, 2.0, Broadcast::per_batch_head};
      break;
    case MaskKind::sliding_br:
      // A sliding window (Mistral's): each query sees its diagonal key and the n_k / 5 before it.
      p.window = Window{p.n_k / 5, 0, Align::bottom_right};
      break;
    case MaskKind::sliding_alibi_br:  // both of a decoder's position terms: the window and ALiBi, one diagonal
      p.window = Window{p.n_k / 5, 0, Align::bottom_right};
      p.bias = BiasSpec::alibi();
      break;
    case MaskKind::local_tl:
      // Local attention, bounded on both sides: 16 keys before the diagonal and 8 after.
      p.window = Window{16, 8, Align::top_left};
      break;
    case MaskKind::sparse_bool_causal:
      // Keeping 1 pair in 20 leaves many rows with no visible key.
      p.window = Window::of(Causal::top_left);
      p.bool_mask = {true, 0.05, Broadcast::shared};
      break;
  }
}

struct Scenario {
  Shape shape;
  MaskKind mask;
  Regime regime;
  double scale = 0;    // 0: the default 1/sqrt(d_k)
  double softcap = 0;  // 0: none
  std::optional<double> sink_mean = std::nullopt;  // sinks drawn per head around it; none: no sink
  double dropout = 0;  // 0: none
};

Problem make_problem(const Scenario& sc, const ProblemNumerics& numerics, std::uint64_t seed) {
  Problem p;
  p.batch = sc.shape.batch, p.h_q = sc.shape.h_q, p.h_kv = sc.shape.h_kv;
  p.n_q = sc.shape.n_q, p.n_k = sc.shape.n_k, p.d_k = sc.shape.d_k, p.d_v = sc.shape.d_v;
  p.numerics() = numerics;
  p.regime = sc.regime;
  if (sc.scale > 0) p.scale = sc.scale;
  if (sc.softcap > 0) p.softcap = sc.softcap;
  if (sc.sink_mean) p.sinks = {true, *sc.sink_mean, {}};
  if (sc.dropout > 0) p.dropout.p = double(float(sc.dropout));
  apply_mask(p, sc.mask);
  p.seed = seed;
  p.validate();
  return p;
}

// Each scenario in each dtype.
std::vector<Problem> expand(const std::vector<Scenario>& scenarios, std::uint64_t seed_base) {
  std::vector<Problem> cases;
  const DType dtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16};
  for (std::size_t s = 0; s < scenarios.size(); ++s)
    for (std::size_t d = 0; d < 4; ++d) {
      ProblemNumerics numerics;
      numerics.dtype = dtypes[d];
      cases.push_back(make_problem(scenarios[s], numerics, seed_base + s * 10 + d));
    }
  return cases;
}

struct MixedScenario {
  Scenario scenario;
  DType dtype;
  std::map<Role, DType> own;
};

// Shapes: single token; square MHA; GQA 4:1 around a 128 tile; MQA with n_q > n_k; primes with
// d_k != d_v; a long prime sequence; d = 256; odd small dims; decode-like n_q << n_k; n_q >> n_k.
constexpr Shape one{1, 1, 1, 1, 1, 64, 64};
constexpr Shape square{2, 4, 4, 64, 64, 64, 64};
constexpr Shape gqa{1, 8, 2, 127, 129, 64, 64};
constexpr Shape mqa{1, 4, 1, 129, 65, 32, 32};
constexpr Shape primes{2, 2, 2, 97, 97, 128, 64};
constexpr Shape long_prime{1, 2, 2, 1013, 1013, 64, 64};
constexpr Shape wide{1, 2, 1, 256, 512, 256, 256};
constexpr Shape odd{1, 3, 3, 33, 17, 16, 40};
constexpr Shape decode{2, 4, 2, 16, 300, 64, 64};
constexpr Shape prefill{1, 2, 2, 300, 16, 64, 64};
constexpr Shape mha_past_tile{1, 4, 4, 200, 200, 64, 64};  // plain MHA, past a 128 tile and off a 64 one
constexpr Shape single_key{2, 2, 2, 5, 1, 32, 32};          // n_k = 1; bottom-right leaves one row visible

}  // namespace

std::vector<Problem> default_cases() {
  using M = MaskKind;
  using R = Regime;
  std::vector<Problem> cases = expand({{one, M::none, R::diffuse},
                 {one, M::causal_tl, R::saturated},
                 {square, M::none, R::diffuse},
                 {square, M::causal_tl, R::peaked},
                 {square, M::causal_br, R::saturated},
                 {square, M::bool_half, R::sparse_int},
                 {square, M::bias, R::uniform01, 0.05},
                 {gqa, M::causal_br, R::diffuse},
                 {gqa, M::causal_tl, R::large},
                 {gqa, M::pad, R::uniform01},
                 {gqa, M::causal_br_pad_bias, R::large},
                 {mqa, M::causal_tl, R::peaked},
                 {mqa, M::causal_br, R::diffuse},
                 {mqa, M::bias, R::large},
                 {primes, M::none, R::peaked},
                 {primes, M::padq, R::saturated},
                 {primes, M::causal_br_pad_bias, R::diffuse, 0.3},
                 {long_prime, M::causal_br, R::diffuse},
                 {long_prime, M::none, R::large},
                 {wide, M::causal_tl, R::peaked},
                 {odd, M::sparse_bool_causal, R::sparse_int},
                 {odd, M::bool_half, R::uniform01},
                 {decode, M::causal_br, R::saturated},
                 {decode, M::padq, R::peaked},
                 {prefill, M::causal_tl, R::diffuse},
                 {prefill, M::causal_br_pad_bias, R::sparse_int},
                 // Each alone, so a kernel that supports only it still meets it: a custom scale far
                 // from 1/sqrt(d_k) without a bias; per-batch padding with b > 1 without a bias (a
                 // kernel using batch 0's length for every batch); a large-magnitude causal MHA case
                 // past a tile (a finite initial row maximum); n_k = 1.
                 {square, M::none, R::diffuse, 0.9},
                 {decode, M::pad, R::diffuse},
                 {mha_past_tile, M::causal_tl, R::large},
                 {mha_past_tile, M::causal_br, R::large, 0.05},
                 {single_key, M::causal_br, R::diffuse},
                 // Windows other than causal (appended: the cases above keep their seeds and repro
                 // strings): a decoder's sliding window over a KV cache, local attention past a
                 // tile, and a sliding window that leaves most rows of a long query fully masked.
                 {decode, M::sliding_br, R::diffuse},
                 {mha_past_tile, M::local_tl, R::peaked},
                 {prefill, M::sliding_br, R::saturated}},
                1000);
  // Mixed precision, one case each (appended too): half-precision inputs written to an f32 output
  // (a kernel that rounds to the input type before its f32 store fails by far), an f32 query over a
  // bf16 KV cache, and f32 inputs written to a half-precision output.
  const MixedScenario mixed[] = {
      {{gqa, M::causal_br, R::diffuse}, DType::f16, {{Role::o, DType::f32}}},
      {{primes, M::none, R::peaked}, DType::bf16, {{Role::o, DType::f32}}},
      {{mha_past_tile, M::causal_tl, R::large}, DType::f16, {{Role::o, DType::f32}}},
      {{decode, M::causal_br, R::saturated}, DType::f32, {{Role::k, DType::bf16}, {Role::v, DType::bf16}}},
      {{odd, M::causal_br_pad_bias, R::uniform01}, DType::f32, {{Role::o, DType::f16}}},
  };
  for (std::size_t i = 0; i < std::size(mixed); ++i) {
    ProblemNumerics numerics;
    numerics.dtype = mixed[i].dtype;
    numerics.role_dtypes = mixed[i].own;
    cases.push_back(make_problem(mixed[i].scenario, numerics, 2000 + i));
  }
  // A bias that is a function of the positions, ALiBi's (appended as well): with GQA under a
  // causal mask (slopes per query head, 8 heads), and alone past a tile (4 heads).
  const std::vector<Problem> alibi = expand({{gqa, M::alibi_causal_br, R::diffuse}, {mha_past_tile, M::alibi, R::peaked}}, 3000);
  cases.insert(cases.end(), alibi.begin(), alibi.end());
  // Soft-capping (appended): saturated, with scores near the overflow far above the cap (tanh is
  // +-1 there, and a clip would pass); around the knee; with a sliding window; with ALiBi, whose
  // bias is added after the cap; with padding, a bias and fully masked rows.
  const std::vector<Problem> softcap = expand({{gqa, M::causal_br, R::large, 0, 30},
                                               {mha_past_tile, M::none, R::peaked, 0, 5},
                                               {decode, M::sliding_br, R::diffuse, 0, 2},
                                               {gqa, M::alibi_causal_br, R::peaked, 0, 20},
                                               {odd, M::causal_br_pad_bias, R::large, 0, 1}},
                                              4000);
  cases.insert(cases.end(), softcap.begin(), softcap.end());
  // Soft-capping with a sliding window and ALiBi on one diagonal (appended).
  const std::vector<Problem> capped_window = expand({{decode, M::sliding_alibi_br, R::peaked, 0, 10}}, 4500);
  cases.insert(cases.end(), capped_window.begin(), capped_window.end());
  // Attention sinks (appended): gpt-oss's GQA under a causal mask; with padding, a bias and
  // fully masked rows (which stay zeros: a sink is no key); a sink far above every score (rows
  // whose weights almost all go to it); under a sliding window (gpt-oss alternates the two); at a
  // single key; and everything together: soft-cap, sliding window, ALiBi, GQA and a sink.
  const std::vector<Problem> sinks = expand({{gqa, M::causal_br, R::diffuse, 0, 0, 0.0},
                                             {odd, M::causal_br_pad_bias, R::uniform01, 0, 0, 1.0},
                                             {mha_past_tile, M::causal_tl, R::peaked, 0, 0, 60.0},
                                             {decode, M::sliding_br, R::diffuse, 0, 0, 2.0},
                                             {single_key, M::none, R::peaked, 0, 0, -1.0},
                                             {decode, M::sliding_alibi_br, R::peaked, 0, 10, 3.0}},
                                            6000);
  cases.insert(cases.end(), sinks.begin(), sinks.end());
  // Dropout (appended), each case's keep mask drawn by the implementation and reported: p = 0.1
  // (training's usual rate) with GQA under a causal mask; p = 0.9, where nine weights in ten are
  // dropped and the kept ones scaled by 10, past a tile; with padding, a bias and fully masked rows;
  // with a soft-cap and ALiBi; and everything together: soft-cap, sliding window, ALiBi, GQA, a
  // sink and dropout.
  const std::vector<Problem> dropout = expand({{gqa, M::causal_br, R::diffuse, 0, 0, std::nullopt, 0.1},
                                               {mha_past_tile, M::none, R::peaked, 0, 0, std::nullopt, 0.9},
                                               {odd, M::causal_br_pad_bias, R::uniform01, 0, 0, std::nullopt, 0.1},
                                               {gqa, M::alibi_causal_br, R::peaked, 0, 20, std::nullopt, 0.9},
                                               {decode, M::sliding_alibi_br, R::peaked, 0, 10, 3.0, 0.1}},
                                              7000);
  cases.insert(cases.end(), dropout.begin(), dropout.end());
  return cases;
}

std::vector<Problem> quick_cases() {
  using M = MaskKind;
  using R = Regime;
  constexpr Shape small{2, 4, 2, 19, 23, 16, 24};
  return expand({{one, M::none, R::diffuse},
                 {small, M::causal_tl, R::peaked},
                 {small, M::causal_br, R::saturated},
                 {small, M::padq, R::large},
                 {small, M::bool_half, R::sparse_int},
                 {odd, M::causal_br_pad_bias, R::uniform01},
                 {small, M::pad, R::diffuse, 1.3},
                 {single_key, M::none, R::peaked}},
                5000);
}

std::vector<Problem> load_cases(std::string_view name_or_path) {
  if (name_or_path == "default") return default_cases();
  if (name_or_path == "quick") return quick_cases();
  const std::string path(name_or_path);
  std::istringstream file(read_input_file(path, "no such case file (expected default, quick or a file of repro strings)"));
  std::vector<Problem> cases;
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    try {
      cases.push_back(parse_problem(line));
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}:{}: {}", path, number, e.what()));
    }
  }
  if (file.bad()) throw InputError(fmt::format("error reading case file '{}'", path));
  if (cases.empty()) throw InputError(fmt::format("case file '{}' holds no cases", path));
  return cases;
}

}  // namespace attn

// Writes a directory of "a user's own tensors" for `attnbench check --inputs` (tests/file_route/
// given_inputs.sh), with the outputs computed here in double by a plain loop over the semantics
// the README states (mask broadcast, valid lengths, causal alignment, fully masked rows as zeros),
// independently of the harness's Mask, reference and readers: only core's .npy writer and dtype
// rounding are shared. Usage: given_case_writer DIR SCENARIO MODE
//   SCENARIO masked: f32, GQA, mask [1, h_q, n_q, n_k], bias [b, 1, n_q, n_k], valid_lens [b],
//                    causal bottom_right, scale 0.3, n_q < n_k
//            padq:   f16, causal top_left, valid_lens [b, n_q] with zeros (fully masked rows), lse.npy
//            bf16:   bf16 ('<f4' bf16 values, settings dtype bf16), default scale, no mask
//            dropout: f32, causal bottom_right, settings "dropout_p": 0.2, "dropout_seed": 11: each weight kept
//                    or dropped by this program's own stream (std::mt19937_64), the kept ones rescaled by
//                    1 / (1 - p), the keep mask written as keep.npy ('<f4' 0/1)
//   MODE exact: the outputs rounded to the dtype; off: one element of out.npy (a visible row) + 1e-3;
//        wrong-scale: the outputs computed with 1/sqrt(d_k) where settings say another scale;
//        causal-ignored: the outputs computed without the causal part of the mask (the diagnosis names each);
//        no-rescale: dropout's kept weights not rescaled; no-keep: no keep.npy; stray-keep: a keep.npy
//        without dropout in settings;
//        unknown-key, twice-key (causal given twice), bad-causal, kdim (k.npy's d_k one too many), no-v, mask-shape, int-q, nan-q, lens-range:
//        the inputs broken as named.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/case_files.hpp"
#include "core/npy.hpp"
#include "core/tensor.hpp"

namespace {

using attn::DType;
using attn::Tensor;

struct Scenario {
  DType dtype;
  std::int64_t b, hq, hkv, nq, nk, dk, dv;
  int causal;  // 0 none, 1 top_left, 2 bottom_right
  double scale;  // 0: default
  bool mask, bias, lens_per_query, lens_per_batch, lse;
  double dropout;  // 0: none
};

attn::npy::Array to_npy(const Tensor& t) { return attn::tensor_to_npy(t); }

}  // namespace

int main(int argc, char** argv) {
  namespace npy = attn::npy;
  if (argc != 4) {
    std::fprintf(stderr, "usage: given_case_writer DIR masked|padq|bf16|dropout MODE\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  const std::string scenario = argv[2], mode = argv[3];
  Scenario s;
  if (scenario == "masked")
    s = {DType::f32, 2, 4, 2, 6, 9, 16, 8, 2, 0.3, true, true, false, true, false, 0};
  else if (scenario == "padq")
    s = {DType::f16, 2, 2, 1, 5, 5, 8, 8, 1, 0, false, false, true, false, true, 0};
  else if (scenario == "bf16")
    s = {DType::bf16, 1, 2, 2, 4, 7, 32, 16, 0, 0, false, false, false, false, false, 0};
  else if (scenario == "dropout")
    s = {DType::f32, 1, 2, 2, 12, 16, 8, 8, 2, 0, false, false, false, false, true, 0.2};
  else
    return std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str()), 2;
  std::filesystem::create_directories(dir);

  std::mt19937_64 rng(20261125);
  std::normal_distribution<double> normal;
  auto fill = [&](Tensor& t) {
    for (std::int64_t e = 0; e < t.numel(); ++e) t.set(e, normal(rng));
  };
  Tensor q(s.dtype, {s.b, s.hq, s.nq, s.dk}), k(s.dtype, {s.b, s.hkv, s.nk, s.dk}), v(s.dtype, {s.b, s.hkv, s.nk, s.dv});
  fill(q), fill(k), fill(v);
  // mask [1, h_q, n_q, n_k], bias [b, 1, n_q, n_k]: each broadcast over the other dimension.
  std::vector<std::uint8_t> mask(std::size_t(s.hq * s.nq * s.nk), 1);
  if (s.mask)
    for (auto& m : mask) m = std::uniform_real_distribution<double>(0, 1)(rng) < 0.7 ? 1 : 0;
  Tensor bias(s.dtype, {s.b, 1, s.nq, s.nk});
  fill(bias);
  std::vector<std::int64_t> lens;
  if (s.lens_per_batch) lens = {7, s.nk};
  if (s.lens_per_query)
    for (std::int64_t e = 0; e < s.b * s.nq; ++e) lens.push_back(e % 4 == 1 ? 0 : 1 + e % s.nk);

  const double scale = s.scale > 0 && mode != "wrong-scale" ? s.scale : 1.0 / std::sqrt(double(s.dk));
  const int causal_kind = mode == "causal-ignored" ? 0 : s.causal;
  Tensor out(s.dtype, {s.b, s.hq, s.nq, s.dv});
  Tensor lse(DType::f32, {s.b, s.hq, s.nq, 1});
  // Dropout's keep mask, drawn from this program's own stream (0/1 as '<f4').
  Tensor keep(DType::f32, {s.b, s.hq, s.nq, s.nk});
  for (std::int64_t e = 0; e < keep.numel(); ++e) keep.set(e, 0.0);
  std::mt19937_64 dropout_rng(11);
  std::bernoulli_distribution kept_draw(1.0 - s.dropout);
  const double rescale = s.dropout > 0 && mode != "no-rescale" ? 1.0 / (1.0 - s.dropout) : 1.0;
  std::int64_t visible_row = -1;
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.hq; ++h)
      for (std::int64_t i = 0; i < s.nq; ++i) {
        const std::int64_t kvh = h / (s.hq / s.hkv), row = (b * s.hq + h) * s.nq + i;
        std::vector<double> score(std::size_t(s.nk), -std::numeric_limits<double>::infinity());
        double m = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < s.nk; ++j) {
          bool see = true;
          if (causal_kind == 1) see = see && j <= i;
          if (causal_kind == 2) see = see && j <= i + (s.nk - s.nq);
          if (s.lens_per_batch) see = see && j < lens[std::size_t(b)];
          if (s.lens_per_query) see = see && j < lens[std::size_t(b * s.nq + i)];
          if (s.mask) see = see && mask[std::size_t((h * s.nq + i) * s.nk + j)];
          if (!see) continue;
          double dot = 0;
          for (std::int64_t c = 0; c < s.dk; ++c) dot += q.get(q.offset(b, h, i, c)) * k.get(k.offset(b, kvh, j, c));
          score[std::size_t(j)] = dot * scale + (s.bias ? bias.get(bias.offset(b, 0, i, j)) : 0.0);
          m = std::max(m, score[std::size_t(j)]);
        }
        double sum = 0;
        std::vector<double> o(std::size_t(s.dv), 0.0);
        if (m != -std::numeric_limits<double>::infinity()) {
          for (std::int64_t j = 0; j < s.nk; ++j) {
            const double w = std::exp(score[std::size_t(j)] - m);  // exp(-inf) = 0 for masked keys
            sum += w;
            const bool kept = s.dropout > 0 ? kept_draw(dropout_rng) : true;  // after the softmax, before V
            keep.set(row * s.nk + j, kept ? 1.0 : 0.0);
            if (!kept) continue;
            for (std::int64_t c = 0; c < s.dv; ++c) o[std::size_t(c)] += w * rescale * v.get(v.offset(b, kvh, j, c));
          }
          for (auto& x : o) x /= sum;
          if (visible_row < 0) visible_row = row;
        }
        for (std::int64_t c = 0; c < s.dv; ++c) out.set(row * s.dv + c, o[std::size_t(c)]);
        lse.set(row, sum > 0 ? m + std::log(sum) : -std::numeric_limits<double>::infinity());
      }
  if (mode == "off") out.set(visible_row * s.dv + 3, out.get(visible_row * s.dv + 3) + 1e-3);

  if (mode == "nan-q") q.set(q.offset(0, 1, 2, 3), std::numeric_limits<double>::quiet_NaN());  // a row that sees keys
  npy::write_file(dir / "q.npy", to_npy(q));
  if (mode == "int-q") {
    npy::Array a{npy::ElementType::i32, {s.b, s.hq, s.nq, s.dk}, {}};
    a.data.resize(std::size_t(a.numel()) * 4);
    npy::write_file(dir / "q.npy", a);
  }
  if (mode == "kdim") {
    Tensor k2(s.dtype, {s.b, s.hkv, s.nk, s.dk + 1});
    npy::write_file(dir / "k.npy", to_npy(k2));
  } else {
    npy::write_file(dir / "k.npy", to_npy(k));
  }
  if (mode != "no-v") npy::write_file(dir / "v.npy", to_npy(v));
  if (s.mask) {
    npy::Array a{npy::ElementType::boolean, {mode == "mask-shape" ? 3 : 1, s.hq, s.nq, s.nk}, {}};
    for (std::int64_t rep = 0; rep < a.shape[0]; ++rep)
      for (auto m : mask) a.data.push_back(std::byte(m));
    npy::write_file(dir / "mask.npy", a);
  }
  if (s.bias) npy::write_file(dir / "bias.npy", to_npy(bias));
  if (!lens.empty()) {
    if (mode == "lens-range") lens[0] = s.nk + 1;
    npy::Array a{npy::ElementType::i64, {}, {}};
    a.shape = s.lens_per_query ? std::vector<std::int64_t>{s.b, s.nq} : std::vector<std::int64_t>{s.b};
    a.data.resize(lens.size() * 8);
    std::memcpy(a.data.data(), lens.data(), a.data.size());
    npy::write_file(dir / "valid_lens.npy", a);
  }
  npy::write_file(dir / "out.npy", to_npy(out));
  if ((s.dropout > 0 && mode != "no-keep") || mode == "stray-keep") npy::write_file(dir / "keep.npy", to_npy(keep));
  if (s.lse) {
    npy::Array a = to_npy(lse);
    a.shape = {s.b, s.hq, s.nq};
    npy::write_file(dir / "lse.npy", a);
  }
  std::ofstream settings(dir / "settings.json");
  settings << "{";
  const char* causal = s.causal == 0 ? "none" : s.causal == 1 ? "top_left" : "bottom_right";
  settings << "\"causal\": \"" << (mode == "bad-causal" ? "bottom-right" : causal) << "\"";
  if (s.scale > 0) settings << ", \"scale\": " << s.scale;
  if (s.dtype == DType::bf16) settings << ", \"dtype\": \"bf16\"";
  if (s.dropout > 0) settings << ", \"dropout_p\": " << s.dropout << ", \"dropout_seed\": 11";
  if (mode == "unknown-key") settings << ", \"sink\": 30";
  if (mode == "twice-key") settings << ", \"causal\": \"none\"";
  settings << "}\n";
  return settings.flush() ? 0 : 1;
}

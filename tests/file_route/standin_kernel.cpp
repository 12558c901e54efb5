// A stand-in for an external program on the file route (where PyTorch is absent): reads a cases
// directory written by `attnbench cases` with nothing but its manifest and .npy files (no repro
// string parsing, no input generation), computes attention naively in double, and writes
// out_NNNN.npy and lse_NNNN.npy as the manifest asks. Faults for the tests:
//   --wrong-value I  adds 0.25 to one output element of case I
//   --wrong-shape I  writes case I's output without its last query row
//   --no-lse         writes no lse files
//   --fully-masked zeros|nan|junk  writes fully masked rows so (junk: 7s), whatever the manifest says
//   --keep-wrong I   reports for case I a keep mask other than the one its output was computed with
//                    (the stream's draw for the next seed: the right keep rate, the wrong mask)
//   --no-rescale I   computes case I's dropout without the 1 / (1 - p) rescale of the kept weights
//   --no-keep        writes no keep files
// Otherwise a fully masked row follows the case's "fully_masked_rows" policy (NaN for nan, else zeros).
// Dropout (the manifest's "dropout_p" and "dropout_seed"): each weight is kept or dropped by the built-in
// stream (core's builtin_dropout_keeps, on the manifest's seed and the element's flat index), the
// kept ones rescaled by 1 / (1 - p), and the keep mask written as keep_NNNN.npy ('|b1').
// Usage: file_route_standin CASES_DIR OUTPUTS_DIR [faults...]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.hpp"
#include "core/npy.hpp"
#include "core/score_pipeline.hpp"

namespace {

using attn::npy::Array;
using attn::npy::ElementType;

double element(const Array& a, std::int64_t e) {
  switch (a.type) {
    case ElementType::f64: { double x; std::memcpy(&x, a.data.data() + 8 * e, 8); return x; }
    case ElementType::f32: { float x; std::memcpy(&x, a.data.data() + 4 * e, 4); return double(x); }
    case ElementType::f16: { std::uint16_t x; std::memcpy(&x, a.data.data() + 2 * e, 2); return attn::f16_bits_to_double(x); }
    case ElementType::boolean: return a.data[std::size_t(e)] != std::byte{0} ? 1.0 : 0.0;
    default: throw std::runtime_error("unexpected element type");
  }
}

// Values rounded once to the case's dtype, encoded as the manifest says (bf16 as f32 values).
Array encode(const std::string& dtype, std::vector<std::int64_t> shape, const std::vector<double>& values) {
  Array a;
  a.shape = std::move(shape);
  const int item = dtype == "f64" ? 8 : dtype == "f16" ? 2 : 4;
  a.type = dtype == "f64" ? ElementType::f64 : dtype == "f16" ? ElementType::f16 : ElementType::f32;
  a.data.resize(values.size() * std::size_t(item));
  for (std::size_t e = 0; e < values.size(); ++e) {
    if (dtype == "f64") std::memcpy(a.data.data() + 8 * e, &values[e], 8);
    if (dtype == "f32" || dtype == "bf16") {
      const float x = float(dtype == "bf16" ? attn::round_to(attn::DType::bf16, values[e]) : values[e]);
      std::memcpy(a.data.data() + 4 * e, &x, 4);
    }
    if (dtype == "f16") {
      const std::uint16_t bits = attn::f16_bits_from_double(values[e]);
      std::memcpy(a.data.data() + 2 * e, &bits, 2);
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s CASES_DIR OUTPUTS_DIR [--wrong-value I] [--wrong-shape I] [--no-lse] [--fully-masked zeros|nan|junk] "
                 "[--keep-wrong I] [--no-rescale I] [--no-keep]\n",
                 argv[0]);
    return 2;
  }
  const std::filesystem::path cases_dir = argv[1], outputs_dir = argv[2];
  std::set<std::size_t> wrong_value, wrong_shape, keep_wrong, no_rescale;
  bool lse_files = true, keep_files = true;
  std::string forced_policy;
  for (int i = 3; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--no-lse") lse_files = false;
    else if (flag == "--no-keep") keep_files = false;
    else if (flag == "--keep-wrong" && i + 1 < argc) keep_wrong.insert(std::stoul(argv[++i]));
    else if (flag == "--no-rescale" && i + 1 < argc) no_rescale.insert(std::stoul(argv[++i]));
    else if (flag == "--wrong-value" && i + 1 < argc) wrong_value.insert(std::stoul(argv[++i]));
    else if (flag == "--wrong-shape" && i + 1 < argc) wrong_shape.insert(std::stoul(argv[++i]));
    else if (flag == "--fully-masked" && i + 1 < argc) forced_policy = argv[++i];
    else {
      std::fprintf(stderr, "unknown argument %s\n", flag.c_str());
      return 2;
    }
  }
  try {
    std::filesystem::create_directories(outputs_dir);
    std::ifstream manifest_file(cases_dir / "manifest.json");
    const auto manifest = nlohmann::json::parse(manifest_file);
    for (const auto& c : manifest.at("cases")) {
      const auto index = c.at("index").get<std::size_t>();
      const auto dtype = c.at("dtype").get<std::string>();
      const double scale = c.at("scale").get<double>();
      const double softcap = c.value("softcap", nlohmann::json(nullptr)).is_null() ? 0.0 : c.at("softcap").get<double>();
      const nlohmann::json drop_p_json = c.value("dropout_p", nlohmann::json(nullptr));
      const double drop_p = drop_p_json.is_null() ? 0.0 : drop_p_json.get<double>();
      const std::uint64_t drop_seed = drop_p_json.is_null() ? 0 : c.at("dropout_seed").get<std::uint64_t>();
      const double rescale = drop_p > 0 && !no_rescale.count(index) ? 1.0 / (1.0 - drop_p) : 1.0;
      const std::string policy = forced_policy.empty() ? c.at("fully_masked_rows").get<std::string>() : forced_policy;
      const double fill = policy == "nan" ? std::numeric_limits<double>::quiet_NaN() : policy == "junk" ? 7.0 : 0.0;
      const Array q = attn::npy::read_file(cases_dir / c["q"]["file"].get<std::string>());
      const Array k = attn::npy::read_file(cases_dir / c["k"]["file"].get<std::string>());
      const Array v = attn::npy::read_file(cases_dir / c["v"]["file"].get<std::string>());
      Array mask, bias;
      if (!c["mask"].is_null()) mask = attn::npy::read_file(cases_dir / c["mask"]["file"].get<std::string>());
      if (!c["bias"].is_null()) bias = attn::npy::read_file(cases_dir / c["bias"]["file"].get<std::string>());
      const std::int64_t b = q.shape[0], h_q = q.shape[1], n_q = q.shape[2], d_k = q.shape[3];
      const std::int64_t h_kv = k.shape[1], n_k = k.shape[2], d_v = v.shape[3];
      std::vector<double> out(std::size_t(b * h_q * n_q * d_v)), lse(std::size_t(b * h_q * n_q));
      std::vector<double> s(static_cast<std::size_t>(n_k));
      Array keep;  // dropout's keep mask [b, h_q, n_q, n_k], '|b1'
      if (drop_p > 0) {
        keep.type = ElementType::boolean;
        keep.shape = {b, h_q, n_q, n_k};
        keep.data.resize(std::size_t(b * h_q * n_q * n_k));
      }
      for (std::int64_t bi = 0; bi < b; ++bi)
        for (std::int64_t h = 0; h < h_q; ++h) {
          const std::int64_t g = h / (h_q / h_kv);
          for (std::int64_t i = 0; i < n_q; ++i) {
            double m = -std::numeric_limits<double>::infinity();
            for (std::int64_t j = 0; j < n_k; ++j) {
              // A mask or bias of extent 1 in batch or head broadcasts.
              auto at = [&](const Array& a) {
                return ((a.shape[0] == 1 ? 0 : bi) * a.shape[1] + (a.shape[1] == 1 ? 0 : h)) * n_q * n_k + i * n_k + j;
              };
              if (!mask.shape.empty() && element(mask, at(mask)) == 0) {
                s[std::size_t(j)] = -std::numeric_limits<double>::infinity();
                continue;
              }
              double dot = 0;
              for (std::int64_t c2 = 0; c2 < d_k; ++c2)
                dot += element(q, ((bi * h_q + h) * n_q + i) * d_k + c2) * element(k, ((bi * h_kv + g) * n_k + j) * d_k + c2);
              double scaled = scale * dot;
              if (softcap > 0) scaled = softcap * std::tanh(scaled / softcap);  // the manifest's soft-cap, before the bias
              s[std::size_t(j)] = scaled + (bias.shape.empty() ? 0.0 : element(bias, at(bias)));
              m = std::max(m, s[std::size_t(j)]);
            }
            const std::size_t row = std::size_t((bi * h_q + h) * n_q + i);
            if (m == -std::numeric_limits<double>::infinity()) {  // fully masked: zeros or NaN, as the manifest asks
              lse[row] = m;
              for (std::int64_t c2 = 0; c2 < d_v; ++c2) out[row * std::size_t(d_v) + std::size_t(c2)] = fill;
              continue;
            }
            double sum = 0;
            for (std::int64_t j = 0; j < n_k; ++j) sum += s[std::size_t(j)] == -INFINITY ? 0.0 : std::exp(s[std::size_t(j)] - m);
            lse[row] = m + std::log(sum);
            for (std::int64_t j = 0; j < n_k; ++j) {
              const std::uint64_t flat = std::uint64_t(row) * std::uint64_t(n_k) + std::uint64_t(j);
              bool kept = true;
              if (drop_p > 0) {
                kept = attn::builtin_dropout_keeps(drop_seed, drop_p, flat);
                const bool reported = keep_wrong.count(index) ? attn::builtin_dropout_keeps(drop_seed + 1, drop_p, flat) : kept;
                keep.data[flat] = std::byte(reported ? 1 : 0);
              }
              if (s[std::size_t(j)] == -INFINITY || !kept) continue;
              const double p = std::exp(s[std::size_t(j)] - m) / sum * rescale;
              for (std::int64_t c2 = 0; c2 < d_v; ++c2) out[row * std::size_t(d_v) + std::size_t(c2)] += p * element(v, ((bi * h_kv + g) * n_k + j) * d_v + c2);
            }
          }
        }
      std::vector<std::int64_t> out_shape = c["out"]["shape"].get<std::vector<std::int64_t>>();
      if (wrong_value.count(index)) out[out.size() / 2] += 0.25;
      if (wrong_shape.count(index)) {
        out_shape[2] -= 1;
        std::vector<double> fewer;
        for (std::int64_t r = 0; r < b * h_q; ++r)
          for (std::int64_t e = 0; e < (n_q - 1) * d_v; ++e) fewer.push_back(out[std::size_t(r * n_q * d_v + e)]);
        out = fewer;
      }
      attn::npy::write_file(outputs_dir / c["out"]["file"].get<std::string>(), encode(dtype, out_shape, out));
      if (lse_files)
        attn::npy::write_file(outputs_dir / c["lse"]["file"].get<std::string>(),
                              encode(dtype == "f64" ? "f64" : "f32", c["lse"]["shape"].get<std::vector<std::int64_t>>(), lse));
      if (keep_files && drop_p > 0) attn::npy::write_file(outputs_dir / c["keep"]["file"].get<std::string>(), keep);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "file_route_standin: %s\n", e.what());
    return 1;
  }
  return 0;
}

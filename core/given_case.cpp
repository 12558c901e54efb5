#include "core/given_case.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/case_files.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/mask.hpp"
#include "core/npy.hpp"
#include "core/precision.hpp"
#include "core/score_settings.hpp"

namespace attn {
namespace {

namespace fs = std::filesystem;

std::optional<npy::Array> read_optional(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  return npy::read_file(path);
}

npy::Array read_required(const fs::path& path, std::string_view what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError(fmt::format("{}: missing ({} is required)", path.string(), what));
  return npy::read_file(path);
}

struct Settings {
  std::optional<double> scale;
  std::vector<double> sinks;  // one logit per query head; empty: none
  std::vector<NamedSetting> score_settings;  // softcap, dropout_p, ... by name (core/score_pipeline.hpp)
  Causal causal = Causal::none;
  std::optional<DType> dtype;
  std::map<Role, DType> role_dtypes;  // "dtypes": "o:f32", as the repro string's token
};

// The keys settings.json knows: its own and every score modification's settings.
std::vector<std::string> settings_keys() {
  std::vector<std::string> keys{"scale", "sinks", "causal", "dtype", "dtypes"};
  for (const ScoreModificationRow& row : score_modification_rows)
    for (const ScoreSetting& s : row.settings) keys.emplace_back(s.name);
  return keys;
}

Settings read_settings(const fs::path& path) {
  const std::string name = path.string();
  const std::vector<std::string> known = settings_keys();
  const nlohmann::json j = read_json_file(path, fmt::format("missing (write at least {{}}; keys: {})", fmt::join(known, ", ")));
  if (!j.is_object()) throw InputError(fmt::format("{}: not a JSON object", name));
  std::vector<std::string> unknown;
  for (const auto& [key, value] : j.items())
    if (std::find(known.begin(), known.end(), key) == known.end()) unknown.push_back("'" + key + "'");
  if (!unknown.empty())
    throw InputError(fmt::format("{}: unknown key{} {} (known: {})", name, unknown.size() > 1 ? "s" : "", fmt::join(unknown, ", "), fmt::join(known, ", ")));
  Settings s;
  if (j.contains("scale")) {
    const auto& v = j.at("scale");
    if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0))
      throw InputError(fmt::format("{}: scale must be a finite positive number (got {})", name, v.dump()));
    s.scale = v.get<double>();
  }
  // The score modifications' scalars by name (softcap c: each scaled score s becomes c tanh(s / c);
  // dropout_p, dropout_seed; core/score_pipeline.hpp); Problem::validate() checks their values.
  s.score_settings = score_settings_in(j, name);
  // sinks: one logit per query head (rounded to f32, the dtype kernels take them in).
  if (j.contains("sinks")) {
    const auto& v = j.at("sinks");
    const bool numbers = v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), [](const nlohmann::json& x) {
      return x.is_number() && std::fabs(x.get<double>()) <= 1e30;
    });
    if (!numbers) throw InputError(fmt::format("{}: sinks must be a list of finite numbers, one per query head (got {})", name, v.dump()));
    for (const auto& x : v) s.sinks.push_back(double(float(x.get<double>())));
  }
  if (j.contains("causal")) {
    const auto& v = j.at("causal");
    const std::string text = v.is_string() ? v.get<std::string>() : v.dump();
    if (text == "none") s.causal = Causal::none;
    else if (text == "top_left") s.causal = Causal::top_left;
    else if (text == "bottom_right") s.causal = Causal::bottom_right;
    else throw InputError(fmt::format("{}: causal must be \"none\", \"top_left\" or \"bottom_right\" (got {})", name, v.dump()));
  }
  if (j.contains("dtype")) {
    const auto& v = j.at("dtype");
    if (!v.is_string()) throw InputError(fmt::format("{}: dtype must be a string: f64, f32, f16 or bf16 (got {})", name, v.dump()));
    try {
      s.dtype = parse_dtype(v.get<std::string>());
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", name, e.what()));
    }
  }
  if (j.contains("dtypes")) {
    const auto& v = j.at("dtypes");
    if (!v.is_string()) throw InputError(fmt::format("{}: dtypes must be a string of ROLE:DTYPE pairs such as \"o:f32\" (got {})", name, v.dump()));
    try {
      s.role_dtypes = parse_role_dtypes("dtypes", v.get<std::string>());
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", name, e.what()));
    }
  }
  return s;
}

DType dtype_of_q(const npy::Array& q, const std::string& name) {
  switch (q.type) {
    case npy::ElementType::f64: return DType::f64;
    case npy::ElementType::f32: return DType::f32;
    case npy::ElementType::f16: return DType::f16;
    default:
      throw InputError(fmt::format("{}: descr '{}' is not a tensor dtype ('<f8', '<f4', '<f2'; bf16: settings \"dtype\": \"bf16\" "
                                   "with '<f4' values or '<u2' bits)",
                                   name, npy::descr(q.type)));
  }
}

void expect_rank4(const npy::Array& a, const std::string& name, std::string_view layout) {
  if (a.shape.size() != 4)
    throw InputError(fmt::format("{}: shape {} has {} dimensions; expected 4: {}", name, npy::shape_string(a.shape), a.shape.size(), layout));
}

// A dimension of one file that must equal the same dimension of another.
void expect_dim(const npy::Array& a, const std::string& name, std::size_t axis, std::int64_t want, std::string_view dim,
                std::string_view from) {
  if (a.shape[axis] != want)
    throw InputError(fmt::format("{}: shape {}: {} = {} but {} gives {} = {}", name, npy::shape_string(a.shape), dim, a.shape[axis], from, dim, want));
}

// A mask or bias: [1|b, 1|h_q, n_q, n_k].
void expect_broadcastable(const npy::Array& a, const std::string& name, const Problem& p) {
  expect_rank4(a, name, "[1|b, 1|h_q, n_q, n_k]");
  const auto& s = a.shape;
  if (!(s[0] == 1 || s[0] == p.batch) || !(s[1] == 1 || s[1] == p.h_q) || s[2] != p.n_q || s[3] != p.n_k)
    throw InputError(fmt::format("{}: shape {} does not broadcast to [b, h_q, n_q, n_k] = {}: expected [1|{}, 1|{}, {}, {}]", name,
                                 npy::shape_string(s), npy::shape_string(std::vector<std::int64_t>{p.batch, p.h_q, p.n_q, p.n_k}), p.batch,
                                 p.h_q, p.n_q, p.n_k));
}

Broadcast broadcast_of(bool per_batch, bool per_head) {
  if (per_batch && per_head) return Broadcast::per_batch_head;
  if (per_batch) return Broadcast::per_batch;
  if (per_head) return Broadcast::per_head;
  return Broadcast::shared;
}

std::vector<std::int64_t> valid_lengths(const npy::Array& a, const std::string& name, const Problem& p, KeyPadding::Kind& kind) {
  if (a.shape == std::vector<std::int64_t>{p.batch})
    kind = KeyPadding::Kind::per_batch;
  else if (a.shape == std::vector<std::int64_t>{p.batch, p.n_q})
    kind = KeyPadding::Kind::per_query;
  else
    throw InputError(fmt::format("{}: shape {}; expected [b] = ({},) or [b, n_q] = ({}, {})", name, npy::shape_string(a.shape), p.batch, p.batch, p.n_q));
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(a.numel()));
  for (std::size_t e = 0; e < lengths.size(); ++e) {
    switch (a.type) {
      case npy::ElementType::i64: std::memcpy(&lengths[e], a.data.data() + 8 * e, 8); break;
      case npy::ElementType::i32: {
        std::int32_t v;
        std::memcpy(&v, a.data.data() + 4 * e, 4);
        lengths[e] = v;
        break;
      }
      case npy::ElementType::u16: {
        std::uint16_t v;
        std::memcpy(&v, a.data.data() + 2 * e, 2);
        lengths[e] = v;
        break;
      }
      case npy::ElementType::u8: lengths[e] = std::int64_t(std::to_integer<std::uint8_t>(a.data[e])); break;
      default:
        throw InputError(fmt::format("{}: descr '{}'; valid lengths are integers ('<i8', '<i4', '<u2' or '|u1')", name, npy::descr(a.type)));
    }
    if (lengths[e] < 0 || lengths[e] > p.n_k)
      throw InputError(fmt::format("{}: element {} = {} is outside [0, n_k = {}]", name, e, lengths[e], p.n_k));
  }
  return lengths;
}

std::string shape_text(const Tensor::Shape& s) { return npy::shape_string(std::vector<std::int64_t>(s.begin(), s.end())); }

// A user's tensors must be finite wherever they reach an output: every query of a row that sees a
// key, every key and value that some query sees. NaN or Inf elsewhere (a padded query, a KV-cache
// page never written and masked) changes nothing and is allowed. `name` gives each role's file or
// argument name for the message.
void check_finite_where_used(const Problem& p, const CaseInputs& in, const std::function<std::string(const char*)>& name) {
  const std::int64_t group = p.h_q / p.h_kv;
  std::vector<std::uint8_t> key_used(static_cast<std::size_t>(p.batch * p.h_kv * p.n_k), 0);
  auto bad = [&](const char* role, const Tensor& t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t c) {
    const double x = t.get(t.offset(b, h, i, c));
    throw InputError(fmt::format("{}: element ({}, {}, {}, {}) is {}: the reference needs finite inputs wherever they reach an output "
                                 "(non-finite values are allowed only where every query masks them)",
                                 name(role), b, h, i, c, x));
  };
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        const auto [lo, hi] = in.mask.key_range(b, i);
        bool sees = false;
        for (std::int64_t j = lo; j < hi; ++j)
          if (in.mask.visible(b, h, i, j)) sees = true, key_used[static_cast<std::size_t>((b * p.h_kv + h / group) * p.n_k + j)] = 1;
        if (!sees) continue;
        for (std::int64_t c = 0; c < p.d_k; ++c)
          if (!std::isfinite(in.q.get(in.q.offset(b, h, i, c)))) bad("q", in.q, b, h, i, c);
      }
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_kv; ++h)
      for (std::int64_t j = 0; j < p.n_k; ++j) {
        if (!key_used[static_cast<std::size_t>((b * p.h_kv + h) * p.n_k + j)]) continue;
        for (std::int64_t c = 0; c < p.d_k; ++c)
          if (!std::isfinite(in.k.get(in.k.offset(b, h, j, c)))) bad("k", in.k, b, h, j, c);
        for (std::int64_t c = 0; c < p.d_v; ++c)
          if (!std::isfinite(in.v.get(in.v.offset(b, h, j, c)))) bad("v", in.v, b, h, j, c);
      }
}

}  // namespace

std::pair<Problem, CaseInputs> given_case_of(GivenArrays a) {
  const auto& q = a.q.shape();
  const auto& k = a.k.shape();
  const auto& v = a.v.shape();
  auto dim = [](const char* name, const Tensor::Shape& s, std::size_t axis, std::int64_t want, const char* what, const char* from) {
    if (s[axis] != want)
      throw InputError(fmt::format("{}: shape {}: {} = {} but {} gives {} = {}", name, shape_text(s), what, s[axis], from, what, want));
  };
  dim("k", k, 0, q[0], "b", "q");
  dim("k", k, 3, q[3], "d_k", "q");
  dim("v", v, 0, k[0], "b", "k");
  dim("v", v, 1, k[1], "h_kv", "k");
  dim("v", v, 2, k[2], "n_k", "k");
  Problem p;
  p.batch = q[0], p.h_q = q[1], p.n_q = q[2], p.d_k = q[3];
  p.h_kv = k[1], p.n_k = k[2], p.d_v = v[3];
  p.dtype = a.q.dtype();
  auto own_dtype = [&](Role role, DType dtype) {
    if (dtype != p.dtype) p.role_dtypes[role] = dtype;
  };
  own_dtype(Role::k, a.k.dtype());
  own_dtype(Role::v, a.v.dtype());
  if (a.bias) own_dtype(Role::bias, a.bias->dtype());
  if (a.o_dtype) own_dtype(Role::o, *a.o_dtype);
  p.window = a.window;
  p.scale = a.scale;
  for (const NamedSetting& s : a.settings) s.setting->set(p, s.value);
  if (!a.sinks.empty()) {
    if (std::int64_t(a.sinks.size()) != p.h_q)
      throw InputError(fmt::format("sinks: {} logits for h_q = {} query heads (one per query head)", a.sinks.size(), p.h_q));
    for (double& x : a.sinks) {
      if (!std::isfinite(x)) throw InputError(fmt::format("sinks: {} is not a finite number", x));
      x = double(float(x));  // the dtype kernels take them in
    }
    p.sinks = {true, 0.0, std::move(a.sinks)};
  }
  if (p.h_kv <= 0 || p.h_q % p.h_kv != 0)
    throw InputError(fmt::format("k: h_kv = {} does not divide q's h_q = {} (query head h reads kv head h / (h_q / h_kv))", p.h_kv, p.h_q));
  auto broadcastable = [&](const char* name, const std::vector<std::int64_t>& s) {
    if (s.size() != 4 || !(s[0] == 1 || s[0] == p.batch) || !(s[1] == 1 || s[1] == p.h_q) || s[2] != p.n_q || s[3] != p.n_k)
      throw InputError(fmt::format("{}: shape {} does not broadcast to [b, h_q, n_q, n_k] = ({}, {}, {}, {}): expected [1|{}, 1|{}, {}, {}]", name,
                                   npy::shape_string(s), p.batch, p.h_q, p.n_q, p.n_k, p.batch, p.h_q, p.n_q, p.n_k));
  };
  if (!a.valid_lens_shape.empty()) {
    const auto& s = a.valid_lens_shape;
    if (s == std::vector<std::int64_t>{p.batch})
      p.padding.kind = KeyPadding::Kind::per_batch;
    else if (s == std::vector<std::int64_t>{p.batch, p.n_q})
      p.padding.kind = KeyPadding::Kind::per_query;
    else
      throw InputError(fmt::format("valid_lens: shape {}; expected [b] = ({},) or [b, n_q] = ({}, {})", npy::shape_string(s), p.batch, p.batch, p.n_q));
    for (std::size_t e = 0; e < a.valid_lens.size(); ++e)
      if (a.valid_lens[e] < 0 || a.valid_lens[e] > p.n_k)
        throw InputError(fmt::format("valid_lens: element {} = {} is outside [0, n_k = {}]", e, a.valid_lens[e], p.n_k));
    p.padding.valid_len = std::move(a.valid_lens);
  }
  bool flags_batch = false, flags_head = false;
  if (!a.mask_shape.empty()) {
    broadcastable("mask", a.mask_shape);
    flags_batch = a.mask_shape[0] != 1;
    flags_head = a.mask_shape[1] != 1;
    std::int64_t visible = 0;
    for (auto& f : a.mask) visible += f = f != 0 ? 1 : 0;
    p.bool_mask.enabled = true;
    // Not a probability anything is drawn with: the fraction kept, so the label and JSON say how sparse it is.
    p.bool_mask.keep = a.mask.empty() ? 1.0 : double(visible) / double(a.mask.size());
    p.bool_mask.broadcast = broadcast_of(flags_batch, flags_head);
  }
  Tensor bias;
  if (a.bias) {
    const auto& s = a.bias->shape();
    broadcastable("bias", std::vector<std::int64_t>(s.begin(), s.end()));
    double sum = 0, sum2 = 0;
    for (std::int64_t e = 0; e < a.bias->numel(); ++e) sum += a.bias->get(e), sum2 += a.bias->get(e) * a.bias->get(e);
    const double n = double(a.bias->numel()), var = sum2 / n - (sum / n) * (sum / n);
    p.bias.enabled = true;
    // Again descriptive only: the bias's standard deviation (0 when it is not finite).
    p.bias.stddev = std::isfinite(var) && var > 0 ? std::sqrt(var) : 0.0;
    p.bias.broadcast = broadcast_of(s[0] != 1, s[1] != 1);
    bias = std::move(*a.bias);
  }
  p.validate();
  Mask mask = Mask::given(p, std::move(a.mask), flags_batch, flags_head, std::move(bias));
  CaseInputs inputs{std::move(a.q), std::move(a.k), std::move(a.v), std::move(mask)};
  check_finite_where_used(p, inputs, [](const char* role) { return std::string(role); });
  check_scores_in_range(p, inputs, [](const char* role) { return std::string(role); }, "the scale argument");
  return {p, std::move(inputs)};
}

GivenCase read_given_case(const fs::path& dir, const fs::path& outputs_dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError(fmt::format("{}: no such directory (the inputs)", dir.string()));
  const fs::path out_dir = outputs_dir.empty() ? dir : outputs_dir;
  if (!fs::is_directory(out_dir, ec)) throw InputError(fmt::format("{}: no such directory (the outputs)", out_dir.string()));
  const auto file = [&](const char* leaf) { return (dir / leaf).string(); };

  const Settings settings = read_settings(dir / "settings.json");
  const npy::Array q = read_required(dir / "q.npy", "the queries [b, h_q, n_q, d_k]");
  const npy::Array k = read_required(dir / "k.npy", "the keys [b, h_kv, n_k, d_k]");
  const npy::Array v = read_required(dir / "v.npy", "the values [b, h_kv, n_k, d_v]");
  expect_rank4(q, file("q.npy"), "[b, h_q, n_q, d_k]");
  expect_rank4(k, file("k.npy"), "[b, h_kv, n_k, d_k]");
  expect_rank4(v, file("v.npy"), "[b, h_kv, n_k, d_v]");
  expect_dim(k, file("k.npy"), 0, q.shape[0], "b", "q.npy");
  expect_dim(k, file("k.npy"), 3, q.shape[3], "d_k", "q.npy");
  expect_dim(v, file("v.npy"), 0, k.shape[0], "b", "k.npy");
  expect_dim(v, file("v.npy"), 1, k.shape[1], "h_kv", "k.npy");
  expect_dim(v, file("v.npy"), 2, k.shape[2], "n_k", "k.npy");

  Problem p;
  p.batch = q.shape[0];
  p.h_q = q.shape[1];
  p.n_q = q.shape[2];
  p.d_k = q.shape[3];
  p.h_kv = k.shape[1];
  p.n_k = k.shape[2];
  p.d_v = v.shape[3];
  p.dtype = settings.dtype ? *settings.dtype : dtype_of_q(q, file("q.npy"));
  p.role_dtypes = settings.role_dtypes;
  p.window = Window::of(settings.causal);
  p.scale = settings.scale;
  if (!settings.sinks.empty()) p.sinks = {true, 0.0, settings.sinks};
  for (const NamedSetting& setting : settings.score_settings) setting.setting->set(p, setting.value);
  if (p.h_kv <= 0 || p.h_q % p.h_kv != 0)
    throw InputError(fmt::format("{}: h_kv = {} does not divide q.npy's h_q = {} (query head h reads kv head h / (h_q / h_kv))", file("k.npy"),
                                 p.h_kv, p.h_q));
  if (auto lens = read_optional(dir / "valid_lens.npy")) p.padding.valid_len = valid_lengths(*lens, file("valid_lens.npy"), p, p.padding.kind);

  std::vector<std::uint8_t> flags;
  bool flags_batch = false, flags_head = false;
  if (auto m = read_optional(dir / "mask.npy")) {
    if (m->type != npy::ElementType::boolean)
      throw InputError(fmt::format("{}: descr '{}'; a mask is '|b1' (true = the key is visible)", file("mask.npy"), npy::descr(m->type)));
    expect_broadcastable(*m, file("mask.npy"), p);
    flags_batch = m->shape[0] != 1;
    flags_head = m->shape[1] != 1;
    flags.resize(m->data.size());
    std::int64_t visible = 0;
    for (std::size_t e = 0; e < flags.size(); ++e) visible += flags[e] = std::to_integer<std::uint8_t>(m->data[e]) != 0 ? 1 : 0;
    p.bool_mask.enabled = true;
    // Not a probability anything is drawn with: the fraction kept, so the label and JSON say how sparse it is.
    p.bool_mask.keep = flags.empty() ? 1.0 : double(visible) / double(flags.size());
    p.bool_mask.broadcast = broadcast_of(flags_batch, flags_head);
  }
  Tensor bias;
  if (auto b = read_optional(dir / "bias.npy")) {
    expect_broadcastable(*b, file("bias.npy"), p);
    bias = Tensor(p.dtype_of(Role::bias), {b->shape[0], b->shape[1], b->shape[2], b->shape[3]});
    array_into_tensor(*b, file("bias.npy"), b->shape, p.dtype_of(Role::bias), bias, "bias");
    double sum = 0, sum2 = 0;
    for (std::int64_t e = 0; e < bias.numel(); ++e) sum += bias.get(e), sum2 += bias.get(e) * bias.get(e);
    const double n = double(bias.numel()), var = sum2 / n - (sum / n) * (sum / n);
    p.bias.enabled = true;
    // Again descriptive only: the bias's standard deviation (0 when it is not finite).
    p.bias.stddev = std::isfinite(var) && var > 0 ? std::sqrt(var) : 0.0;
    p.bias.broadcast = broadcast_of(b->shape[0] != 1, b->shape[1] != 1);
  }
  try {
    p.validate();
  } catch (const InputError& e) {
    // A bad scale or score modification is settings.json's, the only place they come from; anything
    // else, the directory's.
    const std::string_view what = e.what();
    bool about_settings = what.starts_with("scale ");
    for (const ScoreModificationRow& row : score_modification_rows) about_settings = about_settings || what.starts_with(row.name);
    throw InputError(fmt::format("{}: {}", about_settings ? file("settings.json") : dir.string(), e.what()));
  }

  Tensor tq(p.dtype_of(Role::q), {p.batch, p.h_q, p.n_q, p.d_k}), tk(p.dtype_of(Role::k), {p.batch, p.h_kv, p.n_k, p.d_k}),
      tv(p.dtype_of(Role::v), {p.batch, p.h_kv, p.n_k, p.d_v});
  array_into_tensor(q, file("q.npy"), q.shape, tq.dtype(), tq, "q");
  array_into_tensor(k, file("k.npy"), k.shape, tk.dtype(), tk, "k");
  array_into_tensor(v, file("v.npy"), v.shape, tv.dtype(), tv, "v");
  const fs::path out_path = out_dir / "out.npy";
  if (!fs::exists(out_path, ec)) throw InputError(fmt::format("{}: missing (the output [b, h_q, n_q, d_v] to judge)", out_path.string()));
  Tensor out = make_output(p);
  read_output_file(out_path, p, out);
  std::optional<Tensor> lse;
  if (fs::exists(out_dir / "lse.npy", ec)) read_lse_file(out_dir / "lse.npy", p, lse.emplace(make_lse(p)));
  // Dropout's keep mask: required with settings' dropout, refused without it (it would be ignored).
  std::optional<Tensor> keep;
  const fs::path keep_path = out_dir / "keep.npy";
  if (p.dropout.enabled()) {
    if (!fs::exists(keep_path, ec))
      throw InputError(fmt::format("{}: missing (settings.json has dropout {:g}: the keep mask [b, h_q, n_q, n_k] the output was computed "
                                   "with, 1 kept, 0 dropped, is required to judge it)",
                                   keep_path.string(), p.dropout.p));
    keep_array_into_tensor(npy::read_file(keep_path), keep_path.string(), p, keep.emplace(make_keep(p)));
  } else if (fs::exists(keep_path, ec)) {
    throw InputError(fmt::format("{}: a keep mask, but {} has no \"dropout_p\" (give \"dropout_p\": p to judge a dropout output)",
                                 keep_path.string(), file("settings.json")));
  }
  Mask mask = Mask::given(p, std::move(flags), flags_batch, flags_head, std::move(bias));
  CaseInputs inputs{std::move(tq), std::move(tk), std::move(tv), std::move(mask)};
  check_finite_where_used(p, inputs, [&](const char* role) { return file(fmt::format("{}.npy", role).c_str()); });
  check_scores_in_range(p, inputs, [&](const char* role) { return file(fmt::format("{}.npy", role).c_str()); }, file("settings.json"));
  return GivenCase{p, std::move(inputs), std::move(out), std::move(lse), fmt::format("the tensors in {}", dir.string()), std::move(keep)};
}

}  // namespace attn

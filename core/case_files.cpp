#include "core/case_files.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/mask.hpp"
#include "core/precision.hpp"
#include "core/score_settings.hpp"
#include "core/result_file.hpp"

namespace attn {
namespace {

constexpr std::string_view manifest_name = "manifest.json";
constexpr std::string_view manifest_schema = "attnbench.cases";
constexpr int manifest_version = 1;


bool has_visibility_mask(const Problem& p) {
  return !p.window.is_none() || p.padding.kind != KeyPadding::Kind::none || p.bool_mask.enabled;
}

std::string file_name(std::string_view what, std::size_t index) { return fmt::format("{}_{:04}.npy", what, index); }

// A name file_name or the manifest could have written: (q|k|v|d_o|mask|bias)_<digits>.npy or manifest.json.
// (Matched by hand: <regex> alone cost this file a third of its compile time.)
bool is_case_file_name(std::string_view name) {
  if (name == manifest_name) return true;
  const std::size_t underscore = name.rfind('_');  // the last: d_o has one of its own
  if (underscore == std::string_view::npos || !name.ends_with(".npy")) return false;
  const std::string_view what = name.substr(0, underscore);
  const std::string_view digits = name.substr(underscore + 1, name.size() - underscore - 1 - 4);
  const bool ours = what == "q" || what == "k" || what == "v" || what == "d_o" || what == "mask" || what == "bias";
  return ours && !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

nlohmann::json file_json(const std::string& name, const std::vector<std::int64_t>& shape, npy::ElementType type) {
  return {{"file", name}, {"shape", shape}, {"npy_dtype", std::string(npy::descr(type))}};
}

std::vector<std::int64_t> shape_of(const Tensor& t) { return {t.shape().begin(), t.shape().end()}; }

// The index and coordinates of the first element where two arrays of one shape differ.
std::string first_difference(const npy::Array& got, const npy::Array& want) {
  const std::size_t item = std::size_t(npy::item_bytes(want.type));
  for (std::size_t e = 0; e * item < want.data.size(); ++e)
    if (std::memcmp(got.data.data() + e * item, want.data.data() + e * item, item) != 0) {
      std::vector<std::int64_t> at(want.shape.size());
      std::size_t rest = e;
      for (std::size_t d = want.shape.size(); d-- > 0;) {
        at[d] = std::int64_t(rest % std::size_t(want.shape[d]));
        rest /= std::size_t(want.shape[d]);
      }
      return fmt::format("element {} [{}]", e, fmt::join(at, ", "));
    }
  return "no element";
}

// A file name from the manifest must name a file inside the directory.
std::string plain_file_name(const nlohmann::json& entry, const char* key, std::size_t index) {
  const std::string name = entry.at(key).at("file").get<std::string>();
  if (name.empty() || name.find('/') != std::string::npos || name.find('\\') != std::string::npos || name == "." || name == "..")
    throw InputError(fmt::format("case {}: '{}' file name '{}' is not a plain file name", index, key, name));
  return name;
}

void expect_shape(const nlohmann::json& entry, const char* key, const std::vector<std::int64_t>& shape, npy::ElementType type,
                  std::size_t index) {
  const auto got = entry.at(key).at("shape").get<std::vector<std::int64_t>>();
  if (got != shape)
    throw InputError(fmt::format("case {}: '{}' shape {} does not match the repro string's {}", index, key, npy::shape_string(got),
                                 npy::shape_string(shape)));
  const auto descr = entry.at(key).at("npy_dtype").get<std::string>();
  if (descr != npy::descr(type))
    throw InputError(fmt::format("case {}: '{}' npy_dtype '{}' does not match the repro string's '{}'", index, key, descr, npy::descr(type)));
}

}  // namespace

npy::ElementType npy_type_of(DType dtype) {
  switch (dtype) {
    case DType::f64: return npy::ElementType::f64;
    case DType::f32: return npy::ElementType::f32;
    case DType::f16: return npy::ElementType::f16;
    case DType::bf16: return npy::ElementType::f32;
  }
  throw std::logic_error("npy_type_of: unknown dtype");
}

npy::Array tensor_to_npy(const Tensor& t) {
  npy::Array a;
  a.type = npy_type_of(t.dtype());
  a.shape = shape_of(t);
  if (t.dtype() != DType::bf16) {
    const auto* bytes = static_cast<const std::byte*>(t.data());
    a.data.assign(bytes, bytes + t.bytes());
    return a;
  }
  a.data.resize(std::size_t(t.numel()) * 4);
  for (std::int64_t e = 0; e < t.numel(); ++e) {
    const std::uint32_t bits = std::uint32_t(t.bits(e)) << 16;  // bf16 -> f32 is exact
    std::memcpy(a.data.data() + 4 * e, &bits, 4);
  }
  return a;
}

npy::Array visibility_mask_npy(const Problem& p, const Mask& mask) {
  const bool per_batch = p.padding.kind != KeyPadding::Kind::none || (p.bool_mask.enabled && varies_over_batch(p.bool_mask.broadcast));
  const bool per_head = p.bool_mask.enabled && varies_over_head(p.bool_mask.broadcast);
  npy::Array a;
  a.type = npy::ElementType::boolean;
  a.shape = {per_batch ? p.batch : 1, per_head ? p.h_q : 1, p.n_q, p.n_k};
  a.data.reserve(std::size_t(a.numel()));
  for (std::int64_t b = 0; b < a.shape[0]; ++b)
    for (std::int64_t h = 0; h < a.shape[1]; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i)
        for (std::int64_t j = 0; j < p.n_k; ++j) a.data.push_back(std::byte(mask.visible(b, h, i, j) ? 1 : 0));
  return a;
}

std::vector<std::int64_t> output_shape(const Problem& p) { return {p.batch, p.h_q, p.n_q, p.d_v}; }
std::vector<std::int64_t> lse_shape(const Problem& p) { return {p.batch, p.h_q, p.n_q}; }
std::vector<std::int64_t> keep_shape(const Problem& p) { return {p.batch, p.h_q, p.n_q, p.n_k}; }

std::vector<std::int64_t> gradient_shape(const Problem& p, Role role) {
  switch (role) {
    case Role::dq: return {p.batch, p.h_q, p.n_q, p.d_k};
    case Role::dk: return {p.batch, p.h_kv, p.n_k, p.d_k};
    case Role::dv: return {p.batch, p.h_kv, p.n_k, p.d_v};
    case Role::d_sink: return {p.h_q};
    case Role::d_bias:
      return {varies_over_batch(p.bias.broadcast) ? p.batch : 1, varies_over_head(p.bias.broadcast) ? p.h_q : 1, p.n_q, p.n_k};
    default: throw std::logic_error(fmt::format("gradient_shape: {} is not a gradient", to_string(role)));
  }
}

DType gradient_dtype(const Problem& p, Role role) {
  if (role == Role::d_sink) return DType::f32;
  return p.dtype_of(role == Role::d_bias ? Role::bias : role);
}

std::vector<std::pair<std::size_t, Problem>> named_cases(const CaseDirectory& directory) {
  std::vector<std::pair<std::size_t, Problem>> named;
  for (const auto& c : directory.cases) named.emplace_back(c.index, c.projected_from.empty() ? c.problem : parse_problem(c.projected_from));
  for (const auto& s : directory.skipped) named.emplace_back(s.index, parse_problem(s.repro));
  std::sort(named.begin(), named.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return named;
}

void write_case_directory(const std::filesystem::path& dir, const std::vector<Problem>& cases, const std::vector<std::size_t>& case_numbers,
                          const std::function<void(const CaseFileEntry&)>& on_case, const CaseDeclaration* declaration,
                          const std::vector<CaseProjection>& projections) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) throw InputError(fmt::format("{}: exists and is not a directory", dir.string()));
    // Only an earlier cases directory is overwritten: its files go, so no stale case lingers.
    std::vector<fs::path> old;
    bool foreign = false;
    try {
      for (const auto& item : fs::directory_iterator(dir)) {
        if (is_case_file_name(item.path().filename().string()))
          old.push_back(item.path());
        else
          foreign = true;
      }
      if (foreign || (!old.empty() && !fs::exists(dir / manifest_name)))
        throw InputError(fmt::format("{}: not empty and not a cases directory (no {}): refusing to write into it", dir.string(), manifest_name));
      // Only regular files go: a link or device under one of our names was not written by us.
      for (const auto& path : old) check_result_path(path);
      for (const auto& path : old) fs::remove(path);
    } catch (const fs::filesystem_error& e) {
      throw InputError(fmt::format("{}: {}", dir.string(), e.code().message()));
    }
  } else if (!fs::create_directories(dir, ec) && ec) {
    throw InputError(fmt::format("{}: cannot create the directory: {}", dir.string(), ec.message()));
  }

  nlohmann::json list = nlohmann::json::array();
  for (std::size_t position = 0; position < cases.size(); ++position) {
    const Problem& p = cases[position];
    p.validate();
    CaseFileEntry entry;
    entry.index = case_numbers.empty() ? position : case_numbers.at(position);
    entry.problem = p;
    if (!projections.empty()) {
      entry.projected_from = projections.at(position).projected_from;
      entry.projection = projections.at(position).projection;
    }
    entry.q = file_name("q", entry.index);
    entry.k = file_name("k", entry.index);
    entry.v = file_name("v", entry.index);
    entry.out = file_name("out", entry.index);
    entry.lse = file_name("lse", entry.index);
    if (p.dropout.enabled()) entry.keep = file_name("keep", entry.index);
    const bool backward = p.operation == Operation::backward;
    if (backward) {
      entry.d_o = file_name("d_o", entry.index);
      entry.dq = file_name("dq", entry.index);
      entry.dk = file_name("dk", entry.index);
      entry.dv = file_name("dv", entry.index);
      if (p.sinks.enabled) entry.d_sink = file_name("d_sink", entry.index);
      if (p.bias.enabled) entry.d_bias = file_name("d_bias", entry.index);
    }
    const CaseInputs in = generate_inputs(p);
    npy::write_file(dir / entry.q, tensor_to_npy(in.q));
    npy::write_file(dir / entry.k, tensor_to_npy(in.k));
    npy::write_file(dir / entry.v, tensor_to_npy(in.v));
    if (backward) npy::write_file(dir / entry.d_o, tensor_to_npy(generate_d_o(p)));
    auto type = [&](Role role) { return npy_type_of(p.dtype_of(role)); };
    auto gradient = [&](Role role) {
      if (entry.gradient_file(role).empty()) return nlohmann::json(nullptr);
      nlohmann::json file = file_json(entry.gradient_file(role), gradient_shape(p, role), npy_type_of(gradient_dtype(p, role)));
      if (role == Role::d_sink || role == Role::d_bias) file["optional"] = true;
      return file;
    };
    nlohmann::json j = {
        {"index", entry.index},
        {"repro", p.repro()},
        {"label", p.label()},
        {"operation", std::string(to_string(p.operation))},
        {"dtype", std::string(to_string(p.dtype))},
        {"scale", p.effective_scale()},
        // Each query head's sink logit (f32 values), one more term of its rows' softmax denominator, or none.
        {"sinks", p.sinks.enabled ? nlohmann::json(sink_logits(p)) : nlohmann::json(nullptr)},
        {"q", file_json(entry.q, shape_of(in.q), type(Role::q))},
        {"k", file_json(entry.k, shape_of(in.k), type(Role::k))},
        {"v", file_json(entry.v, shape_of(in.v), type(Role::v))},
        {"mask", nullptr},
        {"bias", nullptr},
        {"out", file_json(entry.out, output_shape(p), type(Role::o))},
        {"lse", file_json(entry.lse, lse_shape(p), type(Role::lse))},
        {"keep", p.dropout.enabled() ? file_json(entry.keep, keep_shape(p), npy::ElementType::boolean) : nlohmann::json(nullptr)},
        {"d_o", backward ? file_json(entry.d_o, output_shape(p), type(Role::d_o)) : nlohmann::json(nullptr)},
        {"dq", gradient(Role::dq)},
        {"dk", gradient(Role::dk)},
        {"dv", gradient(Role::dv)},
        {"d_sink", gradient(Role::d_sink)},
        {"d_bias", gradient(Role::d_bias)},
        {"fully_masked_rows", declaration != nullptr ? declaration->fully_masked : "zeros"},
    };
    j["lse"]["optional"] = true;
    // Every score modification's settings by name (softcap, dropout_p, dropout_seed, ...): the
    // case's values, null where it does not use the modification.
    j.update(score_settings_json(p));
    if (!entry.projected_from.empty()) {
      j["projected_from"] = entry.projected_from;
      j["projection"] = entry.projection;
    }
    if (has_visibility_mask(p)) {
      entry.mask = file_name("mask", entry.index);
      const npy::Array m = visibility_mask_npy(p, in.mask);
      npy::write_file(dir / entry.mask, m);
      j["mask"] = file_json(entry.mask, m.shape, m.type);
    }
    if (in.mask.has_bias()) {
      entry.bias = file_name("bias", entry.index);
      const npy::Array bias = tensor_to_npy(in.mask.bias_tensor());
      npy::write_file(dir / entry.bias, bias);
      j["bias"] = file_json(entry.bias, bias.shape, bias.type);
    }
    list.push_back(std::move(j));
    if (on_case) on_case(entry);
  }
  nlohmann::json manifest = {
      {"schema", std::string(manifest_schema)},
      {"version", manifest_version},
      {"layout", "BHSD, C order: q [b, h_q, n_q, d_k], k [b, h_kv, n_k, d_k], v [b, h_kv, n_k, d_v], out [b, h_q, n_q, d_v]; "
                 "d_o as out, dq as q, dk as k, dv as v; query head h reads kv head h / (h_q / h_kv)"},
      {"encodings", {{"f64", "<f8"}, {"f32", "<f4"}, {"f16", "<f2 (exact bits)"},
                     {"bf16", "<f4 holding exactly the bf16 values; a bf16 output is <f4 whose every value is a bf16 value "
                              "(e.g. out.float() in PyTorch), or <u2 bf16 bit patterns"}}},
      {"mask", "|b1 [b or 1, h_q or 1, n_q, n_k], true = visible: causal, key padding and boolean mask combined; null: nothing masked"},
      {"dtype", "every file's dtype but the lse's, unless the repro string's dtypes= gives a role its own (dtypes=o:f32): each "
                "file's entry names its element type"},
      {"bias", "additive, [b or 1, h_q or 1, n_q, n_k], in the case's encoding, added to the scaled scores; null: none"},
      {"lse", "optional: natural-log row log-sum-exp of the scaled, biased scores [b, h_q, n_q]; -inf for fully masked rows"},
      {"sinks", "per case: each query head's sink logit (f32 values), one more term exp(sink - m) of its rows' softmax "
                "denominator that carries no value; null: none"},
      {"keep", "per dropout case, required: the keep mask Z [b, h_q, n_q, n_k] the program drew, 1 kept, 0 dropped, as |b1 "
               "(or |u1, <f4), written beside out; null: no dropout"},
      {"fully_masked_rows", "per case: zeros (a query row that sees no key has a zero output row) or nan (a NaN row), as declared"},
      {"operation", "per case: forward (out is judged, and lse where given) or backward (op=backward in the repro string: the "
                    "program runs its forward, writing out and optionally lse (and keep), then its backward on that O and LSE and "
                    "d_o, writing dq, dk and dv, which alone are judged)"},
      {"d_o", "per backward case: the upstream gradient dO [b, h_q, n_q, d_v] in d_o's encoding; null: a forward case"},
      {"gradients", "per backward case, dq [b, h_q, n_q, d_k], dk [b, h_kv, n_k, d_k], dv [b, h_kv, n_k, d_v], each in its role's "
                    "encoding as out is (bf16: <f4 holding bf16 values, or <u2 bits), null for a forward case. With P the "
                    "softmax's weights (after the sink, before dropout), Z the keep mask the program drew (1 without dropout), "
                    "r = 1/(1 - p): dV_j = sum_i P_ij Z_ij r dO_i; dP_ij = <dO_i, v_j> Z_ij r; D_i = sum_j P_ij dP_ij (= <dO_i, O_i>); "
                    "dS_ij = P_ij (dP_ij - D_i); through a soft-cap c, dX_ij = dS_ij sech^2(x_ij / c) with x the scaled product "
                    "(else dX = dS); dQ_i = scale sum_j dX_ij k_j; dK_j = scale sum_i dX_ij q_i; under GQA dK and dV summed over "
                    "the query heads of a group; a fully masked row contributes nothing (its dQ is zeros) and a masked key gets "
                    "nothing from a row. Optional, per backward case with sinks (with a bias), else null: d_sink [h_q] <f4, "
                    "dsigma_h = -sum over b and i of P_i,sink D_i with P_i,sink = exp(sigma_h - LSE_i) (d_bias in the bias's "
                    "shape and encoding, dS summed over the dimensions the bias broadcasts over), judged where written (and "
                    "required where a declaration says parameter_gradients)"},
      {"cases", list},
  };
  // Each score modification's settings, one key each in every case (core/README.md, "The score
  // pipeline"): the case's value, or null where the case does not use that modification.
  for (const ScoreModificationRow& row : score_modification_rows)
    for (const ScoreSetting& setting : row.settings)
      manifest[std::string(setting.name)] = fmt::format("per case: {}'s {}, or null where the case has none", row.description,
                                                        setting.integer ? "integer setting" : "setting");
  if (declaration != nullptr) {
    try {
      manifest["declaration"] = nlohmann::json::parse(declaration->capabilities_json);
    } catch (const nlohmann::json::exception& e) {
      throw std::logic_error(fmt::format("write_case_directory: the declaration is not JSON: {}", e.what()));
    }
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto& c : declaration->skipped) skipped.push_back({{"index", c.index}, {"repro", c.repro}, {"reason", c.reason}});
    manifest["skipped"] = skipped;
  }
  write_result_file(dir / manifest_name, manifest.dump(1) + '\n');
}

CaseDirectory read_case_directory(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / manifest_name;
  const std::string name = path.string();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw InputError(fmt::format("{}: no such directory", dir.string()));
  const nlohmann::json manifest = read_json_file(path, "no manifest (write the cases directory with `attnbench cases --out`)");
  CaseDirectory directory;
  directory.dir = dir;
  try {
    if (!manifest.is_object() || manifest.value("schema", "") != manifest_schema)
      throw InputError(fmt::format("not an attnbench cases manifest (schema is not '{}')", manifest_schema));
    if (manifest.at("version").get<int>() != manifest_version)
      throw InputError(fmt::format("manifest version {} is not {} (written by another attnbench version)", manifest.at("version").dump(),
                                   manifest_version));
    const auto& list = manifest.at("cases");
    if (!list.is_array()) throw InputError("'cases' is not a list");
    for (std::size_t position = 0; position < list.size(); ++position) {
      const auto& j = list[position];
      CaseFileEntry entry;
      entry.index = j.at("index").get<std::size_t>();
      try {
        entry.problem = parse_problem(j.at("repro").get<std::string>());
        entry.problem.validate();
      } catch (const InputError& e) {
        throw InputError(fmt::format("case {}: repro string: {}", entry.index, e.what()));
      }
      const Problem& p = entry.problem;
      if (j.at("dtype").get<std::string>() != to_string(p.dtype))
        throw InputError(fmt::format("case {}: dtype '{}' does not match the repro string's {}", entry.index, j.at("dtype").get<std::string>(),
                                     to_string(p.dtype)));
      if (j.at("scale").get<double>() != p.effective_scale())
        throw InputError(fmt::format("case {}: scale {} does not match the repro string's {}", entry.index, j.at("scale").get<double>(),
                                     p.effective_scale()));
      // The score modifications' settings (null or absent: the case does not use it, as in manifests
      // written before the modification existed).
      const nlohmann::json expected_settings = score_settings_json(p);
      for (const auto& [name, expected] : expected_settings.items()) {
        const nlohmann::json given = j.value(name, nlohmann::json(nullptr));
        if (given != expected)
          throw InputError(fmt::format("case {}: {} {} does not match the repro string's {}", entry.index, name, given.dump(),
                                       expected.is_null() ? std::string("none") : expected.dump()));
      }
      // Sinks (null or absent: none).
      const nlohmann::json sinks = j.value("sinks", nlohmann::json(nullptr));
      const std::vector<double> logits = sink_logits(p);
      const bool sinks_match = sinks.is_null() ? logits.empty()
                                               : sinks.is_array() && sinks.size() == logits.size() &&
                                                     std::all_of(sinks.begin(), sinks.end(), [](const nlohmann::json& s) { return s.is_number(); }) &&
                                                     sinks.get<std::vector<double>>() == logits;
      if (!sinks_match)
        throw InputError(fmt::format("case {}: sinks {} do not match the repro string's {}", entry.index, sinks.dump(),
                                     logits.empty() ? std::string("none") : nlohmann::json(logits).dump()));
      auto type = [&](Role role) { return npy_type_of(p.dtype_of(role)); };
      entry.q = plain_file_name(j, "q", entry.index);
      entry.k = plain_file_name(j, "k", entry.index);
      entry.v = plain_file_name(j, "v", entry.index);
      entry.out = plain_file_name(j, "out", entry.index);
      expect_shape(j, "q", {p.batch, p.h_q, p.n_q, p.d_k}, type(Role::q), entry.index);
      expect_shape(j, "k", {p.batch, p.h_kv, p.n_k, p.d_k}, type(Role::k), entry.index);
      expect_shape(j, "v", {p.batch, p.h_kv, p.n_k, p.d_v}, type(Role::v), entry.index);
      expect_shape(j, "out", output_shape(p), type(Role::o), entry.index);
      if (j.contains("lse") && !j.at("lse").is_null()) entry.lse = plain_file_name(j, "lse", entry.index);
      // The backward's files (null or absent: a forward case, as in manifests written before them).
      const bool backward = p.operation == Operation::backward;
      if (j.contains("operation") && j.at("operation").get<std::string>() != to_string(p.operation))
        throw InputError(fmt::format("case {}: operation '{}' does not match the repro string's {}", entry.index,
                                     j.at("operation").get<std::string>(), to_string(p.operation)));
      for (const char* key : {"d_o", "dq", "dk", "dv"}) {
        const bool named = j.contains(key) && !j.at(key).is_null();
        if (named != backward)
          throw InputError(fmt::format("case {}: the manifest names {} '{}' file but the repro string {}", entry.index, backward ? "no" : "a",
                                       key, backward ? "is a backward case (op=backward)" : "is a forward case"));
      }
      if (backward) {
        entry.d_o = plain_file_name(j, "d_o", entry.index);
        entry.dq = plain_file_name(j, "dq", entry.index);
        entry.dk = plain_file_name(j, "dk", entry.index);
        entry.dv = plain_file_name(j, "dv", entry.index);
        expect_shape(j, "d_o", output_shape(p), type(Role::d_o), entry.index);
        for (Role role : {Role::dq, Role::dk, Role::dv})
          expect_shape(j, std::string(to_string(role)).c_str(), gradient_shape(p, role), type(role), entry.index);
      }
      // The parameters' gradients (absent from manifests written before them): a backward case's
      // with sinks or a bias alone.
      for (Role role : {Role::d_sink, Role::d_bias}) {
        const char* key = role == Role::d_sink ? "d_sink" : "d_bias";
        if (!j.contains(key) || j.at(key).is_null()) continue;
        const bool has = backward && (role == Role::d_sink ? p.sinks.enabled : p.bias.enabled);
        if (!has)
          throw InputError(fmt::format("case {}: the manifest names a '{}' file but the repro string {}", entry.index, key,
                                       !backward ? "is a forward case" : role == Role::d_sink ? "has no sinks" : "has no bias"));
        (role == Role::d_sink ? entry.d_sink : entry.d_bias) = plain_file_name(j, key, entry.index);
        expect_shape(j, key, gradient_shape(p, role), npy_type_of(gradient_dtype(p, role)), entry.index);
      }
      if (p.dropout.enabled()) {
        if (!j.contains("keep") || j.at("keep").is_null())
          throw InputError(fmt::format("case {}: the repro string has dropout but the manifest names no 'keep' file", entry.index));
        entry.keep = plain_file_name(j, "keep", entry.index);
      }
      if (has_visibility_mask(p) != (j.contains("mask") && !j.at("mask").is_null()))
        throw InputError(fmt::format("case {}: the manifest {} a mask but the repro string {}", entry.index,
                                     has_visibility_mask(p) ? "has no" : "names", has_visibility_mask(p) ? "masks keys" : "masks nothing"));
      if (has_visibility_mask(p)) entry.mask = plain_file_name(j, "mask", entry.index);
      if (p.bias.enabled != (j.contains("bias") && !j.at("bias").is_null()))
        throw InputError(fmt::format("case {}: the manifest {} a bias but the repro string {}", entry.index, p.bias.enabled ? "has no" : "names",
                                     p.bias.enabled ? "has one" : "has none"));
      if (p.bias.enabled) entry.bias = plain_file_name(j, "bias", entry.index);
      if (j.contains("projected_from")) {
        entry.projected_from = j.at("projected_from").get<std::string>();
        try {
          parse_problem(entry.projected_from).validate();
        } catch (const InputError& e) {
          throw InputError(fmt::format("case {}: projected_from: {}", entry.index, e.what()));
        }
        entry.projection = j.value("projection", "");
      }
      for (const auto& other : directory.cases)
        if (other.index == entry.index) throw InputError(fmt::format("case index {} appears twice", entry.index));
      directory.cases.push_back(std::move(entry));
    }
    if (manifest.contains("declaration") && !manifest.at("declaration").is_null()) {
      if (!manifest.at("declaration").is_object()) throw InputError("'declaration' is not a JSON object");
      directory.declaration_json = manifest.at("declaration").dump();
    }
    if (manifest.contains("skipped"))
      for (const auto& j : manifest.at("skipped")) {
        SkippedCase skipped{j.at("index").get<std::size_t>(), j.at("repro").get<std::string>(), j.at("reason").get<std::string>()};
        try {
          parse_problem(skipped.repro).validate();
        } catch (const InputError& e) {
          throw InputError(fmt::format("skipped case {}: repro string: {}", skipped.index, e.what()));
        }
        const bool seen = std::any_of(directory.cases.begin(), directory.cases.end(), [&](const auto& c) { return c.index == skipped.index; }) ||
                          std::any_of(directory.skipped.begin(), directory.skipped.end(), [&](const auto& c) { return c.index == skipped.index; });
        if (seen) throw InputError(fmt::format("case index {} appears twice", skipped.index));
        directory.skipped.push_back(std::move(skipped));
      }
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", name, e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: {}", name, e.what()));
  }
  return directory;
}

void check_case_inputs(const CaseDirectory& directory, const CaseFileEntry& entry, const CaseInputs& inputs) {
  auto compare = [&](const std::string& file, const npy::Array& want, const char* what) {
    const std::filesystem::path path = directory.dir / file;
    const npy::Array got = npy::read_file(path);
    const auto fault = [&](const std::string& how) {
      return InputError(fmt::format("{}: does not hold case {}'s {} ({}): the cases directory was edited or written by another attnbench "
                                    "version; write it again with `attnbench cases --out`",
                                    path.string(), entry.index, what, how));
    };
    if (got.type != want.type) throw fault(fmt::format("descr '{}', expected '{}'", npy::descr(got.type), npy::descr(want.type)));
    if (got.shape != want.shape) throw fault(fmt::format("shape {}, expected {}", npy::shape_string(got.shape), npy::shape_string(want.shape)));
    if (got.data != want.data) throw fault(fmt::format("{} differs", first_difference(got, want)));
  };
  compare(entry.q, tensor_to_npy(inputs.q), "q");
  compare(entry.k, tensor_to_npy(inputs.k), "k");
  compare(entry.v, tensor_to_npy(inputs.v), "v");
  if (!entry.mask.empty()) compare(entry.mask, visibility_mask_npy(entry.problem, inputs.mask), "mask");
  if (!entry.bias.empty()) compare(entry.bias, tensor_to_npy(inputs.mask.bias_tensor()), "bias");
  if (!entry.d_o.empty()) compare(entry.d_o, tensor_to_npy(generate_d_o(entry.problem)), "d_o");
}

void array_into_tensor(const npy::Array& a, const std::string& name, const std::vector<std::int64_t>& shape, DType dtype, Tensor& target,
                       std::string_view what) {
  const npy::ElementType want = npy_type_of(dtype);
  const bool bf16_bits = dtype == DType::bf16 && a.type == npy::ElementType::u16;
  if (a.type != want && !bf16_bits)
    throw InputError(fmt::format("{}: descr '{}' but a {} case's {} is '{}'{}", name, npy::descr(a.type), to_string(dtype), what, npy::descr(want),
                                 dtype == DType::bf16 ? " (bf16 values) or '<u2' (bf16 bits)" : ""));
  if (a.shape != shape)
    throw InputError(fmt::format("{}: shape {} but the case expects {}", name, npy::shape_string(a.shape), npy::shape_string(shape)));
  if (dtype != DType::bf16 || bf16_bits) {
    std::memcpy(target.data(), a.data.data(), a.data.size());
    return;
  }
  for (std::int64_t e = 0; e < target.numel(); ++e) {
    std::uint32_t bits;
    std::memcpy(&bits, a.data.data() + 4 * e, 4);
    float value;
    std::memcpy(&value, &bits, 4);
    if ((bits & 0xFFFFu) != 0) {
      if (!std::isnan(value))
        throw InputError(fmt::format("{}: element {} = {} is not a bf16 value: a bf16 {} is '<f4' holding bf16 values "
                                     "(e.g. out.float() in PyTorch) or '<u2' bf16 bits",
                                     name, e, double(value), what));
      bits |= 0x00400000u;  // a NaN whose payload bf16 cannot hold stays a (quiet) NaN
    }
    target.set_bits(e, bits >> 16);
  }
}

namespace {

void read_into(const std::filesystem::path& path, const std::vector<std::int64_t>& shape, DType dtype, Tensor& target,
               std::string_view what = "output") {
  array_into_tensor(npy::read_file(path), path.string(), shape, dtype, target, what);
}

}  // namespace

void read_output_file(const std::filesystem::path& path, const Problem& problem, Tensor& out) {
  read_into(path, output_shape(problem), problem.dtype_of(Role::o), out);
}

void read_lse_file(const std::filesystem::path& path, const Problem& problem, Tensor& lse) {
  read_into(path, lse_shape(problem), lse.dtype(), lse);
}

void read_gradient_file(const std::filesystem::path& path, const Problem& problem, Role role, Tensor& gradient) {
  read_into(path, gradient_shape(problem, role), gradient_dtype(problem, role), gradient, to_string(role));
}

void keep_array_into_tensor(const npy::Array& a, const std::string& name, const Problem& problem, Tensor& keep) {
  const std::vector<std::int64_t> shape = keep_shape(problem);
  if (a.type != npy::ElementType::boolean && a.type != npy::ElementType::u8 && a.type != npy::ElementType::f32)
    throw InputError(fmt::format("{}: descr '{}'; dropout's keep mask is '|b1', '|u1' or '<f4' (1 kept, 0 dropped)", name, npy::descr(a.type)));
  if (a.shape != shape)
    throw InputError(fmt::format("{}: shape {} but the keep mask [b, h_q, n_q, n_k] is {}", name, npy::shape_string(a.shape), npy::shape_string(shape)));
  if (keep.dtype() != DType::f32 || std::vector<std::int64_t>(keep.shape().begin(), keep.shape().end()) != shape)
    throw std::logic_error("keep_array_into_tensor: the target is not make_keep's tensor");
  if (a.type == npy::ElementType::f32) {
    std::memcpy(keep.data(), a.data.data(), a.data.size());
    return;
  }
  for (std::int64_t e = 0; e < keep.numel(); ++e) keep.set(e, double(std::to_integer<std::uint8_t>(a.data[std::size_t(e)])));
}

void read_keep_file(const std::filesystem::path& path, const Problem& problem, Tensor& keep) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw InputError(fmt::format("{}: no such file (dropout={:g}: the keep mask [b, h_q, n_q, n_k] the output was computed with, 1 kept, "
                                 "0 dropped, is required to judge it)",
                                 path.string(), problem.dropout.p));
  keep_array_into_tensor(npy::read_file(path), path.string(), problem, keep);
}

}  // namespace attn

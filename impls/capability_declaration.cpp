#include "impls/capability_declaration.hpp"

#include <algorithm>
#include <array>
#include <fstream>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/input_file.hpp"

namespace attn {
namespace {

constexpr std::string_view schema = "attnbench.capabilities";
constexpr int version = 1;

// The plugin ABI's mask bits (ATTNBENCH_MASK_*), by MaskSupport's field names.
using MaskFlag = bool MaskSupport::*;
constexpr std::array<std::pair<std::string_view, MaskFlag>, 7> mask_names{{
    {"causal_top_left", &MaskSupport::causal_top_left},
    {"causal_bottom_right", &MaskSupport::causal_bottom_right},
    {"padding_per_batch", &MaskSupport::padding_per_batch},
    {"padding_per_query", &MaskSupport::padding_per_query},
    {"bool_mask", &MaskSupport::bool_mask},
    {"bias", &MaskSupport::bias},
    {"window", &MaskSupport::windows},
}};

constexpr std::array<std::string_view, 23> known_keys{"parameter_gradients", "score_modifications", "schema",       "version",       "summary",          "operations",
                                                      "dtypes",       "role_dtypes",   "layouts",          "masks",
                                                      "causal_only",  "gqa",           "different_dk_dv",  "default_scale_only",
                                                      "head_dims",    "min_head_dim",  "max_head_dim",     "fully_masked",
                                                      "returns_lse",  "deterministic", "masked_nonfinite_safe", "matmul_unit_roundoff",
                                                      "accumulation_unit_roundoff"};

constexpr std::array<FullyMaskedPolicy, 3> policies{FullyMaskedPolicy::zeros, FullyMaskedPolicy::nan, FullyMaskedPolicy::any};

std::string list_of_names() {
  std::string text;
  for (const auto& [name, flag] : mask_names) text += fmt::format("{}{}", text.empty() ? "" : ", ", name);
  return text;
}

}  // namespace

Capabilities capabilities_from_json(const nlohmann::json& j, const std::string& where) {
  auto fault = [&](const std::string& what) { return InputError(fmt::format("{}: {}", where, what)); };
  if (!j.is_object()) throw fault("a capabilities declaration is a JSON object");
  for (const auto& [key, value] : j.items())
    if (std::find(known_keys.begin(), known_keys.end(), key) == known_keys.end())
      throw fault(fmt::format("unknown key '{}' (see impls/capability_declaration.hpp for the keys)", key));

  // Each key's type is checked here, so the message names the key rather than nlohmann's type.
  auto get = [&](const char* key, auto& target, auto is_type, const char* type_name) {
    if (!j.contains(key)) return false;
    const auto& value = j.at(key);
    if (!is_type(value)) throw fault(fmt::format("'{}' must be {}, not {}", key, type_name, value.dump()));
    target = value.template get<std::remove_reference_t<decltype(target)>>();
    return true;
  };
  auto is_bool = [](const nlohmann::json& v) { return v.is_boolean(); };
  auto is_string = [](const nlohmann::json& v) { return v.is_string(); };
  auto is_int = [](const nlohmann::json& v) { return v.is_number_integer(); };
  auto is_number = [](const nlohmann::json& v) { return v.is_number(); };
  auto is_strings = [](const nlohmann::json& v) {
    return v.is_array() && std::all_of(v.begin(), v.end(), [](const nlohmann::json& e) { return e.is_string(); });
  };
  auto is_ints = [](const nlohmann::json& v) {
    return v.is_array() && std::all_of(v.begin(), v.end(), [](const nlohmann::json& e) { return e.is_number_integer(); });
  };

  std::string text;
  if (get("schema", text, is_string, "a string") && text != schema) throw fault(fmt::format("schema '{}' is not '{}'", text, schema));
  int given_version = version;
  if (get("version", given_version, is_int, "an integer") && given_version != version)
    throw fault(fmt::format("version {} is not {} (written for another attnbench version)", given_version, version));

  // A key left out declares every mask, GQA and d_k != d_v (the documented defaults of this
  // format, which predate the struct's declare-nothing defaults); score modifications only listed.
  Capabilities caps;
  declare_every_mask_and_shape(caps);
  caps.summary = "declared in " + where;
  get("summary", caps.summary, is_string, "a string");

  std::vector<std::string> names;
  if (get("operations", names, is_strings, "a list of operation names")) {
    caps.operations.clear();
    for (const auto& name : names) try {
        const Operation o = parse_operation(name);
        if (std::find(caps.operations.begin(), caps.operations.end(), o) == caps.operations.end()) caps.operations.push_back(o);
      } catch (const InputError& e) {
        throw fault(fmt::format("'operations': {}", e.what()));
      }
    if (caps.operations.empty()) throw fault("'operations' is empty: declare at least forward");
  }
  if (!get("dtypes", names, is_strings, "a list of dtype names")) throw fault("'dtypes' is missing: declare at least one of f64, f32, f16, bf16");
  for (const auto& name : names) {
    DType d;
    try {
      d = parse_dtype(name);
    } catch (const InputError& e) {
      throw fault(fmt::format("'dtypes': {}", e.what()));
    }
    if (std::find(caps.dtypes.begin(), caps.dtypes.end(), d) == caps.dtypes.end()) caps.dtypes.push_back(d);
  }
  if (caps.dtypes.empty()) throw fault("'dtypes' is empty: declare at least one of f64, f32, f16, bf16");
  if (j.contains("role_dtypes")) {
    const auto& roles = j.at("role_dtypes");
    if (!roles.is_object()) throw fault(fmt::format("'role_dtypes' must be an object of role: [dtype names], not {}", roles.dump()));
    for (const auto& [name, list] : roles.items()) {
      const std::optional<Role> role = parse_role(name);
      if (!role || !is_data_role(*role)) throw fault(fmt::format("'role_dtypes': '{}' is not a role that holds the problem's data", name));
      if (!is_strings(list)) throw fault(fmt::format("'role_dtypes': {} must be a list of dtype names, not {}", name, list.dump()));
      std::vector<DType>& own = caps.role_dtypes[*role];
      for (const auto& d : list) try {
          own.push_back(parse_dtype(d.get<std::string>()));
        } catch (const InputError& e) {
          throw fault(fmt::format("'role_dtypes': {}: {}", name, e.what()));
        }
    }
  }

  if (get("layouts", names, is_strings, "a list of layout names")) {
    caps.layouts.clear();
    for (Layout l : all_layouts())  // all_layouts() order, as verify hands them out
      if (std::find(names.begin(), names.end(), to_string(l)) != names.end()) caps.layouts.push_back(l);
    for (const auto& name : names)
      try {
        parse_layout(name);
      } catch (const InputError& e) {
        throw fault(fmt::format("'layouts': {}", e.what()));
      }
    if (caps.layouts.empty()) throw fault("'layouts' is empty: declare at least bhsd");
  }

  if (get("masks", names, is_strings, "a list of mask names")) {
    caps.masks = {false, false, false, false, false, false, false};
    for (const auto& name : names) {
      const auto found = std::find_if(mask_names.begin(), mask_names.end(), [&](const auto& m) { return m.first == name; });
      if (found == mask_names.end()) throw fault(fmt::format("'masks': unknown mask '{}' (expected some of {})", name, list_of_names()));
      caps.masks.*(found->second) = true;
    }
  }

  bool restricted = false;
  if (get("causal_only", restricted, is_bool, "true or false")) caps.masks.non_causal = !restricted;
  if (caps.masks.non_causal == false && !caps.masks.causal_top_left && !caps.masks.causal_bottom_right)
    throw fault("'causal_only' is true but 'masks' declares no causal mask (causal_top_left, causal_bottom_right)");
  if (get("default_scale_only", restricted, is_bool, "true or false")) caps.custom_scale = !restricted;
  if (j.contains("score_modifications")) {
    const auto& list = j.at("score_modifications");
    const std::string expected = fmt::format("a list of some of {}", score_modification_names());
    if (!list.is_array()) throw fault(fmt::format("'score_modifications' must be {} (got {})", expected, list.dump()));
    for (const auto& item : list) {
      const std::optional<ScoreModification> found = item.is_string() ? score_modification_named(item.get<std::string>()) : std::nullopt;
      if (!found) throw fault(fmt::format("'score_modifications': unknown {} (expected {})", item.dump(), expected));
      caps.score_modifications.push_back(*found);
    }
  }
  get("gqa", caps.gqa, is_bool, "true or false");
  get("different_dk_dv", caps.different_dk_dv, is_bool, "true or false");
  get("returns_lse", caps.returns_lse, is_bool, "true or false");
  get("deterministic", caps.deterministic, is_bool, "true or false");
  get("masked_nonfinite_safe", caps.masked_nonfinite_safe, is_bool, "true or false");
  get("parameter_gradients", caps.parameter_gradients, is_bool, "true or false");

  std::vector<std::int64_t> dims;
  if (get("head_dims", dims, is_ints, "a list of integers")) {
    if (dims.empty()) throw fault("'head_dims' is empty (leave it out to declare every head dim)");
    for (std::int64_t d : dims)
      if (d < 1) throw fault(fmt::format("'head_dims': {} is not a head dim", d));
    caps.head_dims = dims;
  }
  get("min_head_dim", caps.min_head_dim, is_int, "an integer");
  get("max_head_dim", caps.max_head_dim, is_int, "an integer");
  if (!(caps.min_head_dim >= 1 && caps.min_head_dim <= caps.max_head_dim))
    throw fault(fmt::format("head dims [{}, {}] is empty ('min_head_dim' must be at least 1 and at most 'max_head_dim')", caps.min_head_dim,
                            caps.max_head_dim));
  if (!caps.head_dims.empty() && (j.contains("min_head_dim") || j.contains("max_head_dim")))
    throw fault("'head_dims' and 'min_head_dim'/'max_head_dim' both given: declare one or the other");

  if (get("fully_masked", text, is_string, "\"zeros\", \"nan\" or \"any\"")) {
    const auto found = std::find_if(policies.begin(), policies.end(), [&](FullyMaskedPolicy p) { return to_string(p) == text; });
    if (found == policies.end())
      throw fault(fmt::format("'fully_masked': unknown policy '{}' (expected \"zeros\", \"nan\" or \"any\": rows not judged)", text));
    caps.fully_masked = *found;
  }

  // A unit roundoff key, read as a precision or refused naming the key.
  auto precision_key = [&](const char* key, MatmulPrecision& into, std::string_view hint) {
    double u = 0;
    if (!get(key, u, is_number, "a number")) return;
    try {
      into = matmul_precision_of(u);
    } catch (const InputError& e) {
      throw fault(fmt::format("'{}': {}{}", key, e.what(), hint));
    }
  };
  precision_key("matmul_unit_roundoff", caps.matmul_precision, "");
  precision_key("accumulation_unit_roundoff", caps.accumulation_precision, " (here: 2^-11 = an f16 accumulator, 2^-8 = bf16)");
  return caps;
}

Capabilities read_capabilities_file(const std::filesystem::path& path) {
  return capabilities_from_json(read_json_file(path, "no such file (the capabilities declaration)"), path.string());
}

nlohmann::json capabilities_to_json(const Capabilities& caps) {
  nlohmann::json j = {{"schema", std::string(schema)}, {"version", version}, {"summary", caps.summary}};
  std::vector<std::string> dtypes, layouts, masks;
  for (DType d : caps.dtypes) dtypes.emplace_back(to_string(d));
  for (Layout l : caps.layouts) layouts.emplace_back(to_string(l));
  for (const auto& [name, flag] : mask_names)
    if (caps.masks.*flag) masks.emplace_back(name);
  std::vector<std::string_view> operations;
  for (Operation o : caps.operations) operations.push_back(to_string(o));
  j["operations"] = operations;
  j["parameter_gradients"] = caps.parameter_gradients;
  j["dtypes"] = dtypes;
  if (!caps.role_dtypes.empty()) {
    nlohmann::json& roles = j["role_dtypes"] = nlohmann::json::object();
    for (const auto& [role, own] : caps.role_dtypes) {
      std::vector<std::string> names;
      for (DType d : own) names.emplace_back(to_string(d));
      roles[std::string(to_string(role))] = names;
    }
  }
  j["layouts"] = layouts;
  j["masks"] = masks;
  if (!caps.masks.non_causal) j["causal_only"] = true;
  if (!caps.custom_scale) j["default_scale_only"] = true;
  if (!caps.score_modifications.empty()) {
    std::vector<std::string> names;
    for (ScoreModification m : caps.score_modifications) names.emplace_back(to_string(m));
    j["score_modifications"] = names;
  }
  j["gqa"] = caps.gqa;
  j["different_dk_dv"] = caps.different_dk_dv;
  if (caps.head_dims.empty()) {
    j["min_head_dim"] = caps.min_head_dim;
    j["max_head_dim"] = caps.max_head_dim;
  } else {
    j["head_dims"] = caps.head_dims;
  }
  j["fully_masked"] = std::string(to_string(caps.fully_masked));
  j["returns_lse"] = caps.returns_lse;
  j["deterministic"] = caps.deterministic;
  j["masked_nonfinite_safe"] = caps.masked_nonfinite_safe;
  j["matmul_unit_roundoff"] = unit_roundoff(caps.matmul_precision);
  j["accumulation_unit_roundoff"] = unit_roundoff(caps.accumulation_precision);
  return j;
}

}  // namespace attn

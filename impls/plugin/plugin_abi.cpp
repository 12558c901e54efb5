#include "impls/plugin/plugin_abi.hpp"

#include <algorithm>
#include <cmath>
#include <array>
#include <csignal>
#include <cstring>
#include <string_view>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "impls/capability_space.hpp"

namespace attn::plugin {
namespace {


std::string head_dims_text(const PluginInfo& info) {
  if (!info.head_dims.empty()) return fmt::format("{}", fmt::join(info.head_dims, ", "));
  return fmt::format("{} to {}", info.min_head_dim, info.max_head_dim);
}

constexpr std::int32_t data_roles[] = {ATTNBENCH_ROLE_Q, ATTNBENCH_ROLE_K, ATTNBENCH_ROLE_V, ATTNBENCH_ROLE_O};

// Every feature bit with its name, for describe_capabilities and the JSON.
const std::pair<std::uint32_t, const char*> feature_names[] = {
    {ATTNBENCH_FEATURE_CAUSAL_TOP_LEFT, "causal top-left"},
    {ATTNBENCH_FEATURE_CAUSAL_BOTTOM_RIGHT, "causal bottom-right"},
    {ATTNBENCH_FEATURE_PADDING_PER_BATCH, "padding per batch"},
    {ATTNBENCH_FEATURE_PADDING_PER_QUERY, "padding per query"},
    {ATTNBENCH_FEATURE_BOOL_MASK, "boolean mask"},
    {ATTNBENCH_FEATURE_BIAS, "additive bias"},
    {ATTNBENCH_FEATURE_SLIDING_WINDOW, "sliding window"},
    {ATTNBENCH_FEATURE_CAUSAL_ONLY, "causal only"},
    {ATTNBENCH_FEATURE_DEFAULT_SCALE_ONLY, "the default scale only"},
    {ATTNBENCH_FEATURE_PACKED, "packed sequences"},
    {ATTNBENCH_FEATURE_PAGED, "paged K/V"},
};
// The score modifications that also have a feature bit (the ABI's first three, fixed): a bit
// declares what its name does. A modification added later has a name only.
constexpr std::pair<std::uint32_t, ScoreModification> score_modification_bits[] = {
    {ATTNBENCH_FEATURE_SOFTCAP, ScoreModification::softcap},
    {ATTNBENCH_FEATURE_SINK, ScoreModification::sink},
    {ATTNBENCH_FEATURE_DROPOUT, ScoreModification::dropout},
};

constexpr std::uint32_t mask_features = ATTNBENCH_FEATURE_CAUSAL_TOP_LEFT | ATTNBENCH_FEATURE_CAUSAL_BOTTOM_RIGHT |
                                        ATTNBENCH_FEATURE_PADDING_PER_BATCH | ATTNBENCH_FEATURE_PADDING_PER_QUERY |
                                        ATTNBENCH_FEATURE_BOOL_MASK | ATTNBENCH_FEATURE_BIAS;

}  // namespace

bool PluginInfo::accepts(std::int32_t role, DlType dtype) const {
  return std::any_of(dtypes.begin(), dtypes.end(),
                     [&](const RoleDtype& r) { return r.dtype == dtype && (r.role == role || r.role == ATTNBENCH_ROLE_DATA); });
}

std::vector<DType> PluginInfo::data_dtypes() const {
  std::vector<DType> out;
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16})
    if (std::all_of(std::begin(data_roles), std::end(data_roles), [&](std::int32_t role) { return accepts(role, to_dl(d)); })) out.push_back(d);
  return out;
}

std::vector<ScoreModification> parse_score_modifications(const char* names) {
  std::vector<ScoreModification> declared;
  if (names == nullptr) return declared;
  const std::string_view text(names);
  for (std::size_t at = 0; at < text.size();) {
    if (text[at] == ' ') {
      ++at;
      continue;
    }
    const std::size_t end = std::min(text.find(' ', at), text.size());
    const std::string_view name = text.substr(at, end - at);
    at = end;
    const std::optional<ScoreModification> found = score_modification_named(name);
    if (!found)
      throw std::runtime_error(fmt::format("attnbench_score_modifications: unknown '{}' (known: {})", name, score_modification_names()));
    if (std::find(declared.begin(), declared.end(), *found) == declared.end()) declared.push_back(*found);
  }
  std::sort(declared.begin(), declared.end());  // score_modification_rows order
  return declared;
}

PluginInfo read_plugin_info(const attnbench_plugin_v2& plugin, const std::string& path, const char* score_modification_names) {
  PluginInfo info;
  info.path = path;
  info.abi_version = plugin.abi_version;
  if (plugin.struct_size < sizeof(attnbench_plugin_v2))
    throw std::runtime_error(fmt::format("its struct_size is {}, less than sizeof(attnbench_plugin_v2) = {}", plugin.struct_size,
                                         sizeof(attnbench_plugin_v2)));
  if (plugin.name == nullptr || plugin.name[0] == '\0') throw std::runtime_error("its description has no name");
  info.name = plugin.name;
  // The documented alphabet, and a length that fits a table: the name keys results in JSON, in
  // report rows and in benchmark family names, where '/' or a space would split it.
  if (info.name.size() > 64) throw std::runtime_error(fmt::format("its name is {} characters long (at most 64)", info.name.size()));
  for (const char c : info.name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
      throw std::runtime_error(fmt::format("its name '{}' has a character outside [A-Za-z0-9_.-]", info.name));
  info.version = plugin.version != nullptr ? plugin.version : "";
  info.description = plugin.description != nullptr ? plugin.description : "";
  const attnbench_plugin_caps& c = plugin.capabilities;
  info.operations = c.operations;
  info.features = c.features;
  info.layouts = c.layouts;
  if (c.operations == 0) throw std::runtime_error("capabilities.operations declares no operation");
  if (c.dtype_count < 0 || (c.dtype_count > 0 && c.dtypes == nullptr))
    throw std::runtime_error("capabilities.dtypes is NULL with a positive dtype_count");
  for (std::int32_t i = 0; i < c.dtype_count; ++i) info.dtypes.push_back({c.dtypes[i].role, c.dtypes[i].dtype});
  if (info.data_dtypes().empty()) throw std::runtime_error("capabilities.dtypes declares no f64, f32, f16 or bf16 for all of q, k, v and o");
  if (info.has(ATTNBENCH_FEATURE_CAUSAL_ONLY) && !info.has(ATTNBENCH_FEATURE_CAUSAL_TOP_LEFT) && !info.has(ATTNBENCH_FEATURE_CAUSAL_BOTTOM_RIGHT))
    throw std::runtime_error("capabilities.features declares CAUSAL_ONLY but neither CAUSAL_TOP_LEFT nor CAUSAL_BOTTOM_RIGHT");
  if ((c.layouts & (ATTNBENCH_ACCEPTS_BHSD | ATTNBENCH_ACCEPTS_BSHD | ATTNBENCH_ACCEPTS_STRIDED)) == 0)
    throw std::runtime_error("capabilities.layouts declares no layout");
  if (c.fully_masked_policy != ATTNBENCH_FULLY_MASKED_AS_ZEROS && c.fully_masked_policy != ATTNBENCH_FULLY_MASKED_AS_NAN)
    throw std::runtime_error(fmt::format("capabilities.fully_masked_policy {} is unknown", c.fully_masked_policy));
  info.fully_masked = c.fully_masked_policy == ATTNBENCH_FULLY_MASKED_AS_NAN ? FullyMaskedPolicy::nan : FullyMaskedPolicy::zeros;
  if (c.head_dim_count < 0 || (c.head_dim_count > 0 && c.head_dims == nullptr))
    throw std::runtime_error("capabilities.head_dims is NULL with a positive head_dim_count");
  for (std::int32_t i = 0; i < c.head_dim_count; ++i) info.head_dims.push_back(c.head_dims[i]);
  info.min_head_dim = c.min_head_dim;
  info.max_head_dim = c.max_head_dim;
  if (info.head_dims.empty() && !(c.min_head_dim >= 1 && c.min_head_dim <= c.max_head_dim))
    throw std::runtime_error(fmt::format("capabilities: head dims [{}, {}] is empty and no list is given", c.min_head_dim, c.max_head_dim));
  try {
    info.matmul_precision = matmul_precision_of(c.matmul_unit_roundoff);
  } catch (const InputError& e) {
    throw std::runtime_error(fmt::format("capabilities.matmul_unit_roundoff: {}", e.what()));
  }
  if (c.accumulation_bits == 11 || c.accumulation_bits == 8)
    info.accumulation_precision = matmul_precision_of(std::ldexp(1.0, -c.accumulation_bits));
  else if (c.accumulation_bits != 0)
    throw std::runtime_error(fmt::format("capabilities.accumulation_bits {}: expected 0 (the working precision's), 11 (an f16 accumulator) "
                                         "or 8 (bf16)",
                                         c.accumulation_bits));
  if (c.device_type != ATTNBENCH_DL_CPU && c.device_type != ATTNBENCH_DL_CUDA)
    throw std::runtime_error(fmt::format("capabilities.device_type {} is neither CPU (1) nor CUDA (2)", c.device_type));
  info.cuda = c.device_type == ATTNBENCH_DL_CUDA;
  if (plugin.run == nullptr) throw std::runtime_error("its description has no run function");
  info.has_supports = plugin.supports != nullptr;
  info.score_modifications = parse_score_modifications(score_modification_names);
  return info;
}

void to_json(nlohmann::json& j, const PluginInfo& i) {
  nlohmann::json dtypes = nlohmann::json::array();
  for (const RoleDtype& r : i.dtypes) dtypes.push_back({r.role, r.dtype.code, r.dtype.bits, r.dtype.lanes});
  j = {{"path", i.path},
       {"name", i.name},
       {"version", i.version},
       {"description", i.description},
       {"abi_version", i.abi_version},
       {"operations", i.operations},
       {"features", i.features},
       {"layouts", i.layouts},
       {"dtypes", dtypes},
       {"fully_masked", to_string(i.fully_masked)},
       {"min_head_dim", i.min_head_dim},
       {"max_head_dim", i.max_head_dim},
       {"head_dims", i.head_dims},
       {"matmul_precision", to_string(i.matmul_precision)},
       {"accumulation_unit_roundoff", unit_roundoff(i.accumulation_precision)},
       {"device", i.cuda ? "cuda" : "cpu"},
       {"has_supports", i.has_supports}};
  std::vector<std::string_view> names;
  for (ScoreModification m : i.score_modifications) names.push_back(to_string(m));
  j["score_modifications"] = fmt::format("{}", fmt::join(names, " "));
}

void from_json(const nlohmann::json& j, PluginInfo& i) {
  j.at("path").get_to(i.path);
  j.at("name").get_to(i.name);
  j.at("version").get_to(i.version);
  j.at("description").get_to(i.description);
  j.at("abi_version").get_to(i.abi_version);
  j.at("operations").get_to(i.operations);
  j.at("features").get_to(i.features);
  j.at("layouts").get_to(i.layouts);
  i.dtypes.clear();
  for (const auto& r : j.at("dtypes"))
    i.dtypes.push_back({r.at(0).get<std::int32_t>(), DlType{r.at(1).get<std::uint8_t>(), r.at(2).get<std::uint8_t>(), r.at(3).get<std::uint16_t>()}});
  i.fully_masked = j.at("fully_masked").get<std::string>() == "nan" ? FullyMaskedPolicy::nan : FullyMaskedPolicy::zeros;
  j.at("min_head_dim").get_to(i.min_head_dim);
  j.at("max_head_dim").get_to(i.max_head_dim);
  j.at("head_dims").get_to(i.head_dims);
  i.matmul_precision = parse_matmul_precision(j.at("matmul_precision").get<std::string>());
  i.accumulation_precision = matmul_precision_of(j.value("accumulation_unit_roundoff", 0.0));
  i.cuda = j.at("device").get<std::string>() == "cuda";
  j.at("has_supports").get_to(i.has_supports);
  i.score_modifications = parse_score_modifications(j.value("score_modifications", std::string()).c_str());
}

namespace {

// The operations a description's bits declare, in Operation order.
std::vector<Operation> declared_operations(const PluginInfo& info) {
  std::vector<Operation> declared;
  for (Operation o : {Operation::forward, Operation::backward})
    if (info.operations & ATTNBENCH_OP_BIT(o == Operation::forward ? ATTNBENCH_OP_FORWARD : ATTNBENCH_OP_BACKWARD)) declared.push_back(o);
  return declared;
}

}  // namespace

std::vector<ScoreModification> declared_score_modifications(const PluginInfo& info) {
  std::vector<ScoreModification> declared;
  for (const ScoreModificationRow& row : score_modification_rows) {
    const bool by_name = std::find(info.score_modifications.begin(), info.score_modifications.end(), row.id) != info.score_modifications.end();
    const bool by_bit = std::any_of(std::begin(score_modification_bits), std::end(score_modification_bits),
                                    [&](const auto& b) { return b.second == row.id && info.has(b.first); });
    if (by_name || by_bit) declared.push_back(row.id);
  }
  return declared;
}

Capabilities to_capabilities(const PluginInfo& info) {
  Capabilities caps;
  caps.summary = fmt::format("plugin {} {} ({}): {}", info.name, info.version, info.path, info.description);
  caps.device = info.cuda ? "cuda" : "cpu";
  caps.operations = declared_operations(info);
  caps.dtypes = info.data_dtypes();
  // A role's own entries are its own dtypes, whatever the other roles' are: they make
  // mixed-precision problems (o in f32 on f16 inputs). ATTNBENCH_ROLE_DATA entries are one-dtype
  // problems only. fp8 and other types with no DType are shown as declared (describe_capabilities)
  // and not run.
  for (const RoleDtype& r : info.dtypes) {
    const std::optional<DType> d = dtype_from_dl(r.dtype);
    const std::optional<Role> role = to_role(r.role);
    if (!d || !role || !is_data_role(*role)) continue;
    std::vector<DType>& own = caps.role_dtypes[*role];
    if (std::find(own.begin(), own.end(), *d) == own.end()) own.push_back(*d);
  }
  caps.layouts = declared_layouts(info.layouts);
  caps.masks = {info.has(ATTNBENCH_FEATURE_CAUSAL_TOP_LEFT),   info.has(ATTNBENCH_FEATURE_CAUSAL_BOTTOM_RIGHT),
                info.has(ATTNBENCH_FEATURE_PADDING_PER_BATCH), info.has(ATTNBENCH_FEATURE_PADDING_PER_QUERY),
                info.has(ATTNBENCH_FEATURE_BOOL_MASK),         info.has(ATTNBENCH_FEATURE_BIAS),
                info.has(ATTNBENCH_FEATURE_SLIDING_WINDOW)};
  caps.masks.non_causal = !info.has(ATTNBENCH_FEATURE_CAUSAL_ONLY);
  caps.custom_scale = !info.has(ATTNBENCH_FEATURE_DEFAULT_SCALE_ONLY);
  caps.gqa = info.has(ATTNBENCH_FEATURE_GQA);
  caps.different_dk_dv = info.has(ATTNBENCH_FEATURE_DIFFERENT_DK_DV);
  caps.min_head_dim = info.min_head_dim;
  caps.max_head_dim = info.max_head_dim;
  caps.head_dims.assign(info.head_dims.begin(), info.head_dims.end());
  caps.returns_lse = info.has(ATTNBENCH_FEATURE_LSE);
  caps.deterministic = info.has(ATTNBENCH_FEATURE_DETERMINISTIC);
  caps.masked_nonfinite_safe = info.has(ATTNBENCH_FEATURE_MASKED_NONFINITE_SAFE);
  caps.matmul_precision = info.matmul_precision;
  caps.accumulation_precision = info.accumulation_precision;
  caps.fully_masked = info.fully_masked;
  caps.score_modifications = declared_score_modifications(info);
  return caps;
}

std::vector<std::string> describe_capabilities(const PluginInfo& info) {
  std::vector<std::string> dtypes, other_dtypes, layouts, masks;
  for (DType d : info.data_dtypes()) dtypes.emplace_back(to_string(d));
  // A role's own dtypes, which mixed-precision cases run, and the exotic ones attnbench does not run yet.
  for (const auto& [role, own] : to_capabilities(info).role_dtypes) {
    std::vector<std::string_view> names;
    for (DType d : own) names.push_back(to_string(d));
    other_dtypes.push_back(fmt::format("{} on its own: {}", to_string(role), fmt::join(names, ", ")));
  }
  for (const RoleDtype& r : info.dtypes) {
    const std::optional<Role> role = to_role(r.role);
    if (!dtype_from_dl(r.dtype) || (r.role != ATTNBENCH_ROLE_DATA && (!role || !is_data_role(*role))))
      other_dtypes.push_back(fmt::format("{} {} (declared, not run)", role_name(r.role), dl_name(r.dtype)));
  }
  if (info.layouts & ATTNBENCH_ACCEPTS_BHSD) layouts.emplace_back("BHSD");
  if (info.layouts & ATTNBENCH_ACCEPTS_BSHD) layouts.emplace_back("BSHD");
  if (info.layouts & ATTNBENCH_ACCEPTS_STRIDED) layouts.emplace_back("strided");
  for (const auto& [bit, name] : feature_names)
    if (info.has(bit)) masks.emplace_back(name);
  std::vector<std::string_view> modifications;
  for (ScoreModification m : declared_score_modifications(info)) modifications.push_back(to_string(m));
  auto yes_no = [](bool b) { return b ? "yes" : "no"; };
  std::vector<std::string_view> operations;
  for (Operation o : declared_operations(info)) operations.push_back(to_string(o));
  std::vector<std::string> lines{
      fmt::format("device: {}; operations: {}; dtypes: {}{}; layouts: {}", info.cuda ? "CUDA" : "host", fmt::join(operations, ", "),
                  fmt::join(dtypes, ", "), other_dtypes.empty() ? "" : fmt::format(" ({})", fmt::join(other_dtypes, "; ")),
                  fmt::join(layouts, ", ")),
      fmt::format("masks: {}", masks.empty() ? std::string("none") : fmt::format("{}", fmt::join(masks, ", "))),
      fmt::format("score modifications: {}", modifications.empty() ? std::string("none") : fmt::format("{}", fmt::join(modifications, ", "))),
      fmt::format("head dims: {}; d_k != d_v: {}; GQA: {}; returns LSE: {}; deterministic: {}; fully masked rows: {}", head_dims_text(info),
                  yes_no(info.has(ATTNBENCH_FEATURE_DIFFERENT_DK_DV)), yes_no(info.has(ATTNBENCH_FEATURE_GQA)),
                  yes_no(info.has(ATTNBENCH_FEATURE_LSE)), yes_no(info.has(ATTNBENCH_FEATURE_DETERMINISTIC)), to_string(info.fully_masked))};
  if (info.has(ATTNBENCH_FEATURE_MASKED_NONFINITE_SAFE) || info.matmul_precision != MatmulPrecision::working)
    lines.push_back(fmt::format("masked non-finite safe: {}; matmul products: {}", yes_no(info.has(ATTNBENCH_FEATURE_MASKED_NONFINITE_SAFE)),
                                info.matmul_precision != MatmulPrecision::working
                                    ? fmt::format("{} (unit roundoff {:g})", to_string(info.matmul_precision), unit_roundoff(info.matmul_precision))
                                    : std::string("the dtype's")));
  if (info.accumulation_precision != MatmulPrecision::working)
    lines.push_back(fmt::format("accumulators: coarser than the working precision (unit roundoff {:g}; the pass rule scales by it)",
                                unit_roundoff(info.accumulation_precision)));
  return lines;
}

Support check_capabilities(const PluginInfo& info, const Problem& p) {
  const std::optional<Layout> layout = handover_layout(info, p);
  if (!layout) return Support::no("no layout declared");
  // A problem in the harness's default BHSD is handed over in a declared layout (the run
  // relayouts); one that names a layout must name a declared one.
  Problem in_declared_layout = p;
  if (p.layout == Layout::bhsd) in_declared_layout.layout = *layout;
  return covers(to_capabilities(info), in_declared_layout);
}

DlType to_dl(DType dtype) {
  switch (dtype) {
    case DType::f64: return {ATTNBENCH_DL_FLOAT, 64, 1};
    case DType::f32: return {ATTNBENCH_DL_FLOAT, 32, 1};
    case DType::f16: return {ATTNBENCH_DL_FLOAT, 16, 1};
    case DType::bf16: return {ATTNBENCH_DL_BFLOAT, 16, 1};
  }
  throw std::invalid_argument("unknown dtype");
}

std::optional<DType> dtype_from_dl(DlType dtype) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16})
    if (to_dl(d) == dtype) return d;
  return std::nullopt;
}

std::string dl_name(DlType t) {
  std::string base;
  switch (t.code) {
    case ATTNBENCH_DL_INT: base = fmt::format("int{}", t.bits); break;
    case ATTNBENCH_DL_UINT: base = fmt::format("uint{}", t.bits); break;
    case ATTNBENCH_DL_FLOAT: base = t.bits == 16 ? "f16" : t.bits == 32 ? "f32" : t.bits == 64 ? "f64" : fmt::format("float{}", t.bits); break;
    case ATTNBENCH_DL_BFLOAT: base = t.bits == 16 ? "bf16" : fmt::format("bfloat{}", t.bits); break;
    case ATTNBENCH_DL_BOOL: base = "bool"; break;
    case ATTNBENCH_DL_FLOAT8_E3M4: base = "fp8_e3m4"; break;
    case ATTNBENCH_DL_FLOAT8_E4M3: base = "fp8_e4m3"; break;
    case ATTNBENCH_DL_FLOAT8_E4M3B11FNUZ: base = "fp8_e4m3b11fnuz"; break;
    case ATTNBENCH_DL_FLOAT8_E4M3FN: base = "fp8_e4m3fn"; break;
    case ATTNBENCH_DL_FLOAT8_E4M3FNUZ: base = "fp8_e4m3fnuz"; break;
    case ATTNBENCH_DL_FLOAT8_E5M2: base = "fp8_e5m2"; break;
    case ATTNBENCH_DL_FLOAT8_E5M2FNUZ: base = "fp8_e5m2fnuz"; break;
    case ATTNBENCH_DL_FLOAT8_E8M0FNU: base = "fp8_e8m0fnu"; break;
    case ATTNBENCH_DL_FLOAT6_E2M3FN: base = "fp6_e2m3fn"; break;
    case ATTNBENCH_DL_FLOAT6_E3M2FN: base = "fp6_e3m2fn"; break;
    case ATTNBENCH_DL_FLOAT4_E2M1FN: base = "fp4_e2m1fn"; break;
    default: base = fmt::format("code {} bits {}", t.code, t.bits);
  }
  return t.lanes == 1 ? base : fmt::format("{}x{}", base, t.lanes);
}

std::size_t dl_bytes(DlType t) { return (std::size_t(t.bits) * std::max<std::size_t>(t.lanes, 1) + 7) / 8; }

namespace {

// Indexed by the ABI constant; the static_asserts below keep it complete and in the header's order.
constexpr std::array<Role, ATTNBENCH_ROLE_COUNT> abi_roles{Role::q,   Role::k,    Role::v,    Role::o,    Role::lse,  Role::d_o,
                                                           Role::dq,  Role::dk,   Role::dv,   Role::bias, Role::mask, Role::sink,
                                                           Role::cu_seqlens_q, Role::cu_seqlens_k, Role::seqlens_k, Role::block_table,
                                                           Role::keep};
static_assert(abi_roles[ATTNBENCH_ROLE_Q] == Role::q && abi_roles[ATTNBENCH_ROLE_K] == Role::k && abi_roles[ATTNBENCH_ROLE_V] == Role::v &&
              abi_roles[ATTNBENCH_ROLE_O] == Role::o && abi_roles[ATTNBENCH_ROLE_LSE] == Role::lse && abi_roles[ATTNBENCH_ROLE_D_O] == Role::d_o &&
              abi_roles[ATTNBENCH_ROLE_DQ] == Role::dq && abi_roles[ATTNBENCH_ROLE_DK] == Role::dk && abi_roles[ATTNBENCH_ROLE_DV] == Role::dv &&
              abi_roles[ATTNBENCH_ROLE_BIAS] == Role::bias && abi_roles[ATTNBENCH_ROLE_MASK] == Role::mask &&
              abi_roles[ATTNBENCH_ROLE_SINK] == Role::sink && abi_roles[ATTNBENCH_ROLE_CU_SEQLENS_Q] == Role::cu_seqlens_q &&
              abi_roles[ATTNBENCH_ROLE_CU_SEQLENS_K] == Role::cu_seqlens_k && abi_roles[ATTNBENCH_ROLE_SEQLENS_K] == Role::seqlens_k &&
              abi_roles[ATTNBENCH_ROLE_BLOCK_TABLE] == Role::block_table && abi_roles[ATTNBENCH_ROLE_KEEP] == Role::keep,
              "every ATTNBENCH_ROLE_* constant maps onto its Role");
// Every role but weights, d_sink and d_bias is in the ABI, once: the ABI's roles and the harness's
// are one vocabulary. The parameter gradients have no constant yet: a plugin never declares them
// (to_capabilities leaves Capabilities::parameter_gradients false), so no call hands them over.
static_assert(ATTNBENCH_ROLE_COUNT + 3 == role_count, "a role added on one side only (core/tensor_role.hpp or attnbench_plugin.h)");

}  // namespace

std::optional<Role> to_role(std::int32_t abi_role) {
  if (abi_role < 0 || abi_role >= ATTNBENCH_ROLE_COUNT) return std::nullopt;
  return abi_roles[std::size_t(abi_role)];
}

std::optional<std::int32_t> to_abi_role(Role role) {
  for (std::size_t i = 0; i < abi_roles.size(); ++i)
    if (abi_roles[i] == role) return std::int32_t(i);
  return std::nullopt;
}

std::string role_name(std::int32_t role) {
  if (role == ATTNBENCH_ROLE_DATA) return "data";
  if (const std::optional<Role> r = to_role(role)) return std::string(to_string(*r));
  return fmt::format("role {}", role);
}

std::vector<Layout> declared_layouts(std::uint32_t layouts) {
  std::vector<Layout> declared;
  if (layouts & ATTNBENCH_ACCEPTS_BHSD) declared.push_back(Layout::bhsd);
  if (layouts & ATTNBENCH_ACCEPTS_BSHD) declared.push_back(Layout::bshd);
  if (layouts & ATTNBENCH_ACCEPTS_STRIDED) declared.push_back(Layout::strided);
  return declared;
}

std::optional<Layout> handover_layout(const PluginInfo& info, const Problem& p) {
  const std::vector<Layout> declared = declared_layouts(info.layouts);
  if (declared.empty()) return std::nullopt;
  return std::find(declared.begin(), declared.end(), p.layout) != declared.end() ? p.layout : declared.front();
}

Strides layout_strides(const Tensor::Shape& s, Layout layout) {
  switch (layout) {
    case Layout::bhsd: return {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
    case Layout::bshd: return {s[2] * s[1] * s[3], s[3], s[1] * s[3], 1};  // [b, s, h, d] in memory
    case Layout::strided: {
      // Gaps of 3, 5 and 7 elements: odd, so no dense stride is ever right by accident.
      const std::int64_t row = s[3] + 3, head = s[2] * row + 5, batch = s[1] * head + 7;
      return {batch, head, row, 1};
    }
  }
  throw std::invalid_argument("unknown layout");
}

Strides broadcast_strides(const Problem& p, Broadcast broadcast) {
  const BroadcastStrides s = attn::broadcast_strides(broadcast, p.h_q, p.n_q, p.n_k);  // core's one rule
  return {s.batch, s.head, p.n_k, 1};
}

std::int64_t storage_elements(const Tensor::Shape& shape, const Strides& strides) {
  std::int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    if (shape[static_cast<std::size_t>(i)] == 0) return 0;
    last += (shape[static_cast<std::size_t>(i)] - 1) * strides[static_cast<std::size_t>(i)];
  }
  return last + 1;
}

std::string signal_description(int signal) {
  switch (signal) {
    case SIGSEGV: return "SIGSEGV (segmentation fault)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGABRT: return "SIGABRT (abort)";
    case SIGFPE: return "SIGFPE (arithmetic exception)";
    case SIGILL: return "SIGILL (illegal instruction)";
    case SIGKILL: return "SIGKILL (killed)";
    case SIGTERM: return "SIGTERM (terminated)";
    case SIGTRAP: return "SIGTRAP (trace trap)";
    case SIGSYS: return "SIGSYS (bad system call)";
    default: return fmt::format("signal {} ({})", signal, strsignal(signal));
  }
}

}  // namespace attn::plugin

#include "impls/plugin/plugin_abi.hpp"

#include <csignal>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "impls/capability_space.hpp"

namespace attn::plugin {
namespace {

std::string head_dims_text(const PluginInfo& info) {
  if (!info.head_dims.empty()) return fmt::format("{}", fmt::join(info.head_dims, ", "));
  return fmt::format("{} to {}", info.min_head_dim, info.max_head_dim);
}

}  // namespace

PluginInfo read_plugin_info(const attnbench_plugin_v1& plugin, const std::string& path) {
  PluginInfo info;
  info.path = path;
  info.abi_version = plugin.abi_version;
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
  const attnbench_capabilities& c = plugin.capabilities;
  info.dtypes = c.dtypes;
  info.layouts = c.layouts;
  info.masks = c.masks;
  if ((c.dtypes & 0xFu) == 0) throw std::runtime_error("capabilities.dtypes declares no f64, f32, f16 or bf16");
  if ((c.layouts & (ATTNBENCH_LAYOUT_BHSD | ATTNBENCH_LAYOUT_BSHD | ATTNBENCH_LAYOUT_STRIDED)) == 0)
    throw std::runtime_error("capabilities.layouts declares no layout");
  if (c.fully_masked_policy != ATTNBENCH_FULLY_MASKED_ZEROS && c.fully_masked_policy != ATTNBENCH_FULLY_MASKED_NAN)
    throw std::runtime_error(fmt::format("capabilities.fully_masked_policy {} is unknown", c.fully_masked_policy));
  info.fully_masked = c.fully_masked_policy == ATTNBENCH_FULLY_MASKED_NAN ? FullyMaskedPolicy::nan : FullyMaskedPolicy::zeros;
  if (c.head_dim_count < 0 || (c.head_dim_count > 0 && c.head_dims == nullptr))
    throw std::runtime_error("capabilities.head_dims is NULL with a positive head_dim_count");
  for (std::int32_t i = 0; i < c.head_dim_count; ++i) info.head_dims.push_back(c.head_dims[i]);
  info.min_head_dim = c.min_head_dim;
  info.max_head_dim = c.max_head_dim;
  if (info.head_dims.empty() && !(c.min_head_dim >= 1 && c.min_head_dim <= c.max_head_dim))
    throw std::runtime_error(fmt::format("capabilities: head dims [{}, {}] is empty and no list is given", c.min_head_dim, c.max_head_dim));
  info.different_dk_dv = c.different_dk_dv != 0;
  info.gqa = c.gqa != 0;
  info.returns_lse = c.returns_lse != 0;
  info.deterministic = c.deterministic != 0;
  if (c.device_type != ATTNBENCH_DEVICE_HOST && c.device_type != ATTNBENCH_DEVICE_CUDA)
    throw std::runtime_error(fmt::format("capabilities.device_type {} is neither HOST (1) nor CUDA (2)", c.device_type));
  info.cuda = c.device_type == ATTNBENCH_DEVICE_CUDA;
  if (plugin.run == nullptr) throw std::runtime_error("its description has no run function");
  info.has_supports = plugin.supports != nullptr;
  return info;
}

void to_json(nlohmann::json& j, const PluginInfo& i) {
  j = {{"path", i.path},
       {"name", i.name},
       {"version", i.version},
       {"description", i.description},
       {"abi_version", i.abi_version},
       {"dtypes", i.dtypes},
       {"layouts", i.layouts},
       {"masks", i.masks},
       {"fully_masked", to_string(i.fully_masked)},
       {"min_head_dim", i.min_head_dim},
       {"max_head_dim", i.max_head_dim},
       {"head_dims", i.head_dims},
       {"different_dk_dv", i.different_dk_dv},
       {"gqa", i.gqa},
       {"returns_lse", i.returns_lse},
       {"deterministic", i.deterministic},
       {"device", i.cuda ? "cuda" : "cpu"},
       {"has_supports", i.has_supports}};
}

void from_json(const nlohmann::json& j, PluginInfo& i) {
  j.at("path").get_to(i.path);
  j.at("name").get_to(i.name);
  j.at("version").get_to(i.version);
  j.at("description").get_to(i.description);
  j.at("abi_version").get_to(i.abi_version);
  j.at("dtypes").get_to(i.dtypes);
  j.at("layouts").get_to(i.layouts);
  j.at("masks").get_to(i.masks);
  i.fully_masked = j.at("fully_masked").get<std::string>() == "nan" ? FullyMaskedPolicy::nan : FullyMaskedPolicy::zeros;
  j.at("min_head_dim").get_to(i.min_head_dim);
  j.at("max_head_dim").get_to(i.max_head_dim);
  j.at("head_dims").get_to(i.head_dims);
  j.at("different_dk_dv").get_to(i.different_dk_dv);
  j.at("gqa").get_to(i.gqa);
  j.at("returns_lse").get_to(i.returns_lse);
  j.at("deterministic").get_to(i.deterministic);
  i.cuda = j.at("device").get<std::string>() == "cuda";
  j.at("has_supports").get_to(i.has_supports);
}

Capabilities to_capabilities(const PluginInfo& info) {
  Capabilities caps;
  caps.summary = fmt::format("plugin {} {} ({}): {}", info.name, info.version, info.path, info.description);
  caps.device = info.cuda ? "cuda" : "cpu";
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16})
    if (info.dtypes & ATTNBENCH_DTYPE_BIT(to_abi(d))) caps.dtypes.push_back(d);
  caps.layouts = declared_layouts(info.layouts);
  caps.masks = {(info.masks & ATTNBENCH_MASK_CAUSAL_TOP_LEFT) != 0,   (info.masks & ATTNBENCH_MASK_CAUSAL_BOTTOM_RIGHT) != 0,
                (info.masks & ATTNBENCH_MASK_PADDING_PER_BATCH) != 0, (info.masks & ATTNBENCH_MASK_PADDING_PER_QUERY) != 0,
                (info.masks & ATTNBENCH_MASK_BOOL) != 0,              (info.masks & ATTNBENCH_MASK_BIAS) != 0};
  caps.gqa = info.gqa;
  caps.different_dk_dv = info.different_dk_dv;
  caps.min_head_dim = info.min_head_dim;
  caps.max_head_dim = info.max_head_dim;
  caps.head_dims.assign(info.head_dims.begin(), info.head_dims.end());
  caps.returns_lse = info.returns_lse;
  caps.deterministic = info.deterministic;
  caps.fully_masked = info.fully_masked;
  return caps;
}

std::vector<std::string> describe_capabilities(const PluginInfo& info) {
  std::vector<std::string> dtypes, layouts, masks;
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16})
    if (info.dtypes & ATTNBENCH_DTYPE_BIT(to_abi(d))) dtypes.emplace_back(to_string(d));
  if (info.layouts & ATTNBENCH_LAYOUT_BHSD) layouts.emplace_back("BHSD");
  if (info.layouts & ATTNBENCH_LAYOUT_BSHD) layouts.emplace_back("BSHD");
  if (info.layouts & ATTNBENCH_LAYOUT_STRIDED) layouts.emplace_back("strided");
  const std::pair<std::uint32_t, const char*> mask_names[] = {
      {ATTNBENCH_MASK_CAUSAL_TOP_LEFT, "causal top-left"},      {ATTNBENCH_MASK_CAUSAL_BOTTOM_RIGHT, "causal bottom-right"},
      {ATTNBENCH_MASK_PADDING_PER_BATCH, "padding per batch"}, {ATTNBENCH_MASK_PADDING_PER_QUERY, "padding per query"},
      {ATTNBENCH_MASK_BOOL, "boolean mask"},                   {ATTNBENCH_MASK_BIAS, "additive bias"}};
  for (const auto& [bit, name] : mask_names)
    if (info.masks & bit) masks.emplace_back(name);
  auto yes_no = [](bool b) { return b ? "yes" : "no"; };
  return {fmt::format("device: {}; dtypes: {}; layouts: {}", info.cuda ? "CUDA" : "host", fmt::join(dtypes, ", "), fmt::join(layouts, ", ")),
          fmt::format("masks: {}", masks.empty() ? std::string("none") : fmt::format("{}", fmt::join(masks, ", "))),
          fmt::format("head dims: {}; d_k != d_v: {}; GQA: {}; returns LSE: {}; deterministic: {}; fully masked rows: {}",
                      head_dims_text(info), yes_no(info.different_dk_dv), yes_no(info.gqa), yes_no(info.returns_lse),
                      yes_no(info.deterministic), to_string(info.fully_masked))};
}

Support check_capabilities(const PluginInfo& info, const Problem& p) {
  const Capabilities caps = to_capabilities(info);
  if (caps.layouts.empty()) return Support::no("no layout declared");
  if (!p.window.as_causal()) return Support::no(fmt::format("window {}: plugin ABI v1 carries causal windows only", to_string(p.window)));
  // A problem in the harness's default BHSD is handed over in a declared layout (the run
  // relayouts); one that names a layout must name a declared one.
  Problem in_declared_layout = p;
  if (p.layout == Layout::bhsd) in_declared_layout.layout = caps.layouts.front();
  return covers(caps, in_declared_layout);
}

int32_t to_abi(DType dtype) {
  switch (dtype) {
    case DType::f64: return ATTNBENCH_DTYPE_F64;
    case DType::f32: return ATTNBENCH_DTYPE_F32;
    case DType::f16: return ATTNBENCH_DTYPE_F16;
    case DType::bf16: return ATTNBENCH_DTYPE_BF16;
  }
  throw std::invalid_argument("unknown dtype");
}

DType dtype_from_abi(int32_t code) {
  switch (code) {
    case ATTNBENCH_DTYPE_F64: return DType::f64;
    case ATTNBENCH_DTYPE_F32: return DType::f32;
    case ATTNBENCH_DTYPE_F16: return DType::f16;
    case ATTNBENCH_DTYPE_BF16: return DType::bf16;
    default: throw std::invalid_argument(fmt::format("unknown attnbench_dtype {}", code));
  }
}

std::vector<Layout> declared_layouts(std::uint32_t layouts) {
  std::vector<Layout> declared;
  if (layouts & ATTNBENCH_LAYOUT_BHSD) declared.push_back(Layout::bhsd);
  if (layouts & ATTNBENCH_LAYOUT_BSHD) declared.push_back(Layout::bshd);
  if (layouts & ATTNBENCH_LAYOUT_STRIDED) declared.push_back(Layout::strided);
  return declared;
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
  const bool over_batch = varies_over_batch(broadcast), over_head = varies_over_head(broadcast);
  const std::int64_t hh = over_head ? p.h_q : 1;
  return {over_batch ? hh * p.n_q * p.n_k : 0, over_head ? p.n_q * p.n_k : 0, p.n_k, 1};
}

std::int64_t storage_elements(const Tensor::Shape& shape, const Strides& strides) {
  std::int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    if (shape[static_cast<std::size_t>(i)] == 0) return 0;
    last += (shape[static_cast<std::size_t>(i)] - 1) * strides[static_cast<std::size_t>(i)];
  }
  return last + 1;
}

attnbench_problem to_abi(const Problem& p) {
  attnbench_problem a{};
  a.struct_size = sizeof(attnbench_problem);
  a.dtype = to_abi(p.dtype);
  a.batch = p.batch;
  a.h_q = p.h_q;
  a.h_kv = p.h_kv;
  a.n_q = p.n_q;
  a.n_k = p.n_k;
  a.d_k = p.d_k;
  a.d_v = p.d_v;
  a.scale = p.effective_scale();
  if (!p.window.as_causal()) throw std::invalid_argument("plugin ABI v1 carries causal windows only (check_capabilities refuses others)");
  const Causal causal = *p.window.as_causal();
  a.causal = causal == Causal::top_left       ? ATTNBENCH_CAUSAL_TOP_LEFT
             : causal == Causal::bottom_right ? ATTNBENCH_CAUSAL_BOTTOM_RIGHT
                                              : ATTNBENCH_CAUSAL_NONE;
  a.padding = p.padding.kind == KeyPadding::Kind::per_batch   ? ATTNBENCH_PADDING_PER_BATCH
              : p.padding.kind == KeyPadding::Kind::per_query ? ATTNBENCH_PADDING_PER_QUERY
                                                              : ATTNBENCH_PADDING_NONE;
  if (a.padding != ATTNBENCH_PADDING_NONE) {
    a.valid_len = p.padding.valid_len.data();
    a.valid_len_count = static_cast<int64_t>(p.padding.valid_len.size());
  }
  a.has_bool_mask = p.bool_mask.enabled ? 1 : 0;
  a.has_bias = p.bias.enabled ? 1 : 0;
  a.cuda_stream = nullptr;
  return a;
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

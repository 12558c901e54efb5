#include "impls/plugin/call_description.hpp"

#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/precision.hpp"
#include "core/score_settings.hpp"

namespace attn::plugin {

attnbench_window abi_window(const Problem& p) {
  // The ABI spells an unbounded side -1 where core uses Window::unbounded.
  const auto side = [](std::int64_t keys) { return keys == Window::unbounded ? std::int64_t{ATTNBENCH_WINDOW_UNBOUNDED} : keys; };
  return {side(p.window.left), side(p.window.right),
          p.window.align == Align::bottom_right ? ATTNBENCH_ALIGN_BOTTOM_RIGHT : ATTNBENCH_ALIGN_TOP_LEFT, 0};
}

CallDescription describe_call(const Problem& p) {
  CallDescription d;
  d.operation = p.operation == Operation::backward ? ATTNBENCH_OP_BACKWARD : ATTNBENCH_OP_FORWARD;
  d.batch = p.batch;
  d.h_q = p.h_q;
  d.h_kv = p.h_kv;
  d.n_q = p.n_q;
  d.n_k = p.n_k;
  d.d_k = p.d_k;
  d.d_v = p.d_v;
  d.scale = p.effective_scale();
  d.softcap = p.softcap.value_or(0.0);
  if (p.dropout.enabled()) {
    d.dropout_p = p.dropout.p;
    d.dropout_seed = dropout_seed(p);
  }
  d.settings = score_settings_of(p);
  d.window = abi_window(p);
  d.key_padding = p.padding.kind == KeyPadding::Kind::per_batch   ? ATTNBENCH_KEY_PADDING_PER_BATCH
                  : p.padding.kind == KeyPadding::Kind::per_query ? ATTNBENCH_KEY_PADDING_PER_QUERY
                                                                  : ATTNBENCH_KEY_PADDING_NONE;
  if (d.key_padding != ATTNBENCH_KEY_PADDING_NONE) d.valid_len = p.padding.valid_len;
  d.accumulation = to_dl(working_dtype(p.numerics()));
  return d;
}

namespace {

// The setting a description names; a name attnbench does not know is a bad description.
const ScoreSetting& setting_named(std::string_view name) {
  if (const ScoreSetting* s = find_score_setting(name)) return *s;
  throw std::invalid_argument(fmt::format("the call's setting '{}' is unknown (known: {})", name, score_setting_names()));
}

}  // namespace

void to_json(nlohmann::json& j, const CallDescription& d) {
  // The settings by name, each in its own JSON type (a seed an unsigned integer, exact).
  nlohmann::json settings = nlohmann::json::object();
  for (const NamedSetting& s : d.settings) settings[std::string(s.setting->name)] = setting_json(*s.setting, s.value);
  j = {{"operation", d.operation},
       {"shape", {d.batch, d.h_q, d.h_kv, d.n_q, d.n_k, d.d_k, d.d_v}},
       {"scale", d.scale},
       {"window", {d.window.left, d.window.right, d.window.align}},
       {"key_padding", d.key_padding},
       {"valid_len", d.valid_len},
       {"softcap", d.softcap},
       {"dropout", {d.dropout_p, d.dropout_seed}},
       {"settings", settings},
       {"packed", {d.max_seqlen_q, d.max_seqlen_k}},
       {"page_size", d.page_size},
       {"accumulation", {d.accumulation.code, d.accumulation.bits, d.accumulation.lanes}}};
}

void from_json(const nlohmann::json& j, CallDescription& d) {
  j.at("operation").get_to(d.operation);
  const auto& s = j.at("shape");
  std::int64_t* dims[] = {&d.batch, &d.h_q, &d.h_kv, &d.n_q, &d.n_k, &d.d_k, &d.d_v};
  for (std::size_t i = 0; i < 7; ++i) s.at(i).get_to(*dims[i]);
  j.at("scale").get_to(d.scale);
  const auto& w = j.at("window");
  d.window = {w.at(0).get<std::int64_t>(), w.at(1).get<std::int64_t>(), w.at(2).get<std::int32_t>(), 0};
  j.at("key_padding").get_to(d.key_padding);
  j.at("valid_len").get_to(d.valid_len);
  j.at("softcap").get_to(d.softcap);
  j.at("dropout").at(0).get_to(d.dropout_p);
  j.at("dropout").at(1).get_to(d.dropout_seed);
  const nlohmann::json& settings = j.at("settings");
  if (!settings.is_object()) throw std::invalid_argument("the call's settings are not an object");
  for (const auto& item : settings.items()) setting_named(item.key());  // none unknown
  d.settings = score_settings_in(settings, "the call's settings");  // in score_modification_rows order
  j.at("packed").at(0).get_to(d.max_seqlen_q);
  j.at("packed").at(1).get_to(d.max_seqlen_k);
  j.at("page_size").get_to(d.page_size);
  const auto& a = j.at("accumulation");
  d.accumulation = {a.at(0).get<std::uint8_t>(), a.at(1).get<std::uint8_t>(), a.at(2).get<std::uint16_t>()};
}

void to_json(nlohmann::json& j, const TensorSpec& t) {
  j = {{"name", t.name}, {"role", t.role},   {"output", t.output},   {"dtype", {t.dtype.code, t.dtype.bits, t.dtype.lanes}},
       {"ndim", t.ndim}, {"shape", t.shape}, {"strides", t.strides}};
}

void from_json(const nlohmann::json& j, TensorSpec& t) {
  j.at("name").get_to(t.name);
  j.at("role").get_to(t.role);
  j.at("output").get_to(t.output);
  const auto& d = j.at("dtype");
  t.dtype = {d.at(0).get<std::uint8_t>(), d.at(1).get<std::uint8_t>(), d.at(2).get<std::uint16_t>()};
  j.at("ndim").get_to(t.ndim);
  j.at("shape").get_to(t.shape);
  j.at("strides").get_to(t.strides);
  if (t.role < 0 || t.role >= ATTNBENCH_ROLE_COUNT) throw std::invalid_argument(fmt::format("tensor {}: role {} is unknown", t.name, t.role));
  if (t.ndim < 1 || t.ndim > 4) throw std::invalid_argument(fmt::format("tensor {}: ndim {} is not 1 to 4", t.name, t.ndim));
}

std::vector<CallRole> call_roles(const Problem& p, bool with_lse) {
  std::vector<CallRole> roles{{Role::q, false}, {Role::k, false}, {Role::v, false}};
  if (p.operation == Operation::backward) {
    roles.push_back({Role::o, false});
    if (with_lse) roles.push_back({Role::lse, false});
    for (CallRole r : {CallRole{Role::d_o, false}, CallRole{Role::dq, true}, CallRole{Role::dk, true}, CallRole{Role::dv, true}}) roles.push_back(r);
  } else {
    roles.push_back({Role::o, true});
    if (with_lse) roles.push_back({Role::lse, true});
  }
  if (p.bool_mask.enabled) roles.push_back({Role::mask, false});
  if (p.bias.enabled) roles.push_back({Role::bias, false});
  if (p.sinks.enabled) roles.push_back({Role::sink, false});
  // A plugin that declares dropout writes its keep mask in every forward call with dropout_p > 0.
  if (p.dropout.enabled() && p.operation == Operation::forward) roles.push_back({Role::keep, true});
  return roles;
}

TensorSpec plan_tensor(const Problem& p, CallRole r, Layout layout) {
  const std::optional<std::int32_t> abi_role = to_abi_role(r.role);
  if (!abi_role) throw std::logic_error(fmt::format("the role {} has no place in the plugin ABI", to_string(r.role)));
  // "out" is the forward output's name in every message a plugin's failure has ever been given.
  TensorSpec t{r.role == Role::o && r.output ? "out" : std::string(to_string(r.role)), *abi_role, r.output};
  const Tensor::Shape queries{p.batch, p.h_q, p.n_q, p.d_k}, keys{p.batch, p.h_kv, p.n_k, p.d_k}, values{p.batch, p.h_kv, p.n_k, p.d_v},
      outputs{p.batch, p.h_q, p.n_q, p.d_v}, scores{p.batch, p.h_q, p.n_q, p.n_k};
  auto data = [&](const Tensor::Shape& shape) {
    t.dtype = to_dl(p.dtype_of(r.role));
    t.shape = shape;
    t.strides = layout_strides(shape, layout);
  };
  switch (r.role) {
    case Role::q:
    case Role::dq: data(queries); break;
    case Role::k:
    case Role::dk: data(keys); break;
    case Role::v:
    case Role::dv: data(values); break;
    case Role::o:
    case Role::d_o: data(outputs); break;
    case Role::lse:
      t.dtype = to_dl(p.dtype_of(Role::lse));
      t.ndim = 3;
      t.shape = {p.batch, p.h_q, p.n_q, 1};
      t.strides = layout_strides(t.shape, Layout::bhsd);
      break;
    case Role::mask:
      t.dtype = dl_bool;
      t.shape = scores;
      t.strides = broadcast_strides(p, p.bool_mask.broadcast);
      break;
    case Role::bias:
      t.dtype = to_dl(p.dtype_of(Role::bias));
      t.shape = scores;
      t.strides = broadcast_strides(p, p.bias.broadcast);
      break;
    case Role::sink:  // [h_q] f32 (the trailing extents of 1 only fill the four every view is stored with)
      t.dtype = to_dl(DType::f32);
      t.ndim = 1;
      t.shape = {p.h_q, 1, 1, 1};
      t.strides = {1, 1, 1, 1};
      break;
    case Role::keep:  // bytes (1 kept, 0 dropped), dense BHSD whatever the layout
      t.dtype = dl_bool;
      t.shape = scores;
      t.strides = layout_strides(scores, Layout::bhsd);
      break;
    default: throw std::logic_error(fmt::format("no tensor of the role {} is handed to plugins", to_string(r.role)));
  }
  return t;
}

std::vector<TensorSpec> plan_tensors(const Problem& p, Layout layout, bool with_lse) {
  std::vector<TensorSpec> specs;
  for (CallRole r : call_roles(p, with_lse)) specs.push_back(plan_tensor(p, r, layout));
  return specs;
}

AbiCall::AbiCall(const CallDescription& d, const std::vector<TensorSpec>& tensors, void* context) : valid_len_(d.valid_len) {
  call_.struct_size = sizeof(attnbench_call);
  call_.operation = d.operation;
  call_.batch = d.batch;
  call_.h_q = d.h_q;
  call_.h_kv = d.h_kv;
  call_.n_q = d.n_q;
  call_.n_k = d.n_k;
  call_.d_k = d.d_k;
  call_.d_v = d.d_v;
  call_.scale = d.scale;
  call_.window = d.window;
  call_.key_padding = d.key_padding;
  call_.valid_len = valid_len_.empty() ? nullptr : valid_len_.data();
  call_.valid_len_count = static_cast<std::int64_t>(valid_len_.size());
  call_.softcap = d.softcap;
  call_.dropout_p = d.dropout_p;
  call_.dropout_seed = d.dropout_seed;
  for (const NamedSetting& s : d.settings) settings_.push_back({s.setting->name.data(), s.value.real, s.value.integer});
  call_.setting_count = static_cast<std::int32_t>(settings_.size());
  call_.settings = settings_.empty() ? nullptr : settings_.data();
  call_.max_seqlen_q = d.max_seqlen_q;
  call_.max_seqlen_k = d.max_seqlen_k;
  call_.page_size = d.page_size;
  call_.accumulation = d.accumulation;
  call_.context = context;
  for (const TensorSpec& t : tensors) {
    const auto r = std::size_t(t.role);
    shapes_[r] = t.shape;
    strides_[r] = t.strides;
    tensors_[r] = attnbench_dl_tensor{nullptr, {ATTNBENCH_DL_CPU, 0}, t.ndim, t.dtype, shapes_[r].data(), strides_[r].data(), 0};
    present_[r] = true;
    pointers_[r] = &tensors_[r];
  }
  call_.tensor_count = ATTNBENCH_ROLE_COUNT;
  call_.tensors = pointers_.data();
}

}  // namespace attn::plugin

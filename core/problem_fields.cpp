// Problem's fields, described once: each row of `fields` gives a field's repro key (and a second
// spelling, if any), whether the repro string always carries it, its printer and parser, its JSON,
// its own validation and its part of the short label. The rows are grouped by the part of Problem
// they belong to (operation, shape, numerics, variant, data), in the order the repro string has
// always printed them. Problem::repro, parse_problem, to_json,
// Problem::label and Problem::validate are loops over the table; only the rules that tie several
// fields together (kv heads dividing query heads, the size limits) are written out after it.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/problem.hpp"

namespace attn {

std::string echoed(std::string_view text) {
  constexpr std::size_t shown = 60;
  if (text.size() <= shown + 20) return fmt::format("'{}'", text);
  return fmt::format("'{}...' ({} characters)", text.substr(0, shown), text.size());
}

namespace {

// Largest extent per dimension and largest tensor we accept: beyond these a typo, not a
// problem anyone can run on one machine.
constexpr std::int64_t max_extent = std::int64_t{1} << 31;
constexpr std::int64_t max_elements = std::int64_t{1} << 36;

std::string format_double(double x) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, x);  // shortest round-trip form
  return std::string(buffer, result.ptr);
}
// An f32 value held in a double, in the shortest form that reads back to the same f32 ("0.1").
std::string format_float(double x) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, float(x));
  return std::string(buffer, result.ptr);
}

// One parser for every numeric field: the whole text must be the number.
template <class Number>
Number parse_number(std::string_view key, std::string_view text, const char* what) {
  Number value{};
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size())
    throw InputError(fmt::format("{}: {} is not {}", key, echoed(text), what));
  return value;
}

std::int64_t parse_int(std::string_view key, std::string_view text) {
  return parse_number<std::int64_t>(key, text, "an integer");
}
std::uint64_t parse_uint(std::string_view key, std::string_view text) {
  return parse_number<std::uint64_t>(key, text, "a non-negative integer");
}
double parse_double(std::string_view key, std::string_view text) { return parse_number<double>(key, text, "a number"); }

std::vector<std::int64_t> parse_int_list(std::string_view key, std::string_view text) {
  std::vector<std::int64_t> values;
  while (true) {
    const auto comma = text.find(',');
    values.push_back(parse_int(key, text.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return values;
}

std::string join(const std::vector<std::int64_t>& values) { return fmt::format("{}", fmt::join(values, ",")); }

Causal parse_causal(std::string_view text) {
  for (Causal c : {Causal::none, Causal::top_left, Causal::bottom_right})
    if (text == to_string(c)) return c;
  throw InputError(fmt::format("causal: unknown value {} (expected none, top_left or bottom_right)", echoed(text)));
}

// "128,0@bottom_right", "inf,4@top_left"
Window parse_window(std::string_view text) {
  const auto comma = text.find(',');
  const auto at = text.find('@');
  if (comma == std::string_view::npos || at == std::string_view::npos || at < comma)
    throw InputError(fmt::format("window: expected LEFT,RIGHT@ALIGN (e.g. 128,0@bottom_right; inf for unbounded), got {}", echoed(text)));
  auto side = [](std::string_view v) { return v == "inf" ? Window::unbounded : parse_int("window", v); };
  Window w{side(text.substr(0, comma)), side(text.substr(comma + 1, at - comma - 1)), Align::top_left};
  const auto align = text.substr(at + 1);
  if (align == "top_left") w.align = Align::top_left;
  else if (align == "bottom_right") w.align = Align::bottom_right;
  else throw InputError(fmt::format("window: unknown alignment {} (expected top_left or bottom_right)", echoed(align)));
  return w;
}

Broadcast parse_broadcast(std::string_view key, std::string_view text) {
  for (Broadcast b : {Broadcast::shared, Broadcast::per_batch, Broadcast::per_head, Broadcast::per_batch_head})
    if (text == to_string(b)) return b;
  throw InputError(fmt::format("{}: unknown broadcast {} (expected shared, b, h or bh)", key, echoed(text)));
}

// "0.5@bh" -> (0.5, per_batch_head)
std::pair<double, Broadcast> parse_generated_mask(std::string_view key, std::string_view text) {
  const auto at = text.find('@');
  if (at == std::string_view::npos)
    throw InputError(fmt::format("{}: expected VALUE@BROADCAST (e.g. 0.5@bh), got {}", key, echoed(text)));
  return {parse_double(key, text.substr(0, at)), parse_broadcast(key, text.substr(at + 1))};
}

void check_extent(const char* name, std::int64_t value) {
  if (value <= 0) throw InputError(fmt::format("{} must be positive (got {})", name, value));
  if (value > max_extent) throw InputError(fmt::format("{} = {} is larger than the limit {}", name, value, max_extent));
}

// Where a field's label text goes: the label is "DTYPE bB hH nN dD MASK REGIME", the mask parts
// joined by '+' ("nomask" when there are none), after the operation when it is not forward.
enum class LabelSlot { none, operation, dtype, batch, heads, lengths, dims, mask, regime };

struct Field {
  std::string_view key;
  std::string_view other_key;  // a second spelling of the same field, exclusive with key; or empty
  bool always;                 // repro() always prints it, so parse_problem requires it
  // "key=value", or empty where the field keeps its default and is not printed.
  std::string (*print)(const Problem&);
  void (*parse)(Problem&, std::string_view key, std::string_view value);
  void (*json)(const Problem&, nlohmann::json&);
  void (*validate)(const Problem&);  // the checks of this field alone (extents are checked first); or null
  LabelSlot slot;
  std::string (*label)(const Problem&);  // this field's label text; empty for none
};

#define ATTN_EXTENT_FIELD(KEY, MEMBER, JSON, SLOT, LABEL)                                                 \
  Field {                                                                                                 \
    KEY, {}, true, [](const Problem& p) { return fmt::format(KEY "={}", p.MEMBER); },                     \
        [](Problem& p, std::string_view k, std::string_view v) { p.MEMBER = parse_int(k, v); },           \
        [](const Problem& p, nlohmann::json& j) { j[JSON] = p.MEMBER; },                                  \
        [](const Problem& p) { check_extent(KEY, p.MEMBER); }, SLOT, LABEL                                \
  }

std::string no_label(const Problem&) { return {}; }

// "f16", or "f32/bf16" when q, k and v differ: what the inputs are, for messages.
std::string input_dtypes(const Problem& p) {
  std::vector<std::string_view> names;
  for (Role r : {Role::q, Role::k, Role::v})
    if (std::find(names.begin(), names.end(), to_string(p.dtype_of(r))) == names.end()) names.push_back(to_string(p.dtype_of(r)));
  return fmt::format("{}", fmt::join(names, "/"));
}

std::string data_role_names() {
  std::vector<std::string_view> names;
  for (Role r : data_roles) names.push_back(to_string(r));
  return fmt::format("{}", fmt::join(names, " "));
}

// "o:f32,v:f16": the roles whose dtype differs from the problem's, in data_roles order.
std::string own_dtypes(const ProblemNumerics& n, std::string_view separator) {
  std::vector<std::string> parts;
  for (Role r : data_roles)
    if (n.dtype_of(r) != n.dtype) parts.push_back(fmt::format("{}:{}", to_string(r), to_string(n.dtype_of(r))));
  return fmt::format("{}", fmt::join(parts, separator));
}


// The order of the rows is the order of the repro string's tokens. A field added since version 1
// (op, dtypes, acc) is printed only when it is not its default, so every older string prints unchanged.
const Field fields[] = {
    // The operation: left out for forward.
    {"op", {}, false,
     [](const Problem& p) { return p.operation == Operation::forward ? std::string() : fmt::format("op={}", to_string(p.operation)); },
     [](Problem& p, std::string_view, std::string_view v) { p.operation = parse_operation(v); },
     [](const Problem& p, nlohmann::json& j) {
       if (p.operation != Operation::forward) j["operation"] = to_string(p.operation);
     },
     nullptr, LabelSlot::operation,
     [](const Problem& p) { return p.operation == Operation::forward ? std::string() : std::string(to_string(p.operation)); }},
    // The shape.
    ATTN_EXTENT_FIELD("b", batch, "b", LabelSlot::batch, [](const Problem& p) { return fmt::format("b{}", p.batch); }),
    ATTN_EXTENT_FIELD("hq", h_q, "h_q", LabelSlot::heads,
                      [](const Problem& p) { return p.h_q == p.h_kv ? fmt::format("h{}", p.h_q) : fmt::format("h{}/{}", p.h_q, p.h_kv); }),
    ATTN_EXTENT_FIELD("hkv", h_kv, "h_kv", LabelSlot::none, no_label),
    ATTN_EXTENT_FIELD("nq", n_q, "n_q", LabelSlot::lengths,
                      [](const Problem& p) { return p.n_q == p.n_k ? fmt::format("n{}", p.n_q) : fmt::format("n{}x{}", p.n_q, p.n_k); }),
    ATTN_EXTENT_FIELD("nk", n_k, "n_k", LabelSlot::none, no_label),
    ATTN_EXTENT_FIELD("dk", d_k, "d_k", LabelSlot::dims,
                      [](const Problem& p) { return p.d_k == p.d_v ? fmt::format("d{}", p.d_k) : fmt::format("d{}/{}", p.d_k, p.d_v); }),
    ATTN_EXTENT_FIELD("dv", d_v, "d_v", LabelSlot::none, no_label),
    // The numerics.
    {"dtype", {}, true, [](const Problem& p) { return fmt::format("dtype={}", to_string(p.dtype)); },
     [](Problem& p, std::string_view, std::string_view v) { p.dtype = parse_dtype(v); },
     [](const Problem& p, nlohmann::json& j) { j["dtype"] = to_string(p.dtype); }, nullptr, LabelSlot::dtype,
     [](const Problem& p) { return std::string(to_string(p.dtype)); }},
    // The roles whose dtype is not `dtype`, e.g. dtypes=o:f32: left out when there are none.
    {"dtypes", {}, false,
     [](const Problem& p) { return p.mixed() ? fmt::format("dtypes={}", own_dtypes(p, ",")) : std::string(); },
     [](Problem& p, std::string_view k, std::string_view v) { p.role_dtypes = parse_role_dtypes(k, v); },
     [](const Problem& p, nlohmann::json& j) {
       if (!p.mixed()) return;
       nlohmann::json& roles = j["role_dtypes"] = nlohmann::json::object();
       for (Role r : data_roles)
         if (p.dtype_of(r) != p.dtype) roles[std::string(to_string(r))] = to_string(p.dtype_of(r));
     },
     [](const Problem& p) {
       for (const auto& [role, dtype] : p.role_dtypes)
         if (!is_data_role(role))
           throw InputError(fmt::format("dtypes: role {} holds no data of the problem, so it takes no dtype of its own (data roles: {})",
                                        to_string(role), data_role_names()));
     },
     LabelSlot::dtype, [](const Problem& p) { return p.mixed() ? own_dtypes(p, "+") : std::string(); }},
    // Left out while it is the inputs' working precision, the only accumulation anything honours.
    {"acc", {}, false,
     [](const Problem& p) {
       return working_dtype(p.numerics()) == default_working_dtype(p.numerics()) ? std::string()
                                                                                 : fmt::format("acc={}", to_string(*p.accumulation));
     },
     [](Problem& p, std::string_view, std::string_view v) { p.accumulation = parse_dtype(v); },
     [](const Problem& p, nlohmann::json& j) {
       if (working_dtype(p.numerics()) != default_working_dtype(p.numerics())) j["accumulation"] = to_string(*p.accumulation);
     },
     [](const Problem& p) {
       const DType inputs_working = default_working_dtype(p.numerics());
       if (working_dtype(p.numerics()) != inputs_working)
         throw InputError(fmt::format("acc={}: {} inputs accumulate in {}, their working precision; no implementation, nor the "
                                      "reference's pass rule, honours another accumulation yet",
                                      to_string(*p.accumulation), input_dtypes(p), to_string(inputs_working)));
     },
     LabelSlot::none, no_label},
    // The variant. A causal window (or none) keeps the token and JSON key it had before windows existed.
    {"causal", "window", true,
     [](const Problem& p) { return fmt::format("{}={}", p.window.as_causal() ? "causal" : "window", to_string(p.window)); },
     [](Problem& p, std::string_view k, std::string_view v) { p.window = k == "causal" ? Window::of(parse_causal(v)) : parse_window(v); },
     [](const Problem& p, nlohmann::json& j) {
       if (p.window.as_causal()) {
         j["causal"] = to_string(p.window);
         return;
       }
       auto side = [](std::int64_t v) { return v == Window::unbounded ? nlohmann::json(nullptr) : nlohmann::json(v); };
       j["window"] = {{"left", side(p.window.left)}, {"right", side(p.window.right)}, {"align", to_string(p.window.align)}};
     },
     [](const Problem& p) {
       for (auto [side, value] : {std::pair{"left", p.window.left}, std::pair{"right", p.window.right}})
         if (value != Window::unbounded && (value < 0 || value > max_extent))
           throw InputError(fmt::format("window: the {} side must lie in [0, {}] or be inf (got {})", side, max_extent, value));
     },
     LabelSlot::mask,
     [](const Problem& p) -> std::string {
       if (p.window == Window::of(Causal::top_left)) return "causal_tl";
       if (p.window == Window::of(Causal::bottom_right)) return "causal_br";
       return p.window.is_none() ? "" : "window" + to_string(p.window);
     }},
    {"pad", "padq", false,
     [](const Problem& p) -> std::string {
       if (p.padding.kind == KeyPadding::Kind::none) return {};
       return fmt::format("{}={}", p.padding.kind == KeyPadding::Kind::per_batch ? "pad" : "padq", join(p.padding.valid_len));
     },
     [](Problem& p, std::string_view k, std::string_view v) {
       p.padding.kind = k == "pad" ? KeyPadding::Kind::per_batch : KeyPadding::Kind::per_query;
       p.padding.valid_len = parse_int_list(k, v);
     },
     [](const Problem& p, nlohmann::json& j) {
       if (p.padding.kind != KeyPadding::Kind::none)
         j["padding"] = {{"kind", p.padding.kind == KeyPadding::Kind::per_batch ? "per_batch" : "per_query"},
                         {"valid_len", p.padding.valid_len}};
     },
     [](const Problem& p) {
       const auto& padding = p.padding;
       switch (padding.kind) {
         case KeyPadding::Kind::none:
           if (!padding.valid_len.empty()) throw InputError("pad: valid lengths given without a padding kind");
           break;
         case KeyPadding::Kind::per_batch:
           if (std::int64_t(padding.valid_len.size()) != p.batch)
             throw InputError(fmt::format("pad: {} valid lengths for b = {} (one per batch expected)", padding.valid_len.size(), p.batch));
           break;
         case KeyPadding::Kind::per_query:
           if (std::int64_t(padding.valid_len.size()) != p.batch * p.n_q)
             throw InputError(
                 fmt::format("padq: {} valid lengths for b * nq = {} (one per query expected)", padding.valid_len.size(), p.batch * p.n_q));
           break;
       }
       for (std::size_t i = 0; i < padding.valid_len.size(); ++i) {
         const auto len = padding.valid_len[i];
         if (len < 0 || len > p.n_k)
           throw InputError(fmt::format("{}: valid length {} at position {} is outside [0, nk = {}]",
                                        padding.kind == KeyPadding::Kind::per_query ? "padq" : "pad", len, i, p.n_k));
       }
     },
     LabelSlot::mask,
     [](const Problem& p) -> std::string {
       return p.padding.kind == KeyPadding::Kind::per_batch ? "pad" : p.padding.kind == KeyPadding::Kind::per_query ? "padq" : "";
     }},
    {"bool", {}, false,
     [](const Problem& p) -> std::string {
       if (!p.bool_mask.enabled) return {};
       return fmt::format("bool={}@{}", format_double(p.bool_mask.keep), to_string(p.bool_mask.broadcast));
     },
     [](Problem& p, std::string_view k, std::string_view v) {
       auto [keep, broadcast] = parse_generated_mask(k, v);
       p.bool_mask = {true, keep, broadcast};
     },
     [](const Problem& p, nlohmann::json& j) {
       if (p.bool_mask.enabled) j["bool_mask"] = {{"keep", p.bool_mask.keep}, {"broadcast", to_string(p.bool_mask.broadcast)}};
     },
     [](const Problem& p) {
       if (p.bool_mask.enabled && !(p.bool_mask.keep >= 0.0 && p.bool_mask.keep <= 1.0))
         throw InputError(fmt::format("bool: keep probability must lie in [0, 1] (got {})", p.bool_mask.keep));
     },
     LabelSlot::mask, [](const Problem& p) { return std::string(p.bool_mask.enabled ? "bool" : ""); }},
    // bias=STD@BROADCAST (drawn) or bias=alibi (ALiBi's linear bias, per head).
    {"bias", {}, false,
     [](const Problem& p) -> std::string {
       if (!p.bias.enabled) return {};
       if (p.bias.kind == BiasSpec::Kind::alibi) return "bias=alibi";
       return fmt::format("bias={}@{}", format_double(p.bias.stddev), to_string(p.bias.broadcast));
     },
     [](Problem& p, std::string_view k, std::string_view v) {
       if (v == "alibi") {
         p.bias = BiasSpec::alibi();
         return;
       }
       if (v.find('@') == std::string_view::npos)
         throw InputError(fmt::format("{}: expected STD@BROADCAST (e.g. 0.5@bh) or alibi, got {}", k, echoed(v)));
       auto [stddev, broadcast] = parse_generated_mask(k, v);
       p.bias = {true, stddev, broadcast};
     },
     [](const Problem& p, nlohmann::json& j) {
       if (!p.bias.enabled) return;
       if (p.bias.kind == BiasSpec::Kind::alibi)
         j["bias"] = {{"kind", "alibi"}, {"broadcast", to_string(p.bias.broadcast)}};
       else
         j["bias"] = {{"stddev", p.bias.stddev}, {"broadcast", to_string(p.bias.broadcast)}};
     },
     [](const Problem& p) {
       if (!p.bias.enabled) return;
       if (p.bias.kind == BiasSpec::Kind::alibi && p.bias.broadcast != Broadcast::per_head)
         throw InputError(fmt::format("bias: ALiBi varies over heads alone (broadcast h), not {}", to_string(p.bias.broadcast)));
       if (p.bias.kind == BiasSpec::Kind::normal && !(std::isfinite(p.bias.stddev) && p.bias.stddev >= 0.0))
         throw InputError(fmt::format("bias: standard deviation must be finite and non-negative (got {})", p.bias.stddev));
     },
     LabelSlot::mask,
     [](const Problem& p) { return std::string(!p.bias.enabled ? "" : p.bias.kind == BiasSpec::Kind::alibi ? "alibi" : "bias"); }},
    {"scale", {}, false, [](const Problem& p) { return p.scale ? "scale=" + format_double(*p.scale) : std::string(); },
     [](Problem& p, std::string_view k, std::string_view v) { p.scale = parse_double(k, v); },
     [](const Problem& p, nlohmann::json& j) {
       j["scale"] = p.effective_scale();
       j["scale_is_default"] = !p.scale.has_value();
     },
     [](const Problem& p) {
       if (p.scale && !(std::isfinite(*p.scale) && *p.scale > 0.0))
         throw InputError(fmt::format("scale must be finite and positive (got {})", *p.scale));
       // The naive yardstick multiplies by it in the working precision: beyond that range it is
       // inf there, and the case would read as an unsound oracle.
       if (p.scale && working_dtype(p.numerics()) != DType::f64 && *p.scale > double(std::numeric_limits<float>::max()))
         throw InputError(fmt::format("scale {:g} is beyond the range of f32, the working precision of {} inputs (at most {:g})", *p.scale,
                                      to_string(p.dtype), double(std::numeric_limits<float>::max())));
     },
     LabelSlot::none, no_label},
    {"softcap", {}, false, [](const Problem& p) { return p.softcap ? "softcap=" + format_double(*p.softcap) : std::string(); },
     [](Problem& p, std::string_view k, std::string_view v) { p.softcap = parse_double(k, v); },
     [](const Problem& p, nlohmann::json& j) {
       if (p.softcap) j["softcap"] = *p.softcap;
     },
     [](const Problem& p) {
       if (p.softcap && !(std::isfinite(*p.softcap) && *p.softcap > 0.0))
         throw InputError(fmt::format("softcap must be finite and positive (got {})", *p.softcap));
       // c tanh(s / c) is computed in the working precision, where c must be a number.
       if (p.softcap && working_dtype(p.numerics()) != DType::f64 && *p.softcap > double(std::numeric_limits<float>::max()))
         throw InputError(fmt::format("softcap {:g} is beyond the range of f32, the working precision of {} inputs (at most {:g})",
                                      *p.softcap, to_string(p.dtype), double(std::numeric_limits<float>::max())));
     },
     LabelSlot::mask, [](const Problem& p) { return p.softcap ? "softcap" + format_double(*p.softcap) : std::string(); }},
    // sink=MEAN (drawn per head, normal around MEAN) or sinks=S0,S1,... (one per query head).
    {"sink", "sinks", false,
     [](const Problem& p) -> std::string {
       if (!p.sinks.enabled) return {};
       if (p.sinks.given.empty()) return "sink=" + format_double(p.sinks.mean);
       std::vector<std::string> values;
       for (double s : p.sinks.given) values.push_back(format_double(s));
       return fmt::format("sinks={}", fmt::join(values, ","));
     },
     [](Problem& p, std::string_view k, std::string_view v) {
       p.sinks = {true, 0.0, {}};
       if (k == "sink") {
         p.sinks.mean = parse_double(k, v);
         return;
       }
       while (true) {  // rounded to f32 as drawn ones are, so that the string reads back the same
         const auto comma = v.find(',');
         p.sinks.given.push_back(double(float(parse_double(k, v.substr(0, comma)))));
         if (comma == std::string_view::npos) break;
         v.remove_prefix(comma + 1);
       }
     },
     [](const Problem& p, nlohmann::json& j) {
       if (!p.sinks.enabled) return;
       j["sinks"] = {{"logits", sink_logits(p)}};
       if (p.sinks.given.empty()) j["sinks"]["drawn_mean"] = p.sinks.mean;
     },
     [](const Problem& p) {
       if (!p.sinks.enabled) return;
       if (!p.sinks.given.empty() && std::int64_t(p.sinks.given.size()) != p.h_q)
         throw InputError(fmt::format("sinks: {} logits for hq = {} (one per query head expected)", p.sinks.given.size(), p.h_q));
       // Every logit must be a finite f32 (the dtype they are passed in), well inside its range.
       const double limit = 1e30;
       if (!(std::fabs(p.sinks.mean) <= limit)) throw InputError(fmt::format("sink: the mean must be finite, at most {:g} in size (got {})", limit, p.sinks.mean));
       for (double s : p.sinks.given)
         if (!(std::fabs(s) <= limit)) throw InputError(fmt::format("sinks: a logit must be finite, at most {:g} in size (got {})", limit, s));
     },
     LabelSlot::mask, [](const Problem& p) { return std::string(p.sinks.enabled ? "sink" : ""); }},
    // dropout=P, and dropout_seed=S when the stream's seed is not the problem's.
    {"dropout", {}, false, [](const Problem& p) { return p.dropout.enabled() ? "dropout=" + format_float(p.dropout.p) : std::string(); },
     // Rounded to f32 (DropoutSpec), so that the string reads back the same.
     [](Problem& p, std::string_view k, std::string_view v) { p.dropout.p = double(float(parse_double(k, v))); },
     [](const Problem& p, nlohmann::json& j) {
       if (p.dropout.enabled()) j["dropout"] = {{"p", p.dropout.p}, {"seed", dropout_seed(p)}};
     },
     [](const Problem& p) {
       if (!(p.dropout.p >= 0.0 && p.dropout.p < 1.0))
         throw InputError(fmt::format("dropout: p must be at least 0 and below 1 (got {}): every weight would be dropped", p.dropout.p));
     },
     LabelSlot::mask, [](const Problem& p) { return p.dropout.enabled() ? "dropout" + format_float(p.dropout.p) : std::string(); }},
    {"dropout_seed", {}, false,
     [](const Problem& p) { return p.dropout.enabled() && p.dropout.seed ? fmt::format("dropout_seed={}", *p.dropout.seed) : std::string(); },
     [](Problem& p, std::string_view k, std::string_view v) { p.dropout.seed = parse_uint(k, v); },
     [](const Problem&, nlohmann::json&) {},  // with dropout's
     [](const Problem& p) {
       if (p.dropout.seed && !p.dropout.enabled())
         throw InputError("dropout_seed: given without dropout=P (a seed of a stream that nothing draws from)");
     },
     LabelSlot::none, no_label},
    // The data.
    {"regime", {}, true, [](const Problem& p) { return fmt::format("regime={}", to_string(p.regime)); },
     [](Problem& p, std::string_view, std::string_view v) { p.regime = parse_regime(v); },
     [](const Problem& p, nlohmann::json& j) { j["regime"] = to_string(p.regime); }, nullptr, LabelSlot::regime,
     [](const Problem& p) { return std::string(to_string(p.regime)); }},
    {"seed", {}, true, [](const Problem& p) { return fmt::format("seed={}", p.seed); },
     [](Problem& p, std::string_view k, std::string_view v) { p.seed = parse_uint(k, v); },
     [](const Problem& p, nlohmann::json& j) { j["seed"] = p.seed; }, nullptr, LabelSlot::none, no_label},
    // Only a plugin sees anything but BHSD: the default is left out of the repro string.
    {"layout", {}, false,
     [](const Problem& p) { return p.layout == Layout::bhsd ? std::string() : fmt::format("layout={}", to_string(p.layout)); },
     [](Problem& p, std::string_view, std::string_view v) { p.layout = parse_layout(v); },
     [](const Problem& p, nlohmann::json& j) { j["layout"] = to_string(p.layout); }, nullptr, LabelSlot::none, no_label},
};

#undef ATTN_EXTENT_FIELD

const Field* find_field(std::string_view key) {
  for (const Field& f : fields)
    if (f.key == key || (!f.other_key.empty() && f.other_key == key)) return &f;
  return nullptr;
}

// Every key ("... causal window pad padq ..."); the always-printed ones, alternatives joined by
// '|' ("... causal|window ..."); a case's form ("b=… ... causal=… ...").
std::string known_keys() {
  std::vector<std::string_view> keys;
  for (const Field& f : fields) {
    keys.push_back(f.key);
    if (!f.other_key.empty()) keys.push_back(f.other_key);
  }
  return fmt::format("{}", fmt::join(keys, " "));
}
std::string required_keys() {
  std::vector<std::string> keys;
  for (const Field& f : fields)
    if (f.always) keys.push_back(f.other_key.empty() ? std::string(f.key) : fmt::format("{}|{}", f.key, f.other_key));
  return fmt::format("{}", fmt::join(keys, " "));
}
std::string case_form() {
  std::vector<std::string> keys;
  for (const Field& f : fields)
    if (f.always) keys.push_back(fmt::format("{}=…", f.key));
  return fmt::format("{}", fmt::join(keys, " "));
}

}  // namespace

std::map<Role, DType> parse_role_dtypes(std::string_view key, std::string_view value) {
  std::map<Role, DType> roles;
  for (std::string_view rest = value; !rest.empty();) {
    const std::string_view item = rest.substr(0, rest.find(','));
    rest = item.size() < rest.size() ? rest.substr(item.size() + 1) : std::string_view();
    const auto colon = item.find(':');
    if (colon == std::string_view::npos)
      throw InputError(fmt::format("{}: {} is not ROLE:DTYPE (e.g. {}=o:f32)", key, echoed(item), key));
    const std::string_view name = item.substr(0, colon);
    const std::optional<Role> role = parse_role(name);
    if (!role || !is_data_role(*role))
      throw InputError(fmt::format("{}: {} is not a role that holds the problem's data (data roles: {})", key, echoed(name), data_role_names()));
    if (!roles.emplace(*role, parse_dtype(item.substr(colon + 1))).second)
      throw InputError(fmt::format("{}: role {} is given twice", key, name));
  }
  return roles;
}

std::string dtype_summary(const ProblemNumerics& numerics) {
  return numerics.mixed() ? fmt::format("{}+{}", to_string(numerics.dtype), own_dtypes(numerics, "+")) : std::string(to_string(numerics.dtype));
}

void Problem::validate() const {
  for (const Field& f : fields)
    if (f.validate) f.validate(*this);
  // The rules that tie fields together.
  if (h_q % h_kv != 0)
    throw InputError(fmt::format("hq = {} is not a multiple of hkv = {} (query head h reads kv head h / (hq / hkv))", h_q, h_kv));
  const std::pair<const char*, double> tensors[] = {
      {"Q", double(batch) * h_q * n_q * d_k}, {"K", double(batch) * h_kv * n_k * d_k},
      {"V", double(batch) * h_kv * n_k * d_v}, {"O", double(batch) * h_q * n_q * d_v}};
  for (auto [name, elements] : tensors)
    if (elements > double(max_elements))
      throw InputError(fmt::format("{} would hold {:.3g} elements, more than the limit {}", name, elements, double(max_elements)));
  if (bool_mask.enabled && broadcast_elements(*this, bool_mask.broadcast) > double(max_elements))
    throw InputError("bool: the mask would be larger than the element limit");
  if (bias.enabled && broadcast_elements(*this, bias.broadcast) > double(max_elements))
    throw InputError("bias: the bias would be larger than the element limit");
}

std::string Problem::repro() const {
  std::string s;
  for (const Field& f : fields)
    if (std::string token = f.print(*this); !token.empty()) s += (s.empty() ? "" : " ") + token;
  return s;
}

std::string Problem::label() const {
  std::map<LabelSlot, std::string> parts;
  for (const Field& f : fields) {
    if (f.slot == LabelSlot::none) continue;
    const std::string text = f.label(*this);
    if (text.empty()) continue;
    std::string& part = parts[f.slot];
    part += (part.empty() ? "" : "+") + text;
  }
  if (parts[LabelSlot::mask].empty()) parts[LabelSlot::mask] = "nomask";
  std::string label;
  for (const auto& [slot, text] : parts)
    if (!text.empty()) label += (label.empty() ? "" : " ") + text;
  return label;
}

Problem parse_problem(std::string_view repro) {
  // A case file may annotate a case after it; no value contains '#', so it always starts a comment.
  repro = repro.substr(0, repro.find('#'));
  Problem p;
  std::map<std::string, std::string, std::less<>> seen;
  std::istringstream stream{std::string(repro)};
  std::string token;
  while (stream >> token) {
    const auto eq = token.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == token.size())
      throw InputError(fmt::format("repro token {} is not key=value", echoed(token)));
    std::string key = token.substr(0, eq);
    std::string value = token.substr(eq + 1);
    if (!seen.emplace(key, value).second) throw InputError(fmt::format("repro key {} appears twice", echoed(key)));
    const Field* f = find_field(key);
    if (f == nullptr) throw InputError(fmt::format("unknown repro key {} (known: {})", echoed(key), known_keys()));
    if (!f->other_key.empty() && seen.contains(f->key) && seen.contains(f->other_key))
      throw InputError(fmt::format("{} and {} are exclusive", f->key, f->other_key));
    f->parse(p, key, value);
  }
  if (seen.empty()) throw InputError(fmt::format("empty repro string (a case is {})", case_form()));
  // Every field repro() always prints must be given: a default filled in silently would run a
  // different case from the one the user meant (a shape or seed mistyped away).
  std::vector<std::string_view> missing;
  for (const Field& f : fields)
    if (f.always && !seen.contains(f.key) && (f.other_key.empty() || !seen.contains(f.other_key))) missing.push_back(f.key);
  if (!missing.empty())
    throw InputError(fmt::format("repro string lacks {} (required: {})", fmt::join(missing, " "), required_keys()));
  p.validate();
  return p;
}

void to_json(nlohmann::json& j, const Problem& p) {
  j = nlohmann::json::object();
  j["repro"] = p.repro();
  for (const Field& f : fields) f.json(p, j);
}

// The repro string is the canonical form; the other fields are for readers.
void from_json(const nlohmann::json& j, Problem& p) {
  if (!j.is_object() || !j.contains("repro") || !j["repro"].is_string())
    throw InputError("problem JSON needs a string field 'repro'");
  p = parse_problem(j["repro"].get<std::string>());
}

}  // namespace attn

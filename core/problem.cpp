#include "core/problem.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/mask.hpp"

namespace attn {
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

// One parser for every numeric field: the whole text must be the number.
template <class Number>
Number parse_number(std::string_view key, std::string_view text, const char* what) {
  Number value{};
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size())
    throw InputError(fmt::format("{}: '{}' is not {}", key, text, what));
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
  throw InputError(fmt::format("causal: unknown value '{}' (expected none, top_left or bottom_right)", text));
}

// "128,0@bottom_right", "inf,4@top_left"
Window parse_window(std::string_view text) {
  const auto comma = text.find(',');
  const auto at = text.find('@');
  if (comma == std::string_view::npos || at == std::string_view::npos || at < comma)
    throw InputError(fmt::format("window: expected LEFT,RIGHT@ALIGN (e.g. 128,0@bottom_right; inf for unbounded), got '{}'", text));
  auto side = [](std::string_view v) { return v == "inf" ? Window::unbounded : parse_int("window", v); };
  Window w{side(text.substr(0, comma)), side(text.substr(comma + 1, at - comma - 1)), Align::top_left};
  const auto align = text.substr(at + 1);
  if (align == "top_left") w.align = Align::top_left;
  else if (align == "bottom_right") w.align = Align::bottom_right;
  else throw InputError(fmt::format("window: unknown alignment '{}' (expected top_left or bottom_right)", align));
  return w;
}

Broadcast parse_broadcast(std::string_view key, std::string_view text) {
  for (Broadcast b : {Broadcast::shared, Broadcast::per_batch, Broadcast::per_head, Broadcast::per_batch_head})
    if (text == to_string(b)) return b;
  throw InputError(fmt::format("{}: unknown broadcast '{}' (expected shared, b, h or bh)", key, text));
}

// "0.5@bh" -> (0.5, per_batch_head)
std::pair<double, Broadcast> parse_generated_mask(std::string_view key, std::string_view text) {
  const auto at = text.find('@');
  if (at == std::string_view::npos)
    throw InputError(fmt::format("{}: expected VALUE@BROADCAST (e.g. 0.5@bh), got '{}'", key, text));
  return {parse_double(key, text.substr(0, at)), parse_broadcast(key, text.substr(at + 1))};
}

// In double: the product may not fit in 64 bits before validation has rejected it.
double mask_elements(const Problem& p, Broadcast b) {
  const bool per_batch = b == Broadcast::per_batch || b == Broadcast::per_batch_head;
  const bool per_head = b == Broadcast::per_head || b == Broadcast::per_batch_head;
  return double(per_batch ? p.batch : 1) * double(per_head ? p.h_q : 1) * double(p.n_q) * double(p.n_k);
}

}  // namespace

std::string_view to_string(Causal causal) {
  switch (causal) {
    case Causal::none: return "none";
    case Causal::top_left: return "top_left";
    case Causal::bottom_right: return "bottom_right";
  }
  return "?";
}

std::string_view to_string(Align align) { return align == Align::top_left ? "top_left" : "bottom_right"; }

std::optional<Causal> Window::as_causal() const {
  if (is_none()) return Causal::none;
  if (is_causal()) return align == Align::top_left ? Causal::top_left : Causal::bottom_right;
  return std::nullopt;
}

std::pair<std::int64_t, std::int64_t> Window::key_range(std::int64_t i, std::int64_t n_q, std::int64_t n_k) const {
  // Validation bounds a finite side by the extent limit, so i + delta -/+ it cannot overflow.
  const std::int64_t diagonal = i + delta(n_q, n_k);
  const std::int64_t lo = left == unbounded ? 0 : std::clamp<std::int64_t>(diagonal - left, 0, n_k);
  const std::int64_t hi = right == unbounded ? n_k : std::clamp<std::int64_t>(diagonal + right + 1, 0, n_k);
  return {lo, std::max(lo, hi)};
}

std::string to_string(const Window& w) {
  if (auto c = w.as_causal()) return std::string(to_string(*c));
  auto side = [](std::int64_t v) { return v == Window::unbounded ? std::string("inf") : std::to_string(v); };
  return fmt::format("{},{}@{}", side(w.left), side(w.right), to_string(w.align));
}

std::string_view to_string(Regime regime) {
  switch (regime) {
    case Regime::diffuse: return "diffuse";
    case Regime::peaked: return "peaked";
    case Regime::saturated: return "saturated";
    case Regime::large: return "large";
    case Regime::sparse_int: return "sparse_int";
    case Regime::uniform01: return "uniform01";
  }
  return "?";
}

std::string_view to_string(Broadcast broadcast) {
  switch (broadcast) {
    case Broadcast::shared: return "shared";
    case Broadcast::per_batch: return "b";
    case Broadcast::per_head: return "h";
    case Broadcast::per_batch_head: return "bh";
  }
  return "?";
}

std::string_view to_string(Layout layout) {
  switch (layout) {
    case Layout::bhsd: return "bhsd";
    case Layout::bshd: return "bshd";
    case Layout::strided: return "strided";
  }
  return "?";
}

const std::vector<Layout>& all_layouts() {
  static const std::vector<Layout> layouts{Layout::bhsd, Layout::bshd, Layout::strided};
  return layouts;
}

Layout parse_layout(std::string_view text) {
  for (Layout l : all_layouts())
    if (text == to_string(l)) return l;
  throw InputError(fmt::format("layout: unknown value '{}' (expected bhsd, bshd or strided)", text));
}

const std::vector<Regime>& all_regimes() {
  static const std::vector<Regime> regimes{Regime::diffuse, Regime::peaked, Regime::saturated,
                                           Regime::large, Regime::sparse_int, Regime::uniform01};
  return regimes;
}

Regime parse_regime(std::string_view text) {
  for (Regime r : all_regimes())
    if (text == to_string(r)) return r;
  throw InputError(fmt::format("regime: unknown value '{}' (expected diffuse, peaked, saturated, large, sparse_int or uniform01)", text));
}

double Problem::effective_scale() const {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d_k));
}

bool Problem::has_mask() const {
  return !window.is_none() || padding.kind != KeyPadding::Kind::none || bool_mask.enabled;
}

void Problem::validate() const {
  const std::pair<const char*, std::int64_t> extents[] = {
      {"b", batch}, {"hq", h_q}, {"hkv", h_kv}, {"nq", n_q}, {"nk", n_k}, {"dk", d_k}, {"dv", d_v}};
  for (auto [name, value] : extents) {
    if (value <= 0) throw InputError(fmt::format("{} must be positive (got {})", name, value));
    if (value > max_extent) throw InputError(fmt::format("{} = {} is larger than the limit {}", name, value, max_extent));
  }
  if (h_q % h_kv != 0)
    throw InputError(fmt::format("hq = {} is not a multiple of hkv = {} (query head h reads kv head h / (hq / hkv))", h_q, h_kv));
  const std::pair<const char*, double> tensors[] = {
      {"Q", double(batch) * h_q * n_q * d_k}, {"K", double(batch) * h_kv * n_k * d_k},
      {"V", double(batch) * h_kv * n_k * d_v}, {"O", double(batch) * h_q * n_q * d_v}};
  for (auto [name, elements] : tensors)
    if (elements > double(max_elements))
      throw InputError(fmt::format("{} would hold {:.3g} elements, more than the limit {}", name, elements, double(max_elements)));
  for (auto [side, value] : {std::pair{"left", window.left}, std::pair{"right", window.right}})
    if (value != Window::unbounded && (value < 0 || value > max_extent))
      throw InputError(fmt::format("window: the {} side must lie in [0, {}] or be inf (got {})", side, max_extent, value));
  if (scale && !(std::isfinite(*scale) && *scale > 0.0))
    throw InputError(fmt::format("scale must be finite and positive (got {})", *scale));

  switch (padding.kind) {
    case KeyPadding::Kind::none:
      if (!padding.valid_len.empty()) throw InputError("pad: valid lengths given without a padding kind");
      break;
    case KeyPadding::Kind::per_batch:
      if (std::int64_t(padding.valid_len.size()) != batch)
        throw InputError(fmt::format("pad: {} valid lengths for b = {} (one per batch expected)", padding.valid_len.size(), batch));
      break;
    case KeyPadding::Kind::per_query:
      if (std::int64_t(padding.valid_len.size()) != batch * n_q)
        throw InputError(fmt::format("padq: {} valid lengths for b * nq = {} (one per query expected)", padding.valid_len.size(), batch * n_q));
      break;
  }
  for (std::size_t i = 0; i < padding.valid_len.size(); ++i) {
    const auto len = padding.valid_len[i];
    if (len < 0 || len > n_k)
      throw InputError(fmt::format("{}: valid length {} at position {} is outside [0, nk = {}]",
                                   padding.kind == KeyPadding::Kind::per_query ? "padq" : "pad", len, i, n_k));
  }
  if (bool_mask.enabled) {
    if (!(bool_mask.keep >= 0.0 && bool_mask.keep <= 1.0))
      throw InputError(fmt::format("bool: keep probability must lie in [0, 1] (got {})", bool_mask.keep));
    if (mask_elements(*this, bool_mask.broadcast) > double(max_elements))
      throw InputError("bool: the mask would be larger than the element limit");
  }
  if (bias.enabled) {
    if (!(std::isfinite(bias.stddev) && bias.stddev >= 0.0))
      throw InputError(fmt::format("bias: standard deviation must be finite and non-negative (got {})", bias.stddev));
    if (mask_elements(*this, bias.broadcast) > double(max_elements))
      throw InputError("bias: the bias would be larger than the element limit");
  }
}

std::string Problem::repro() const {
  std::string s = fmt::format("b={} hq={} hkv={} nq={} nk={} dk={} dv={} dtype={} {}={}", batch, h_q, h_kv, n_q,
                              n_k, d_k, d_v, to_string(dtype), window.as_causal() ? "causal" : "window", to_string(window));
  if (padding.kind == KeyPadding::Kind::per_batch) s += " pad=" + join(padding.valid_len);
  if (padding.kind == KeyPadding::Kind::per_query) s += " padq=" + join(padding.valid_len);
  if (bool_mask.enabled) s += fmt::format(" bool={}@{}", format_double(bool_mask.keep), to_string(bool_mask.broadcast));
  if (bias.enabled) s += fmt::format(" bias={}@{}", format_double(bias.stddev), to_string(bias.broadcast));
  if (scale) s += " scale=" + format_double(*scale);
  s += fmt::format(" regime={} seed={}", to_string(regime), seed);
  if (layout != Layout::bhsd) s += fmt::format(" layout={}", to_string(layout));
  return s;
}

std::string Problem::label() const {
  std::string mask;
  auto add = [&](std::string part) { mask += (mask.empty() ? "" : "+") + part; };
  if (window == Window::of(Causal::top_left)) add("causal_tl");
  else if (window == Window::of(Causal::bottom_right)) add("causal_br");
  else if (!window.is_none()) add("window" + to_string(window));
  if (padding.kind == KeyPadding::Kind::per_batch) add("pad");
  if (padding.kind == KeyPadding::Kind::per_query) add("padq");
  if (bool_mask.enabled) add("bool");
  if (bias.enabled) add("bias");
  if (mask.empty()) mask = "nomask";
  const std::string heads = h_q == h_kv ? std::to_string(h_q) : fmt::format("{}/{}", h_q, h_kv);
  const std::string dims = d_k == d_v ? std::to_string(d_k) : fmt::format("{}/{}", d_k, d_v);
  const std::string lengths = n_q == n_k ? std::to_string(n_q) : fmt::format("{}x{}", n_q, n_k);
  return fmt::format("{} b{} h{} n{} d{} {} {}", to_string(dtype), batch, heads, lengths, dims, mask, to_string(regime));
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
      throw InputError(fmt::format("repro token '{}' is not key=value", token));
    std::string key = token.substr(0, eq);
    std::string value = token.substr(eq + 1);
    if (!seen.emplace(key, value).second) throw InputError(fmt::format("repro key '{}' appears twice", key));
    if (key == "b") p.batch = parse_int(key, value);
    else if (key == "hq") p.h_q = parse_int(key, value);
    else if (key == "hkv") p.h_kv = parse_int(key, value);
    else if (key == "nq") p.n_q = parse_int(key, value);
    else if (key == "nk") p.n_k = parse_int(key, value);
    else if (key == "dk") p.d_k = parse_int(key, value);
    else if (key == "dv") p.d_v = parse_int(key, value);
    else if (key == "dtype") p.dtype = parse_dtype(value);
    else if (key == "causal" || key == "window") {
      if (seen.contains(key == "causal" ? "window" : "causal")) throw InputError("causal and window are exclusive");
      p.window = key == "causal" ? Window::of(parse_causal(value)) : parse_window(value);
    }
    else if (key == "pad" || key == "padq") {
      if (p.padding.kind != KeyPadding::Kind::none) throw InputError("pad and padq are exclusive");
      p.padding.kind = key == "pad" ? KeyPadding::Kind::per_batch : KeyPadding::Kind::per_query;
      p.padding.valid_len = parse_int_list(key, value);
    } else if (key == "bool") {
      auto [keep, broadcast] = parse_generated_mask(key, value);
      p.bool_mask = {true, keep, broadcast};
    } else if (key == "bias") {
      auto [stddev, broadcast] = parse_generated_mask(key, value);
      p.bias = {true, stddev, broadcast};
    } else if (key == "scale") p.scale = parse_double(key, value);
    else if (key == "regime") p.regime = parse_regime(value);
    else if (key == "seed") p.seed = parse_uint(key, value);
    else if (key == "layout") p.layout = parse_layout(value);
    else
      throw InputError(fmt::format("unknown repro key '{}' (known: b hq hkv nq nk dk dv dtype causal window pad padq bool bias scale regime seed layout)", key));
  }
  if (seen.empty()) throw InputError("empty repro string (a case is b=… hq=… hkv=… nq=… nk=… dk=… dv=… dtype=… causal=… regime=… seed=…)");
  // Every field repro() always prints must be given: a default filled in silently would run a
  // different case from the one the user meant (a shape or seed mistyped away).
  std::vector<std::string_view> missing;
  for (std::string_view key : {"b", "hq", "hkv", "nq", "nk", "dk", "dv", "dtype", "causal", "regime", "seed"})
    if (!seen.contains(key) && !(key == "causal" && seen.contains("window"))) missing.push_back(key);
  if (!missing.empty())
    throw InputError(fmt::format("repro string lacks {} (required: b hq hkv nq nk dk dv dtype causal|window regime seed)", fmt::join(missing, " ")));
  p.validate();
  return p;
}

std::int64_t Problem::visible_pairs() const {
  return Mask(*this).count_visible();
}

double Problem::flops() const {
  return 2.0 * double(visible_pairs()) * double(d_k + d_v);
}

double Problem::flops_published() const {
  const double full = 2.0 * double(batch) * double(h_q) * double(n_q) * double(n_k) * double(d_k + d_v);
  if (window.is_none()) return full;
  return window.is_causal() ? full / 2.0 : flops();
}

double Problem::bytes_min() const {
  const double e = bytes_per_element(dtype);
  double bytes = e * double(batch) * (h_q * n_q * d_k + h_kv * n_k * (d_k + d_v) + h_q * n_q * d_v);
  if (bool_mask.enabled) bytes += mask_elements(*this, bool_mask.broadcast);  // one byte per flag
  if (bias.enabled) bytes += e * mask_elements(*this, bias.broadcast);
  bytes += 8.0 * double(padding.valid_len.size());
  return bytes;
}

void to_json(nlohmann::json& j, const Problem& p) {
  j = nlohmann::json{{"repro", p.repro()}, {"b", p.batch}, {"h_q", p.h_q}, {"h_kv", p.h_kv}, {"n_q", p.n_q},
                     {"n_k", p.n_k}, {"d_k", p.d_k}, {"d_v", p.d_v}, {"dtype", to_string(p.dtype)},
                     {"scale", p.effective_scale()},
                     {"scale_is_default", !p.scale.has_value()}, {"regime", to_string(p.regime)}, {"seed", p.seed},
                     {"layout", to_string(p.layout)}};
  if (p.window.as_causal()) {
    j["causal"] = to_string(p.window);
  } else {
    auto side = [](std::int64_t v) { return v == Window::unbounded ? nlohmann::json(nullptr) : nlohmann::json(v); };
    j["window"] = {{"left", side(p.window.left)}, {"right", side(p.window.right)}, {"align", to_string(p.window.align)}};
  }
  if (p.padding.kind != KeyPadding::Kind::none)
    j["padding"] = {{"kind", p.padding.kind == KeyPadding::Kind::per_batch ? "per_batch" : "per_query"},
                    {"valid_len", p.padding.valid_len}};
  if (p.bool_mask.enabled) j["bool_mask"] = {{"keep", p.bool_mask.keep}, {"broadcast", to_string(p.bool_mask.broadcast)}};
  if (p.bias.enabled) j["bias"] = {{"stddev", p.bias.stddev}, {"broadcast", to_string(p.bias.broadcast)}};
}

// The repro string is the canonical form; the other fields are for readers.
void from_json(const nlohmann::json& j, Problem& p) {
  if (!j.is_object() || !j.contains("repro") || !j["repro"].is_string())
    throw InputError("problem JSON needs a string field 'repro'");
  p = parse_problem(j["repro"].get<std::string>());
}

}  // namespace attn

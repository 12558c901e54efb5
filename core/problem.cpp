#include "core/problem.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/mask.hpp"
#include "core/rng.hpp"

namespace attn {

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
  // Validation bounds a finite side by the extent limit (2^31), so i + delta -/+ it cannot overflow.
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

bool varies_over_batch(Broadcast b) { return b == Broadcast::per_batch || b == Broadcast::per_batch_head; }
bool varies_over_head(Broadcast b) { return b == Broadcast::per_head || b == Broadcast::per_batch_head; }

BroadcastStrides broadcast_strides(Broadcast b, std::int64_t h_q, std::int64_t n_q, std::int64_t n_k) {
  const std::int64_t head = varies_over_head(b) ? n_q * n_k : 0;
  return {varies_over_batch(b) ? (varies_over_head(b) ? h_q : 1) * n_q * n_k : 0, head};
}

// In double: the product may not fit in 64 bits before validation has rejected it.
double broadcast_elements(const Problem& p, Broadcast b) {
  return double(varies_over_batch(b) ? p.batch : 1) * double(varies_over_head(b) ? p.h_q : 1) * double(p.n_q) * double(p.n_k);
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
  throw InputError(fmt::format("layout: unknown value {} (expected bhsd, bshd or strided)", echoed(text)));
}

const std::vector<Regime>& all_regimes() {
  static const std::vector<Regime> regimes{Regime::diffuse, Regime::peaked, Regime::saturated,
                                           Regime::large, Regime::sparse_int, Regime::uniform01};
  return regimes;
}

Regime parse_regime(std::string_view text) {
  for (Regime r : all_regimes())
    if (text == to_string(r)) return r;
  throw InputError(fmt::format("regime: unknown value {} (expected diffuse, peaked, saturated, large, sparse_int or uniform01)", echoed(text)));
}

std::string_view to_string(Operation operation) { return operation == Operation::forward ? "forward" : "backward"; }

Operation parse_operation(std::string_view text) {
  for (Operation o : {Operation::forward, Operation::backward})
    if (text == to_string(o)) return o;
  throw InputError(fmt::format("op: unknown operation {} (expected forward or backward)", echoed(text)));
}

bool is_data_role(Role role) { return std::find(data_roles.begin(), data_roles.end(), role) != data_roles.end(); }

DType ProblemNumerics::dtype_of(Role role) const {
  if (role == Role::lse) return working_dtype(*this);
  if (!is_data_role(role)) throw std::invalid_argument(fmt::format("dtype_of: role {} holds no data of the problem", to_string(role)));
  const auto it = role_dtypes.find(role);
  return it == role_dtypes.end() ? dtype : it->second;
}

bool ProblemNumerics::mixed() const {
  return std::any_of(data_roles.begin(), data_roles.end(), [&](Role r) { return dtype_of(r) != dtype; });
}

std::vector<Role> data_roles_of(const Problem& p) {
  std::vector<Role> roles{Role::q, Role::k, Role::v};
  if (p.bias.enabled) roles.push_back(Role::bias);
  roles.push_back(Role::o);
  if (p.operation == Operation::backward)
    for (Role r : {Role::d_o, Role::dq, Role::dk, Role::dv}) roles.push_back(r);
  return roles;
}

DType default_working_dtype(const ProblemNumerics& numerics) {
  for (Role input : {Role::q, Role::k, Role::v, Role::d_o})
    if (working_dtype(numerics.dtype_of(input)) == DType::f64) return DType::f64;
  return DType::f32;
}

DType working_dtype(const ProblemNumerics& numerics) { return numerics.accumulation.value_or(default_working_dtype(numerics)); }

bool ProblemNumerics::operator==(const ProblemNumerics& o) const {
  return dtype == o.dtype && working_dtype(*this) == working_dtype(o) &&
         std::all_of(data_roles.begin(), data_roles.end(), [&](Role r) { return dtype_of(r) == o.dtype_of(r); });
}

double alibi_slope(std::int64_t head, std::int64_t heads) {
  std::int64_t power = 1;
  while (power * 2 <= heads) power *= 2;
  // std::exp2 of an exact quotient: the slopes of a power of two are exact powers of two.
  if (head < power) return std::exp2(-8.0 * double(head + 1) / double(power));
  return std::exp2(-8.0 * double(2 * (head - power) + 1) / double(2 * power));
}

std::int64_t alibi_delta(const Problem& p) { return p.window.is_none() ? p.n_k - p.n_q : p.window.delta(p.n_q, p.n_k); }

std::uint64_t dropout_seed(const Problem& p) { return p.dropout.seed.value_or(p.seed); }

std::vector<double> sink_logits(const Problem& p) {
  if (!p.sinks.enabled) return {};
  if (!p.sinks.given.empty()) return p.sinks.given;
  std::vector<double> sinks(static_cast<std::size_t>(p.h_q));
  Rng rng(p.seed, stream_sinks);
  for (double& s : sinks) s = double(float(p.sinks.mean + rng.normal()));
  return sinks;
}

double Problem::effective_scale() const {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d_k));
}

bool Problem::has_mask() const {
  return !window.is_none() || padding.kind != KeyPadding::Kind::none || bool_mask.enabled;
}

std::int64_t Problem::visible_pairs() const {
  return Mask(*this).count_visible();
}

double Problem::flops() const {
  const double per_pair = operation == Operation::backward ? double(3 * d_k + 2 * d_v) : double(d_k + d_v);
  return 2.0 * double(visible_pairs()) * per_pair;
}

double Problem::flops_published() const {
  const double full = 2.0 * double(batch) * double(h_q) * double(n_q) * double(n_k) * double(d_k + d_v);
  const double forward = window.is_none() ? full : window.is_causal() ? full / 2.0 : 2.0 * double(visible_pairs()) * double(d_k + d_v);
  return operation == Operation::backward ? 2.5 * forward : forward;
}

double Problem::bytes_min() const {
  // Powers of two times integers below 2^53: the sum is exact, whatever the dtypes.
  auto e = [&](Role role) { return double(bytes_per_element(dtype_of(role))); };
  double bytes = double(batch) * (e(Role::q) * double(h_q * n_q * d_k) + e(Role::k) * double(h_kv * n_k * d_k) +
                                  e(Role::v) * double(h_kv * n_k * d_v) + e(Role::o) * double(h_q * n_q * d_v));
  if (operation == Operation::backward)  // dO and the LSE (in the working dtype) in; dQ, dK, dV out
    bytes += double(batch) * (e(Role::d_o) * double(h_q * n_q * d_v) + double(bytes_per_element(working_dtype(numerics()))) * double(h_q * n_q) +
                              e(Role::dq) * double(h_q * n_q * d_k) + e(Role::dk) * double(h_kv * n_k * d_k) + e(Role::dv) * double(h_kv * n_k * d_v));
  if (bool_mask.enabled) bytes += broadcast_elements(*this, bool_mask.broadcast);  // one byte per flag
  if (bias.enabled) bytes += e(Role::bias) * broadcast_elements(*this, bias.broadcast);
  bytes += 8.0 * double(padding.valid_len.size());
  return bytes;
}

}  // namespace attn

#include "impls/capability_space.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "core/mask.hpp"

namespace attn {
namespace {

template <class T>
bool contains(const std::vector<T>& values, const T& value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

bool head_dim_declared(const Capabilities& caps, std::int64_t d) {
  if (!caps.head_dims.empty()) return contains(caps.head_dims, d);
  return d >= caps.min_head_dim && d <= caps.max_head_dim;
}

// The declared head dimension nearest to d (the larger on a tie: a tail past a tile is the edge
// worth keeping).
std::int64_t nearest_head_dim(const Capabilities& caps, std::int64_t d) {
  if (caps.head_dims.empty()) return std::clamp(d, caps.min_head_dim, std::max(caps.min_head_dim, caps.max_head_dim));
  std::int64_t best = caps.head_dims.front();
  for (std::int64_t h : caps.head_dims)
    if (std::llabs(h - d) < std::llabs(best - d) || (std::llabs(h - d) == std::llabs(best - d) && h > best)) best = h;
  return best;
}

// f32 first: the dtype nearly every kernel declares, and the one whose yardstick is tightest
// after f64. Otherwise the nearest in width. `declared` is not empty.
DType nearest_dtype(const std::vector<DType>& declared, DType from) {
  if (contains(declared, DType::f32)) return DType::f32;
  const std::vector<DType> order = from == DType::f64 ? std::vector<DType>{DType::f16, DType::bf16}
                                   : from == DType::f16 ? std::vector<DType>{DType::bf16, DType::f64}
                                                        : std::vector<DType>{DType::f16, DType::f64};
  for (DType d : order)
    if (contains(declared, d)) return d;
  return declared.front();
}

const std::vector<DType>& own_dtypes(const Capabilities& caps, Role role) {
  static const std::vector<DType> none;
  const auto own = caps.role_dtypes.find(role);
  return own == caps.role_dtypes.end() ? none : own->second;
}

// Every dtype a role accepts: its own and every data role's.
std::vector<DType> accepted_dtypes(const Capabilities& caps, Role role) {
  std::vector<DType> all = caps.dtypes;
  for (DType d : own_dtypes(caps, role))
    if (!contains(all, d)) all.push_back(d);
  return all;
}

// A role in the problem's dtype needs it accepted; a role in a dtype of its own needs that one
// declared for the role itself. `dtypes` lists the dtypes of one-dtype problems: a kernel that
// declares f16 and bf16 is not thereby declaring f16 queries with bf16 keys.
bool role_dtype_declared(const Capabilities& caps, const Problem& p, Role role) {
  const DType d = p.dtype_of(role);
  return d == p.dtype ? accepts_dtype(caps, role, d) : contains(own_dtypes(caps, role), d);
}

// The problem's dtype to a declared one (f32 where declared), then each data role whose dtype is
// not declared for it: one in a dtype of its own to the nearest the role declares for itself, if
// any, else to the problem's dtype where the role accepts it, else to the nearest it declares.
void project_dtypes(const Capabilities& caps, Problem& p) {
  if (!caps.dtypes.empty() && !contains(caps.dtypes, p.dtype)) p.dtype = nearest_dtype(caps.dtypes, p.dtype);
  for (Role role : data_roles_of(p)) {
    if (role_dtype_declared(caps, p, role)) continue;
    // A role in a dtype of its own keeps one where it declares any (the case is about mixing).
    const std::vector<DType>& own = own_dtypes(caps, role);
    if (p.dtype_of(role) != p.dtype && !own.empty())
      p.role_dtypes[role] = nearest_dtype(own, p.dtype_of(role));
    else if (accepts_dtype(caps, role, p.dtype))
      p.role_dtypes.erase(role);
    else if (!own.empty())
      p.role_dtypes[role] = nearest_dtype(own, p.dtype_of(role));
  }
  std::erase_if(p.role_dtypes, [&](const auto& entry) { return entry.second == p.dtype; });
}

// A window without a lower bound (causal) and per-batch padding written as per-query valid
// lengths: the same visible keys. A window with a lower bound cannot be folded; it is kept.
void fold_into_query_padding(Problem& p) {
  if (p.window.left != Window::unbounded) return;
  std::vector<std::int64_t> lengths;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < p.n_q; ++i) {
      std::int64_t len = p.n_k;
      if (p.padding.kind == KeyPadding::Kind::per_batch) len = p.padding.valid_len[std::size_t(b)];
      if (p.padding.kind == KeyPadding::Kind::per_query) len = p.padding.valid_len[std::size_t(b * p.n_q + i)];
      len = std::min(len, p.window.key_range(i, p.n_q, p.n_k).second);
      lengths.push_back(len);
    }
  p.window = Window{};
  p.padding = {KeyPadding::Kind::per_query, std::move(lengths)};
}

// Per-query lengths as one length per batch: batch b keeps the length of its row b mod n_q (row
// n_q / 2 when there is one batch), so a case whose first rows are fully masked keeps a fully
// masked batch beside a short one rather than becoming all masked.
void per_query_to_per_batch(Problem& p) {
  std::vector<std::int64_t> lengths;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t row = p.batch == 1 ? p.n_q / 2 : b % p.n_q;
    lengths.push_back(p.padding.valid_len[std::size_t(b * p.n_q + row)]);
  }
  p.padding = {KeyPadding::Kind::per_batch, std::move(lengths)};
}

void drop_padding(Problem& p) { p.padding = {}; }

// Sequence lengths changed: per-query lengths follow their rows (the last row repeats), every
// length is clamped to the new n_k.
void refit_padding(Problem& p, std::int64_t old_n_q) {
  if (p.padding.kind == KeyPadding::Kind::per_query && old_n_q != p.n_q) {
    std::vector<std::int64_t> lengths;
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t i = 0; i < p.n_q; ++i) lengths.push_back(p.padding.valid_len[std::size_t(b * old_n_q + std::min(i, old_n_q - 1))]);
    p.padding.valid_len = std::move(lengths);
  }
  for (auto& len : p.padding.valid_len) len = std::min(len, p.n_k);
}

void project_masks(const Capabilities& caps, Problem& p) {
  const MaskSupport& m = caps.masks;
  if (p.padding.kind == KeyPadding::Kind::per_query && !m.padding_per_query) {
    if (m.padding_per_batch)
      per_query_to_per_batch(p);
    else
      drop_padding(p);
  }
  if (p.padding.kind == KeyPadding::Kind::per_batch && !m.padding_per_batch) {
    if (m.padding_per_query)
      fold_into_query_padding(p);
    else
      drop_padding(p);
  }
  if (!p.window.as_causal() && !m.windows) {
    if (p.window.left == Window::unbounded && m.padding_per_query)
      fold_into_query_padding(p);  // the same visible keys
    else if (p.window.right == 0)
      p.window = Window{Window::unbounded, 0, p.window.align};  // the causal window it narrows
    else
      p.window = Window{};
  }
  const bool tl = p.window == Window::of(Causal::top_left), br = p.window == Window::of(Causal::bottom_right);
  if ((tl && !m.causal_top_left) || (br && !m.causal_bottom_right)) {
    const bool other = tl ? m.causal_bottom_right : m.causal_top_left;
    const Window swapped = Window::of(tl ? Causal::bottom_right : Causal::top_left);
    if (other && p.n_q == p.n_k)
      p.window = swapped;  // the same visible keys
    else if (m.padding_per_query)
      fold_into_query_padding(p);  // the same visible keys
    else if (other)
      p.window = swapped;  // still causal, the diagonal moved
    else
      p.window = Window{};
  }
  if (p.bool_mask.enabled && !m.bool_mask) p.bool_mask = {};
  if (p.bias.enabled && !m.bias) p.bias = {};
  if (p.window.is_none() && !m.non_causal && (m.causal_bottom_right || m.causal_top_left)) {
    p.window = Window::of(m.causal_bottom_right ? Causal::bottom_right : Causal::top_left);
    refit_padding(p, p.n_q);
  }
}

// What changed between a case and its projection, for the console and the JSON.
std::string describe_changes(const Problem& from, const Problem& to) {
  std::vector<std::string> parts;
  if (!(from.numerics() == to.numerics()))
    parts.push_back(fmt::format("dtype {} -> {}", dtype_summary(from.numerics()), dtype_summary(to.numerics())));
  if (from.layout != to.layout) parts.push_back(fmt::format("layout {} -> {}", to_string(from.layout), to_string(to.layout)));
  if (from.n_q != to.n_q || from.n_k != to.n_k) parts.push_back(fmt::format("n {}x{} -> {}x{}", from.n_q, from.n_k, to.n_q, to.n_k));
  if (from.h_kv != to.h_kv) parts.push_back(fmt::format("h_kv {} -> {}", from.h_kv, to.h_kv));
  if (from.d_k != to.d_k || from.d_v != to.d_v) parts.push_back(fmt::format("d {}/{} -> {}/{}", from.d_k, from.d_v, to.d_k, to.d_v));
  if (!(from.window == to.window)) parts.push_back(fmt::format("{} {} -> {}", from.window.as_causal() && to.window.as_causal() ? "causal" : "window", to_string(from.window), to_string(to.window)));
  if (!(from.padding == to.padding)) {
    auto kind = [](const KeyPadding& k) {
      return k.kind == KeyPadding::Kind::none ? "none" : k.kind == KeyPadding::Kind::per_batch ? "per batch" : "per query";
    };
    parts.push_back(fmt::format("padding {} -> {}", kind(from.padding), kind(to.padding)));
  }
  if (from.scale != to.scale) parts.push_back(fmt::format("scale {:g} -> the default", from.effective_scale()));
  if (from.bool_mask.enabled && !to.bool_mask.enabled) parts.push_back("boolean mask dropped");
  if (from.bias.enabled && !to.bias.enabled) parts.push_back("bias dropped");
  return fmt::format("{}", fmt::join(parts, ", "));
}

// A scale other than the default 1/sqrt(d_k) (an explicit scale equal to it is the default).
bool explicit_scale(const Problem& p) { return p.scale && *p.scale != 1.0 / std::sqrt(double(p.d_k)); }

bool accepted(const Implementation& impl, const Capabilities& caps, const Problem& p) {
  try {
    p.validate();
  } catch (const std::exception&) {
    return false;
  }
  return covers(caps, p).ok && impl.supports(p).ok;
}

}  // namespace

bool accepts_dtype(const Capabilities& caps, Role role, DType dtype) { return contains(accepted_dtypes(caps, role), dtype); }

bool declares_mixed_dtypes(const Capabilities& caps) {
  // A role's own dtype d mixes with a problem dtype other than d.
  for (const auto& [role, own] : caps.role_dtypes)
    for (DType d : own)
      if (std::any_of(caps.dtypes.begin(), caps.dtypes.end(), [&](DType problem) { return problem != d; })) return true;
  return false;
}

Support covers(const Capabilities& caps, const Problem& p) {
  if (!contains(caps.operations, p.operation)) {
    std::vector<std::string_view> declared;
    for (Operation o : caps.operations) declared.push_back(to_string(o));
    return Support::no(fmt::format("operation {} not declared (declared: {})", to_string(p.operation),
                                   declared.empty() ? "no operation" : fmt::format("{}", fmt::join(declared, ", "))));
  }
  for (Role role : data_roles_of(p)) {
    if (role_dtype_declared(caps, p, role)) continue;
    if (!p.mixed()) return Support::no(fmt::format("dtype {} not declared", to_string(p.dtype)));
    const DType d = p.dtype_of(role);
    if (d == p.dtype) {
      std::vector<std::string_view> accepted;
      for (DType a : accepted_dtypes(caps, role)) accepted.push_back(to_string(a));
      return Support::no(fmt::format("dtype {} of {} not declared ({} accepts: {})", to_string(d), to_string(role), to_string(role),
                                     accepted.empty() ? "none" : fmt::format("{}", fmt::join(accepted, ", "))));
    }
    // A role in a dtype of its own: the problem's dtypes say nothing about it.
    std::vector<std::string_view> own;
    for (DType o : own_dtypes(caps, role)) own.push_back(to_string(o));
    const std::string_view problem = to_string(p.dtype);
    return Support::no(fmt::format("dtype {} of {} in {} {} problem not declared ({} takes the problem's dtype; on its own: {})", to_string(d),
                                   to_string(role), problem.front() == 'f' ? "an" : "a", problem, to_string(role),
                                   own.empty() ? "none declared" : fmt::format("{}", fmt::join(own, ", "))));
  }
  const std::string dims = caps.head_dims.empty() ? fmt::format("{} to {}", caps.min_head_dim, caps.max_head_dim)
                                                  : fmt::format("{}", fmt::join(caps.head_dims, ", "));
  if (!head_dim_declared(caps, p.d_k)) return Support::no(fmt::format("head dim d_k={} not declared (declared: {})", p.d_k, dims));
  if (!head_dim_declared(caps, p.d_v)) return Support::no(fmt::format("head dim d_v={} not declared (declared: {})", p.d_v, dims));
  if (p.d_k != p.d_v && !caps.different_dk_dv) return Support::no("d_k != d_v not declared");
  if (p.h_kv != p.h_q && !caps.gqa) return Support::no("GQA/MQA (h_kv < h_q) not declared");
  const MaskSupport& m = caps.masks;
  if (p.window == Window::of(Causal::top_left) && !m.causal_top_left) return Support::no("causal top-left mask not declared");
  if (p.window == Window::of(Causal::bottom_right) && !m.causal_bottom_right) return Support::no("causal bottom-right mask not declared");
  if (!p.window.as_causal() && !m.windows) return Support::no(fmt::format("window {} not declared", to_string(p.window)));
  if (p.padding.kind == KeyPadding::Kind::per_batch && !m.padding_per_batch) return Support::no("key padding per batch not declared");
  if (p.padding.kind == KeyPadding::Kind::per_query && !m.padding_per_query) return Support::no("key padding per query not declared");
  if (p.bool_mask.enabled && !m.bool_mask) return Support::no("boolean mask not declared");
  if (p.bias.enabled && !m.bias) return Support::no("additive bias not declared");
  if (p.window.is_none() && !m.non_causal) return Support::no("no causal mask: causal masks only declared");
  if (!caps.custom_scale && explicit_scale(p))
    return Support::no(fmt::format("scale {:g} not declared (the default 1/sqrt(d_k) only)", *p.scale));
  if (!contains(caps.layouts, p.layout)) return Support::no(fmt::format("layout {} not declared", to_string(p.layout)));
  for (ScoreModification m : score_modifications_of(p))
    if (!contains(caps.score_modifications, m)) return Support::no(fmt::format("{} not declared", describe(m)));
  return Support::yes();
}

std::optional<Problem> project_onto(const Capabilities& caps, const Problem& problem) {
  const bool declares_dtypes = !caps.dtypes.empty() || std::any_of(caps.role_dtypes.begin(), caps.role_dtypes.end(), [](const auto& e) { return !e.second.empty(); });
  if (!declares_dtypes || caps.layouts.empty() || !contains(caps.operations, problem.operation)) return std::nullopt;
  Problem p = problem;
  project_dtypes(caps, p);
  if (!contains(caps.layouts, p.layout)) p.layout = caps.layouts.front();
  if (!caps.gqa) p.h_kv = p.h_q;
  if (!head_dim_declared(caps, p.d_k)) p.d_k = nearest_head_dim(caps, p.d_k);
  if (!head_dim_declared(caps, p.d_v)) p.d_v = nearest_head_dim(caps, p.d_v);
  if (!caps.different_dk_dv) p.d_v = p.d_k;
  if (!caps.custom_scale && explicit_scale(p)) p.scale.reset();
  project_masks(caps, p);
  return p;
}

Resolution resolve(const Implementation& impl, const Problem& problem) {
  const Capabilities caps = impl.describe();
  Resolution r;
  const Support own = covers(caps, problem);
  if (own.ok) {
    const Support s = impl.supports(problem);
    if (s.ok) {
      r.problem = problem;
      return r;
    }
    r.skip_reason = s.reason;
  } else {
    r.skip_reason = own.reason;
  }
  if (!contains(caps.operations, problem.operation)) return r;  // never projected (see Capabilities::operations)
  const std::optional<Problem> base = project_onto(caps, problem);
  if (!base) {
    r.skip_reason += " (it declares no dtype or no layout)";
    return r;
  }
  // Cumulative: each step keeps the ones before it, and the record says every step in order (a
  // top-left case at n_q != n_k moved to bottom-right onto the declared space, then run at equal
  // lengths, would otherwise read as a top-left case run bottom-right).
  struct Candidate {
    Problem problem;
    std::string steps;
  };
  std::vector<Candidate> candidates{{*base, describe_changes(problem, *base)}};
  auto then = [&](const char* step, auto change) {
    Problem next = candidates.back().problem;
    change(next);
    if (next == candidates.back().problem) return;
    const std::string& before = candidates.back().steps;
    std::string steps = fmt::format("{}{}{}: {}", before, before.empty() ? "" : "; then ", step, describe_changes(candidates.back().problem, next));
    candidates.push_back({std::move(next), std::move(steps)});
  };
  then("equal sequence lengths", [](Problem& p) {
    const std::int64_t old_n_q = p.n_q;
    p.n_q = p.n_k = std::max(p.n_q, p.n_k);
    refit_padding(p, old_n_q);
  });
  then("MHA", [](Problem& p) { p.h_kv = p.h_q; });
  then("equal head dims", [](Problem& p) { p.d_v = p.d_k; });
  then("one dtype", [](Problem& p) { p.role_dtypes.clear(); });
  then("f32", [&](Problem& p) {
    if (contains(caps.dtypes, DType::f32)) p.dtype = DType::f32;
  });
  then("no bias", [](Problem& p) { p.bias = {}; });
  then("no boolean mask", [](Problem& p) { p.bool_mask = {}; });
  then("no padding", [](Problem& p) { p.padding = {}; });
  then("no window", [](Problem& p) { p.window = Window{}; });
  for (const Candidate& candidate : candidates)
    if (accepted(impl, caps, candidate.problem)) {
      r.problem = candidate.problem;
      r.projected = true;
      r.changes = candidate.steps;
      return r;
    }
  return r;
}

std::vector<std::string> features_of(const Problem& p) {
  std::vector<std::string> f{fmt::format("dtype:{}", to_string(p.dtype)), fmt::format("layout:{}", to_string(p.layout)),
                             fmt::format("regime:{}", to_string(p.regime))};
  if (p.window == Window::of(Causal::top_left)) f.emplace_back("causal_top_left");
  if (p.window == Window::of(Causal::bottom_right)) f.emplace_back("causal_bottom_right");
  if (!p.window.as_causal()) f.emplace_back("window");
  if (p.padding.kind == KeyPadding::Kind::per_batch) f.emplace_back(p.batch > 1 ? "padding_per_batch_b>1" : "padding_per_batch_b=1");
  if (p.padding.kind == KeyPadding::Kind::per_query) f.emplace_back("padding_per_query");
  if (p.bool_mask.enabled) f.emplace_back("bool_mask");
  if (p.bias.enabled) f.emplace_back("bias");
  if (p.h_kv == 1 && p.h_q > 1) f.emplace_back("mqa");
  if (p.h_kv > 1 && p.h_kv < p.h_q) f.emplace_back("gqa");
  if (p.d_k != p.d_v) f.emplace_back("dk_ne_dv");
  if (p.scale) f.emplace_back("custom_scale");
  for (ScoreModification m : score_modifications_of(p)) f.emplace_back(to_string(m));
  if (p.mixed()) f.emplace_back("mixed_dtypes");
  if (p.n_q != p.n_k) f.emplace_back("nq_ne_nk");
  if (p.n_k == 1) f.emplace_back("nk_1");
  if (p.n_k > 128) f.emplace_back("long_rows");
  // Counting fully masked rows walks every row; bounded so a huge case stays cheap.
  if (p.has_mask() && double(p.batch) * double(p.h_q) * double(p.n_q) <= 1e5) {
    const Mask mask(p);
    bool found = false;
    for (std::int64_t b = 0; b < p.batch && !found; ++b)
      for (std::int64_t h = 0; h < p.h_q && !found; ++h)
        for (std::int64_t i = 0; i < p.n_q && !found; ++i) found = mask.row_fully_masked(b, h, i);
    if (found) f.emplace_back("fully_masked_rows");
  }
  return f;
}

std::vector<std::string> declared_features(const Capabilities& caps) {
  std::vector<std::string> f;
  for (DType d : caps.dtypes) f.push_back(fmt::format("dtype:{}", to_string(d)));
  for (Layout l : caps.layouts) f.push_back(fmt::format("layout:{}", to_string(l)));
  for (Regime r : all_regimes()) f.push_back(fmt::format("regime:{}", to_string(r)));
  const MaskSupport& m = caps.masks;
  if (m.causal_top_left) f.emplace_back("causal_top_left");
  if (m.causal_bottom_right) f.emplace_back("causal_bottom_right");
  if (m.padding_per_batch) f.emplace_back("padding_per_batch_b>1");
  if (m.padding_per_query) f.emplace_back("padding_per_query");
  if (m.bool_mask) f.emplace_back("bool_mask");
  if (m.bias) f.emplace_back("bias");
  if (m.windows) f.emplace_back("window");
  if (caps.gqa) f.emplace_back("mqa"), f.emplace_back("gqa");
  if (caps.different_dk_dv) f.emplace_back("dk_ne_dv");
  if (caps.custom_scale) f.emplace_back("custom_scale");
  for (ScoreModification m : caps.score_modifications) f.emplace_back(to_string(m));
  if (declares_mixed_dtypes(caps)) f.emplace_back("mixed_dtypes");
  f.emplace_back("nq_ne_nk");
  f.emplace_back("nk_1");
  f.emplace_back("long_rows");
  if (m.causal_bottom_right || m.padding_per_batch || m.padding_per_query || m.bool_mask) f.emplace_back("fully_masked_rows");
  return f;
}

}  // namespace attn

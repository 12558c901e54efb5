// The problems a property draws (gen_problem) and the spaces they are drawn from, narrowed to
// what an implementation declares (narrowed_to, admits).
#include "properties/property_suite.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "core/inputs.hpp"
#include "core/mask.hpp"
#include "core/metrics.hpp"
#include "core/pass_rule.hpp"
#include "core/rng.hpp"
#include "impls/capability_space.hpp"
#include "properties/property_detail.hpp"

namespace attn {
namespace property_detail {

double work_of(const Problem& p) {
  return double(p.batch * p.h_q) * double(p.n_q) * double(p.n_k) * double(p.d_k + p.d_v);
}

bool masks_keys(const MaskSupport& m) {
  return m.causal_top_left || m.causal_bottom_right || m.padding_per_batch || m.padding_per_query || m.bool_mask;
}

}  // namespace property_detail

using property_detail::masks_keys;
using property_detail::work_of;

namespace {

// ---------------------------------------------------------------------------------------------
// Problems

// Every draw happens at this RapidCheck size. RapidCheck passes size 0 until a case passes, and
// its integer draws (inRange) scale their range by the size: at size 0 every draw is the range's
// minimum, so a property whose first problems are refused would see the same refused problem
// until it gave up. At the nominal size (100) inRange covers its whole range.
constexpr int fixed_size = 100;

// True with the given percentage; shrinks towards false, so a shrunk counterexample has fewer
// features than the drawn one.
bool chance(int percent) { return *rc::gen::inRange(0, 100) >= 100 - percent; }

// Sizes: random small values mixed with the edges where tiled code breaks: 1, 2, the tiles of
// cpu_blocked (384-query and 512-key tiles, 12-row blocks, 32-key panels) and one either side,
// and primes.
rc::Gen<std::int64_t> gen_length(bool large) {
  const std::int64_t small_max = large ? 700 : 48;
  return rc::gen::weightedOneOf<std::int64_t>({
      {6, rc::gen::inRange<std::int64_t>(1, small_max + 1)},
      {3, rc::gen::element<std::int64_t>(1, 2, 11, 12, 13, 31, 32, 33, 97)},
      {1, rc::gen::element<std::int64_t>(383, 384, 385, 511, 512, 513, 1013)},
  });
}

bool head_dim_in(const ProblemSpace& space, std::int64_t d) {
  if (!space.head_dims.empty()) return std::find(space.head_dims.begin(), space.head_dims.end(), d) != space.head_dims.end();
  return d >= space.min_head_dim && d <= space.max_head_dim;
}

// The head dim of the space at most d (its smallest when none is): where a drawn or narrowed
// dimension lands.
std::int64_t head_dim_at_most(const ProblemSpace& space, std::int64_t d) {
  if (space.head_dims.empty()) return std::clamp(d, space.min_head_dim, std::max(space.min_head_dim, space.max_head_dim));
  std::int64_t best = *std::min_element(space.head_dims.begin(), space.head_dims.end());
  for (std::int64_t h : space.head_dims)
    if (h <= d) best = std::max(best, h);
  return best;
}

rc::Gen<std::int64_t> gen_head_dim(const ProblemSpace& space) {
  if (!space.head_dims.empty()) return rc::gen::elementOf(space.head_dims);
  const auto drawn = rc::gen::weightedOneOf<std::int64_t>({
      {3, rc::gen::inRange<std::int64_t>(1, 81)},
      {2, rc::gen::element<std::int64_t>(1, 2, 7, 15, 16, 17, 31, 32, 33, 64)},
      {1, rc::gen::element<std::int64_t>(96, 128, 256)},
  });
  return rc::gen::map(drawn, [space](std::int64_t d) { return head_dim_at_most(space, d); });
}

template <class T>
T pick(const std::vector<T>& options) {
  return *rc::gen::elementOf(options);
}

template <class T>
bool contains(const std::vector<T>& values, const T& value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

bool some_key_masked(const Problem& p) {
  if (!p.has_mask()) return false;
  const Mask mask(p);
  return mask.count_visible() < p.batch * p.h_q * p.n_q * p.n_k;
}

// A problem with no masked key, given one that a declared mask masks: the first declared of
// per-batch padding (batch 0 loses its last key), per-query padding, causal, a boolean mask.
void force_a_masked_key(const MaskSupport& m, Problem& p) {
  p.n_q = std::max<std::int64_t>(p.n_q, 2);
  p.n_k = std::max<std::int64_t>(p.n_k, 2);
  if (m.padding_per_batch && p.padding.kind != KeyPadding::Kind::per_query) {
    p.padding.kind = KeyPadding::Kind::per_batch;
    p.padding.valid_len.assign(std::size_t(p.batch), p.n_k);
    p.padding.valid_len[0] = p.n_k - 1;
  } else if (m.padding_per_query) {
    p.padding.kind = KeyPadding::Kind::per_query;
    p.padding.valid_len.assign(std::size_t(p.batch * p.n_q), p.n_k);
    p.padding.valid_len[0] = p.n_k - 1;
  } else if (m.causal_top_left) {
    p.window = Window::of(Causal::top_left);
  } else if (m.causal_bottom_right) {
    p.window = Window::of(Causal::bottom_right);
  } else if (m.bool_mask) {
    p.bool_mask = {true, 0.5, Broadcast::shared};
  }
}

}  // namespace

ProblemSpace narrowed_to(const ProblemSpace& space, const Capabilities& caps) {
  ProblemSpace s = space;
  s.dtypes.clear();
  for (DType d : space.dtypes)
    if (contains(caps.dtypes, d)) s.dtypes.push_back(d);
  s.role_dtypes.clear();
  for (const auto& [role, own] : caps.role_dtypes) {
    const auto drawn = space.role_dtypes.find(role);
    if (drawn == space.role_dtypes.end()) continue;
    for (DType d : drawn->second)
      if (contains(own, d)) s.role_dtypes[role].push_back(d);
  }
  s.layouts.clear();
  for (Layout l : space.layouts)
    if (contains(caps.layouts, l)) s.layouts.push_back(l);
  MaskSupport& m = s.masks;
  const MaskSupport& c = caps.masks;
  m.causal_top_left = m.causal_top_left && c.causal_top_left;
  m.causal_bottom_right = m.causal_bottom_right && c.causal_bottom_right;
  m.padding_per_batch = m.padding_per_batch && c.padding_per_batch;
  m.padding_per_query = m.padding_per_query && c.padding_per_query;
  m.bool_mask = m.bool_mask && c.bool_mask;
  m.bias = m.bias && c.bias;
  m.windows = m.windows && c.windows;
  std::erase_if(s.score_modifications, [&](ScoreModification modification) { return !lists(caps, modification); });
  s.gqa = space.gqa && caps.gqa;
  s.different_dk_dv = space.different_dk_dv && caps.different_dk_dv;
  if (!caps.head_dims.empty()) {
    s.head_dims.clear();
    for (std::int64_t d : caps.head_dims)
      if (head_dim_in(space, d)) s.head_dims.push_back(d);
    // Only head dims beyond the property's range are declared: the smallest of them, the work
    // budget then shortens the sequences.
    if (s.head_dims.empty()) s.head_dims.push_back(*std::min_element(caps.head_dims.begin(), caps.head_dims.end()));
  } else {
    s.min_head_dim = std::max(space.min_head_dim, caps.min_head_dim);
    s.max_head_dim = std::max(s.min_head_dim, std::min(space.max_head_dim, caps.max_head_dim));
  }
  return s;
}

bool admits(const ProblemSpace& space, const Problem& p) {
  const MaskSupport& m = space.masks;
  if (!contains(space.dtypes, p.dtype) || !contains(space.layouts, p.layout) || !contains(space.regimes, p.regime)) return false;
  if (p.operation != space.operation) return false;
  for (Role role : data_roles)
    if (const DType d = p.dtype_of(role); d != p.dtype) {
      const auto own = space.role_dtypes.find(role);
      if (own == space.role_dtypes.end() || !contains(own->second, d)) return false;
    }
  if (!head_dim_in(space, p.d_k) || !head_dim_in(space, p.d_v)) return false;
  if ((p.d_k != p.d_v && !space.different_dk_dv) || (p.h_kv != p.h_q && !space.gqa)) return false;
  if ((p.window == Window::of(Causal::top_left) && !m.causal_top_left) || (p.window == Window::of(Causal::bottom_right) && !m.causal_bottom_right)) return false;
  const bool beyond_causal = !p.window.as_causal();
  if (beyond_causal && !m.windows) return false;
  const bool alibi = p.bias.enabled && p.bias.kind == BiasSpec::Kind::alibi;
  if ((space.needs_window && !beyond_causal) || (space.needs_alibi && !alibi) || (space.needs_sink && !p.sinks.enabled) ||
      (space.needs_dropout && !p.dropout.enabled()))
    return false;
  if ((p.padding.kind == KeyPadding::Kind::per_batch && !m.padding_per_batch) ||
      (p.padding.kind == KeyPadding::Kind::per_query && !m.padding_per_query))
    return false;
  if ((p.bool_mask.enabled && !m.bool_mask) || (p.bias.enabled && !m.bias) || (p.scale && !space.custom_scale)) return false;
  for (ScoreModification modification : score_modifications_of(p))
    if (!contains(space.score_modifications, modification)) return false;
  if (space.needs_causal && p.window.is_none()) return false;
  if (space.needs_gqa && p.h_kv == p.h_q) return false;
  if (space.needs_mask && !some_key_masked(p)) return false;
  return true;
}

rc::Gen<Problem> gen_problem(const ProblemSpace& space) {
  return rc::gen::resize(fixed_size, rc::gen::exec([space] {
    const double budget = space.max_work * (space.large ? 16 : 1);
    const MaskSupport& masks = space.masks;
    Problem p;
    // Dimensions first.
    p.n_q = *gen_length(space.large);
    p.n_k = *gen_length(space.large);
    if (chance(25)) p.n_k = p.n_q;  // self-attention's square problems, which some kernels alone support
    if (space.needs_mask || space.needs_causal || space.needs_window) p.n_q = std::max<std::int64_t>(p.n_q, 2), p.n_k = std::max<std::int64_t>(p.n_k, 2);
    p.d_k = *gen_head_dim(space);
    p.d_v = space.different_dk_dv ? *rc::gen::weightedOneOf<std::int64_t>({{2, rc::gen::just(p.d_k)}, {1, gen_head_dim(space)}}) : p.d_k;
    // Wide heads on long sequences would blow the budget: narrow them first, then shorten.
    while (double(p.n_q) * double(p.n_k) * double(p.d_k + p.d_v) > budget && (p.d_k > 8 || p.d_v > 8)) {
      const std::int64_t d_k = head_dim_at_most(space, std::max<std::int64_t>(1, p.d_k / 2));
      const std::int64_t d_v = p.d_v == p.d_k ? d_k : head_dim_at_most(space, std::max<std::int64_t>(1, p.d_v / 2));
      if (d_k == p.d_k && d_v == p.d_v) break;  // the smallest declared head dims
      p.d_k = d_k, p.d_v = d_v;
    }
    while (double(p.n_q) * double(p.n_k) * double(p.d_k + p.d_v) > budget && std::max(p.n_q, p.n_k) > 1)
      (p.n_q > p.n_k ? p.n_q : p.n_k) /= 2;
    const double per_head = double(p.n_q) * double(p.n_k) * double(p.d_k + p.d_v);
    const auto heads_budget = std::max<std::int64_t>(1, std::int64_t(budget / per_head));
    p.h_kv = *rc::gen::inRange<std::int64_t>(1, 4);
    // GQA ratios; 3 with h_kv 1 is MQA over 3 heads.
    const std::int64_t ratio = space.needs_gqa ? *rc::gen::element<std::int64_t>(2, 4, 3)
                               : space.gqa     ? *rc::gen::element<std::int64_t>(1, 1, 2, 4, 3)
                                               : 1;
    p.h_q = p.h_kv * ratio;
    while (p.h_q > heads_budget && p.h_kv > 1) p.h_q = --p.h_kv * ratio;
    if (p.h_q > heads_budget) {
      p.h_kv = 1;
      p.h_q = space.needs_gqa ? 2 : 1;
    }
    while (work_of(p) > budget && std::max(p.n_q, p.n_k) > 2) (p.n_q > p.n_k ? p.n_q : p.n_k) /= 2;

    // Masks, each optional, intersecting when several are drawn. Padding is drawn before the
    // batch: per-batch lengths need b > 1 to catch a kernel that applies batch 0's to all.
    std::vector<Causal> causals;
    if (!space.needs_causal) causals = {Causal::none, Causal::none};
    if (masks.causal_top_left) causals.push_back(Causal::top_left);
    if (masks.causal_bottom_right) causals.push_back(Causal::bottom_right);
    if (!causals.empty()) p.window = Window::of(pick(causals));
    // A window beyond causal (Mistral's sliding window, local attention): left sides at the
    // edges (0: the diagonal alone; 1) and inside; right sides 0, a few keys, unbounded.
    if (masks.windows && (space.needs_window || chance(15))) {
      const std::int64_t left = *rc::gen::element<std::int64_t>(0, 1, 5, std::max<std::int64_t>(1, p.n_k / 3), Window::unbounded);
      const std::int64_t right = left == Window::unbounded ? *rc::gen::element<std::int64_t>(1, 3) : *rc::gen::element<std::int64_t>(0, 0, 2, Window::unbounded);
      p.window = Window{left, right, *rc::gen::element(Align::top_left, Align::bottom_right)};
    }
    std::vector<KeyPadding::Kind> paddings;
    if (masks.padding_per_batch) paddings.push_back(KeyPadding::Kind::per_batch);
    if (masks.padding_per_query) paddings.push_back(KeyPadding::Kind::per_query);
    if (!paddings.empty() && chance(space.wants_fully_masked ? 60 : 35)) p.padding.kind = pick(paddings);
    const std::int64_t max_batch = std::clamp<std::int64_t>(heads_budget / p.h_q, 1, 3);
    const std::int64_t min_batch = p.padding.kind == KeyPadding::Kind::per_batch ? std::min<std::int64_t>(2, max_batch) : 1;
    p.batch = *rc::gen::inRange<std::int64_t>(min_batch, max_batch + 1);
    if (p.padding.kind != KeyPadding::Kind::none) {
      const std::int64_t count = p.padding.kind == KeyPadding::Kind::per_query ? p.batch * p.n_q : p.batch;
      const auto valid = rc::gen::weightedOneOf<std::int64_t>({{4, rc::gen::inRange<std::int64_t>(0, p.n_k + 1)},
                                                               {1, rc::gen::element<std::int64_t>(0, p.n_k, 1)}});
      for (std::int64_t i = 0; i < count; ++i) p.padding.valid_len.push_back(std::min(*valid, p.n_k));
    }
    const std::vector<Broadcast> broadcasts{Broadcast::shared, Broadcast::per_batch, Broadcast::per_head, Broadcast::per_batch_head};
    if (masks.bool_mask && chance(20)) {
      p.bool_mask.enabled = true;
      p.bool_mask.keep = *rc::gen::element(0.1, 0.5, 0.9);
      p.bool_mask.broadcast = pick(broadcasts);
    }
    if (masks.bias && chance(20)) {
      p.bias.enabled = true;
      p.bias.stddev = *rc::gen::element(0.5, 1.0, 4.0);
      p.bias.broadcast = pick(broadcasts);
    }
    if (masks.bias && (space.needs_alibi || chance(8))) p.bias = BiasSpec::alibi();
    if (space.wants_fully_masked && p.padding.kind == KeyPadding::Kind::none && masks.causal_bottom_right) p.window = Window::of(Causal::bottom_right);
    if (space.wants_fully_masked) {
      // Fully masked rows: more queries than keys under bottom-right, or a batch with no key.
      if (p.window == Window::of(Causal::bottom_right) && p.n_q <= p.n_k && p.n_q > 1) {
        p.n_k = std::max<std::int64_t>(1, p.n_q / 2);
        for (auto& valid : p.padding.valid_len) valid = std::min(valid, p.n_k);
      } else if (p.padding.kind != KeyPadding::Kind::none) {
        p.padding.valid_len[std::size_t(*rc::gen::inRange<std::int64_t>(0, std::int64_t(p.padding.valid_len.size())))] = 0;
      }
    }
    if (space.needs_mask && !some_key_masked(p)) force_a_masked_key(masks, p);
    // The scale: mostly the default, else far below it, far above it, or plain 1 (a kernel that
    // ignores the caller's scale, or hard-codes one, shows on these).
    p.regime = pick(space.regimes);
    if (space.custom_scale) {
      const int which = *rc::gen::inRange(0, 12);
      const double root = std::sqrt(double(p.d_k));
      if (which == 9) p.scale = 0.05 / root;
      if (which == 10) p.scale = 2.0 / root;
      if (which == 11) p.scale = 1.0;
      // The large regime draws q.k near the overflow before scaling: a scale above the default
      // would push the scores themselves past it, where no kernel in the dtype can be finite.
      if (p.regime == Regime::large && p.scale && *p.scale > 1.0 / root) p.scale = 0.05 / root;
    }
    // Drawn only where it may be: the other implementations' draws stay the same.
    if (contains(space.score_modifications, ScoreModification::softcap) && chance(25)) p.softcap = *rc::gen::element(0.5, 2.0, 8.0, 50.0);
    // Sinks around the scores, below them, and far above them (rows that mostly attend to the sink).
    if (contains(space.score_modifications, ScoreModification::sink) && (space.needs_sink || chance(25)))
      p.sinks = {true, *rc::gen::element(-4.0, 0.0, 2.0, 40.0), {}};
    if (contains(space.score_modifications, ScoreModification::dropout) && (space.needs_dropout || chance(25)))
      p.dropout.p = double(float(*rc::gen::element(0.1, 0.5, 0.9)));
    p.layout = pick(space.layouts);
    p.dtype = pick(space.dtypes);
    // No draw at all where no role has a dtype of its own: a one-dtype kernel's problems stay the same.
    if (!space.role_dtypes.empty() && chance(25)) {
      std::vector<Role> roles;
      for (const auto& [role, own] : space.role_dtypes)
        if (!own.empty()) roles.push_back(role);
      if (!roles.empty()) {
        const Role role = pick(roles);
        p.role_dtypes[role] = pick(space.role_dtypes.at(role));
        std::erase_if(p.role_dtypes, [&](const auto& entry) { return entry.second == p.dtype; });
      }
    }
    // Then the data: the seed fixes every input bit.
    p.seed = *rc::gen::inRange<std::uint64_t>(0, 1000000);
    p.operation = space.operation;
    return p;
  }));
}

}  // namespace attn

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
#include <rapidcheck/detail/Property.h>
#include <rapidcheck/detail/Results.h>
#include <rapidcheck/detail/TestListener.h>
#include <rapidcheck/detail/TestMetadata.h>
#include <rapidcheck/detail/TestParams.h>

#include "core/inputs.hpp"
#include "core/mask.hpp"
#include "core/metrics.hpp"
#include "core/pass_rule.hpp"
#include "core/rng.hpp"
#include "impls/capability_space.hpp"
#include "impls/cpu_naive/cpu_naive.hpp"
#include "reference/reference.hpp"

namespace attn {
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

double work_of(const Problem& p) {
  return double(p.batch * p.h_q) * double(p.n_q) * double(p.n_k) * double(p.d_k + p.d_v);
}

bool some_key_masked(const Problem& p) {
  if (!p.has_mask()) return false;
  const Mask mask(p);
  return mask.count_visible() < p.batch * p.h_q * p.n_q * p.n_k;
}

bool masks_keys(const MaskSupport& m) {
  return m.causal_top_left || m.causal_bottom_right || m.padding_per_batch || m.padding_per_query || m.bool_mask;
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
  if (!head_dim_in(space, p.d_k) || !head_dim_in(space, p.d_v)) return false;
  if ((p.d_k != p.d_v && !space.different_dk_dv) || (p.h_kv != p.h_q && !space.gqa)) return false;
  if ((p.window == Window::of(Causal::top_left) && !m.causal_top_left) || (p.window == Window::of(Causal::bottom_right) && !m.causal_bottom_right)) return false;
  if ((p.padding.kind == KeyPadding::Kind::per_batch && !m.padding_per_batch) ||
      (p.padding.kind == KeyPadding::Kind::per_query && !m.padding_per_query))
    return false;
  if ((p.bool_mask.enabled && !m.bool_mask) || (p.bias.enabled && !m.bias) || (p.scale && !space.custom_scale)) return false;
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
    if (space.needs_mask || space.needs_causal) p.n_q = std::max<std::int64_t>(p.n_q, 2), p.n_k = std::max<std::int64_t>(p.n_k, 2);
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
    p.layout = pick(space.layouts);
    p.dtype = pick(space.dtypes);
    // Then the data: the seed fixes every input bit.
    p.seed = *rc::gen::inRange<std::uint64_t>(0, 1000000);
    return p;
  }));
}

namespace {

// ---------------------------------------------------------------------------------------------
// Running an implementation

struct Outputs {
  Tensor out, lse, weights;
  std::string error;  // what it threw, if it did
};

Outputs run(const Implementation& impl, const Problem& p, const CaseInputs& in) {
  const Capabilities caps = impl.describe();
  Outputs o{make_output(p), make_lse(p), caps.returns_weights ? make_weights(p) : Tensor{}, {}};
  try {
    std::vector<std::byte> workspace(impl.workspace_bytes(p));
    impl.run(RunArgs{p, in, o.out, caps.returns_lse ? &o.lse : nullptr, caps.returns_weights ? &o.weights : nullptr, workspace});
  } catch (const std::exception& e) {
    o.error = fmt::format("run threw: {}", e.what());
  }
  return o;
}

// Extra randomness a check needs, drawn from the problem's seed (never from RapidCheck), so the
// repro string alone reruns it.
Rng check_rng(const Problem& p, std::uint64_t purpose) { return Rng(p.seed, 0xC4EC0000 + purpose); }

std::int64_t out_index(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t c) {
  return ((b * p.h_q + h) * p.n_q + i) * p.d_v + c;
}

// First element where the rows of two outputs differ in bits, or "".
std::string first_bit_difference(const Problem& p, const Tensor& expected, const Tensor& got, std::int64_t b, std::int64_t h,
                                  std::int64_t i_expected, std::int64_t i_got, const char* what) {
  for (std::int64_t c = 0; c < p.d_v; ++c) {
    const auto e = out_index(p, b, h, i_expected, c), g = out_index(p, b, h, i_got, c);
    if (expected.bits(e) != got.bits(g))
      return fmt::format("{}: output b={} h={} i={} c={} is {} (was {})", what, b, h, i_got, c, got.get(g), expected.get(e));
  }
  return "";
}

// The pass rule's verdict for an output against the exact answer for these inputs: the
// reference (rows sampled on larger problems) and the naive baseline in the same precision.
Verdict judge_against_reference(const Implementation& impl, const Problem& p, const CaseInputs& in, const Outputs& o) {
  // Every row (the reference's default): the pass rule compares maxima, and a max over a sample
  // of the naive baseline's rows understates its error against an implementation's worst row.
  const ReferenceResult ref = compute_reference(p, in);
  const Expected expected{ref.rows, ref.out, ref.lse, ref.fully_masked};
  Tensor naive_out = make_output(p), naive_lse = make_lse(p);
  std::vector<std::byte> workspace(naive_workspace_bytes(p));
  naive_attention(RunArgs{p, in, naive_out, &naive_lse, nullptr, workspace});
  const ErrorMetrics baseline = measure(p, in.mask, expected, naive_out, &naive_lse, FullyMaskedPolicy::zeros);
  const Capabilities caps = impl.describe();
  const ErrorMetrics measured = measure(p, in.mask, expected, o.out, caps.returns_lse ? &o.lse : nullptr, caps.fully_masked);
  return judge(PassRule{}, p.dtype, measured, baseline, ref.score_rounding, precision_scale(p.dtype, caps.matmul_unit_roundoff));
}

std::string verdict_failure(const Verdict& v, const char* what) {
  if (v.pass) return "";
  std::string reasons;
  for (const auto& r : v.reasons) reasons += (reasons.empty() ? "" : "; ") + r;
  return fmt::format("{}: {}", what, reasons);
}

// A copy of the inputs with the data of another seed: what "changing" a slice draws from.
CaseInputs other_data(const Problem& p) {
  Problem q = p;
  q.seed = p.seed + 7777;
  return generate_inputs(q);
}

// Copies element range [from, from + count) of src into dst.
void copy_range(const Tensor& src, Tensor& dst, std::int64_t from, std::int64_t count) {
  for (std::int64_t e = from; e < from + count; ++e) dst.set_bits(e, src.bits(e));
}

// The unit roundoff a property's rounding allowance is measured in: the dtype's accumulation
// precision, coarsened as the pass rule coarsens it for an implementation whose matrix
// products are coarser (Capabilities::matmul_unit_roundoff, core/pass_rule.hpp).
double unit_roundoff_for(const Implementation& impl, DType dtype) {
  return accumulation_unit_roundoff(dtype) * precision_scale(dtype, impl.describe().matmul_unit_roundoff);
}

// A rounding allowance derived from the pass rule: k times the naive algorithm's a-priori
// error `naive_bound` (already in the implementation's unit roundoff) plus the rule's ulp
// floor at `magnitude`, scaled like the pass rule's floor. An output the pass rule accepts
// cannot be rejected by a property that allows this much.
double allowance_from_pass_rule(const Implementation& impl, DType dtype, double naive_bound, double magnitude) {
  const PassRule rule;
  return rule.k * naive_bound + rule.floor_ulps * precision_scale(dtype, impl.describe().matmul_unit_roundoff) * ulp_at(dtype, magnitude);
}

// ---------------------------------------------------------------------------------------------
// The properties

std::string weights_of_visible_rows_sum_to_one(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  // The naive algorithm's weights are exp(s - m) / sum, each rounded once after a sum of n_k
  // terms: their total is off by at most about (n_k + 2) u from one, twice that for the
  // rounding of the division and of the check's own sum.
  const double tol = allowance_from_pass_rule(impl, DType::f64, 2.0 * double(p.n_k + 2) * unit_roundoff_for(impl, p.dtype), 0);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        const std::int64_t row = ((b * p.h_q + h) * p.n_q + i) * p.n_k;
        double sum = 0;
        for (std::int64_t j = 0; j < p.n_k; ++j) sum += o.weights.get(row + j);
        const bool empty = in.mask.row_fully_masked(b, h, i);
        if (empty ? sum != 0 : !(std::fabs(sum - 1) <= tol))
          return fmt::format("weights of row b={} h={} i={} sum to {:.17g}{}", b, h, i, sum,
                             empty ? " (a fully masked row: expected all zero)" : fmt::format(" (allowed |sum - 1| <= {:.3g})", tol));
      }
  return "";
}

// Sets, with each of `poisons` in turn, the K and V rows of the keys that one row (b, h, i)
// does not see to that value (the rows chosen from the seed, among rows with a masked key),
// and checks that every row of the same batch and kv head that sees none of those keys keeps
// every output bit. `poisons(variant, element)` gives the value of the element-th poisoned
// element of K (then V) for a variant.
struct Poison {
  std::string name;  // "NaN", "+1e4", ...
  std::function<double(std::int64_t element)> k, v;
};

std::string poisoned_masked_rows_change_no_bit(const Implementation& impl, const Problem& p, const std::vector<Poison>& poisons,
                                               std::uint64_t purpose) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  Rng rng = check_rng(p, purpose);
  for (const Poison& poison : poisons) {
    // A row with a masked key, searched from a random one.
    const std::int64_t rows = p.rows(), start = std::int64_t(rng.below(std::uint64_t(rows)));
    std::int64_t b = -1, h = 0, i = 0;
    for (std::int64_t n = 0; n < rows && b < 0; ++n) {
      const std::int64_t row = (start + n) % rows;
      const std::int64_t rb = row / (p.h_q * p.n_q), rh = row / p.n_q % p.h_q, ri = row % p.n_q;
      for (std::int64_t j = 0; j < p.n_k; ++j)
        if (!in.mask.visible(rb, rh, ri, j)) {
          b = rb, h = rh, i = ri;
          break;
        }
    }
    if (b < 0) return "";  // nothing masked: nothing to poison
    const std::int64_t g = p.kv_head(h);
    std::vector<std::int64_t> poisoned_keys;
    for (std::int64_t j = 0; j < p.n_k; ++j)
      if (!in.mask.visible(b, h, i, j)) poisoned_keys.push_back(j);
    CaseInputs poisoned = generate_inputs(p);
    std::int64_t element = 0;
    for (std::int64_t j : poisoned_keys)
      for (std::int64_t c = 0; c < p.d_k; ++c) poisoned.k.set(poisoned.k.offset(b, g, j, c), poison.k(element++));
    element = 0;
    for (std::int64_t j : poisoned_keys)
      for (std::int64_t c = 0; c < p.d_v; ++c) poisoned.v.set(poisoned.v.offset(b, g, j, c), poison.v(element++));
    const Outputs again = run(impl, p, poisoned);
    if (!again.error.empty()) return again.error;
    const std::string what = fmt::format("K and V of the {} key(s) row b={} h={} i={} does not see set to {}", poisoned_keys.size(), b, h,
                                         i, poison.name);
    for (std::int64_t hh = 0; hh < p.h_q; ++hh) {
      if (p.kv_head(hh) != g) continue;
      for (std::int64_t ii = 0; ii < p.n_q; ++ii) {
        const bool sees_none = std::none_of(poisoned_keys.begin(), poisoned_keys.end(),
                                            [&](std::int64_t j) { return in.mask.visible(b, hh, ii, j); });
        if (!sees_none) continue;
        if (auto d = first_bit_difference(p, o.out, again.out, b, hh, ii, ii, what.c_str()); !d.empty())
          return d + (hh != h || ii != i ? " (a row that sees none of them either)" : "");
      }
    }
  }
  return "";
}

std::string masked_keys_change_nothing(const Implementation& impl, const Problem& p) {
  if (impl.describe().returns_weights) {
    const CaseInputs in = generate_inputs(p);
    const Outputs o = run(impl, p, in);
    if (!o.error.empty()) return o.error;
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.h_q; ++h)
        for (std::int64_t i = 0; i < p.n_q; ++i)
          for (std::int64_t j = 0; j < p.n_k; ++j)
            if (!in.mask.visible(b, h, i, j) && o.weights.get(((b * p.h_q + h) * p.n_q + i) * p.n_k + j) != 0)
              return fmt::format("masked key j={} of row b={} h={} i={} has weight {:.17g}, not 0", j, b, h, i,
                                 o.weights.get(((b * p.h_q + h) * p.n_q + i) * p.n_k + j));
  }
  // Large but finite: K so large that a masked key given any weight (or counted in the row's
  // maximum) shows, yet every score stays finite in the dtype even if a kernel computes it
  // before masking: |scale q.k| <= a quarter of the dtype's largest value for every query of
  // the batch. V large too: 0 * V is exactly 0 for finite V, so a correct kernel keeps every bit.
  const CaseInputs in = generate_inputs(p);
  double largest_row_sum = 0;
  for (std::int64_t r = 0; r < p.rows(); ++r) {
    double sum = 0;
    for (std::int64_t c = 0; c < p.d_k; ++c) sum += std::fabs(in.q.get(r * p.d_k + c));
    largest_row_sum = std::max(largest_row_sum, sum);
  }
  const double quarter = max_finite(p.dtype) / 4;
  const double k_big =
      round_to(p.dtype, std::min(1e4, quarter / std::max(1e-30, largest_row_sum * std::max(1.0, p.effective_scale()))));
  const double v_big = round_to(p.dtype, std::min(1e4, quarter));
  auto alternating = [](double x) { return [x](std::int64_t e) { return e % 2 ? -x : x; }; };
  auto constant = [](double x) { return [x](std::int64_t) { return x; }; };
  const std::vector<Poison> poisons{
      {fmt::format("+{:g} (K) and +{:g} (V)", k_big, v_big), constant(k_big), constant(v_big)},
      {fmt::format("-{:g} (K) and -{:g} (V)", k_big, v_big), constant(-k_big), constant(-v_big)},
      {fmt::format("+-{:g} (K) and -+{:g} (V) alternating", k_big, v_big), alternating(k_big), alternating(-v_big)},
  };
  return poisoned_masked_rows_change_no_bit(impl, p, poisons, 2);
}

std::string masked_nonfinite_values_stay_out(const Implementation& impl, const Problem& p) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  auto constant = [](double x) { return [x](std::int64_t) { return x; }; };
  const std::vector<Poison> poisons{
      {"NaN", constant(nan), constant(nan)},
      {"+Inf", constant(inf), constant(inf)},
      {"-Inf", constant(-inf), constant(-inf)},
  };
  return poisoned_masked_rows_change_no_bit(impl, p, poisons, 13);
}

std::string permutations_commute(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  Rng rng = check_rng(p, 3);
  // Queries: the same permutation for every batch and head; rows must follow it bit for bit.
  std::vector<std::int64_t> order(static_cast<std::size_t>(p.n_q));
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  CaseInputs permuted = generate_inputs(p);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i)
        for (std::int64_t c = 0; c < p.d_k; ++c)
          permuted.q.set_bits(permuted.q.offset(b, h, i, c), in.q.bits(in.q.offset(b, h, order[std::size_t(i)], c)));
  const Outputs by_query = run(impl, p, permuted);
  if (!by_query.error.empty()) return by_query.error;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i)
        if (auto d = first_bit_difference(p, o.out, by_query.out, b, h, order[std::size_t(i)], i, "queries permuted"); !d.empty())
          return d + fmt::format(" (query {} moved to row {})", order[std::size_t(i)], i);
  // Keys and values together, within each batch's visible prefix: the output is the same
  // under the pass rule (the order of a sum changes its rounding).
  CaseInputs shuffled = generate_inputs(p);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t visible = in.mask.key_range(b, 0).second;
    std::vector<std::int64_t> keys(static_cast<std::size_t>(visible));
    std::iota(keys.begin(), keys.end(), 0);
    for (std::size_t j = keys.size(); j > 1; --j) std::swap(keys[j - 1], keys[rng.below(j)]);
    for (std::int64_t g = 0; g < p.h_kv; ++g)
      for (std::int64_t j = 0; j < visible; ++j) {
        for (std::int64_t c = 0; c < p.d_k; ++c) shuffled.k.set_bits(shuffled.k.offset(b, g, j, c), in.k.bits(in.k.offset(b, g, keys[std::size_t(j)], c)));
        for (std::int64_t c = 0; c < p.d_v; ++c) shuffled.v.set_bits(shuffled.v.offset(b, g, j, c), in.v.bits(in.v.offset(b, g, keys[std::size_t(j)], c)));
      }
  }
  const Outputs by_key = run(impl, p, shuffled);
  if (!by_key.error.empty()) return by_key.error;
  // The exact answer does not depend on the order of the keys, so the reference and the naive
  // baseline (whose error depends on the order it sums in) are those of the permuted inputs.
  return verdict_failure(judge_against_reference(impl, p, shuffled, by_key), "keys and values permuted together");
}

std::string values_shift_and_scale_the_output(const Implementation& impl, const Problem& p) {
  Rng rng = check_rng(p, 4);
  const double shift = std::array<double, 4>{0.5, 1.0, -2.0, 3.0}[rng.below(4)];
  for (int variant = 0; variant < 2; ++variant) {
    CaseInputs in = generate_inputs(p);
    for (std::int64_t e = 0; e < in.v.numel(); ++e) in.v.set(e, variant == 0 ? in.v.get(e) + shift : in.v.get(e) * 0.5);
    const Outputs o = run(impl, p, in);
    if (!o.error.empty()) return o.error;
    const auto what = variant == 0 ? fmt::format("every value row shifted by {} (the output must shift by it)", shift)
                                   : std::string("every value halved (the output must halve)");
    if (auto f = verdict_failure(judge_against_reference(impl, p, in, o), what.c_str()); !f.empty()) return f;
  }
  return "";
}

std::string outputs_lie_within_the_visible_values(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  const double u = unit_roundoff_for(impl, p.dtype);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        if (in.mask.row_fully_masked(b, h, i)) continue;
        for (std::int64_t c = 0; c < p.d_v; ++c) {
          double lo = std::numeric_limits<double>::infinity(), hi = -lo, magnitude = 0;
          for (std::int64_t j = 0; j < p.n_k; ++j)
            if (in.mask.visible(b, h, i, j)) {
              const double v = in.v.get(in.v.offset(b, p.kv_head(h), j, c));
              lo = std::min(lo, v), hi = std::max(hi, v), magnitude = std::max(magnitude, std::fabs(v));
            }
          // A convex combination computed in floating point may step outside by its rounding: the
          // naive algorithm's sum of n_k products and its normalisation, at most (n_k + 4) u of
          // the largest value; errors in the scores only move the weights and keep it convex.
          const double slack = allowance_from_pass_rule(impl, p.dtype, double(p.n_k + 4) * u * magnitude, magnitude);
          const double got = o.out.get(out_index(p, b, h, i, c));
          if (!(got >= lo - slack && got <= hi + slack))
            return fmt::format("output b={} h={} i={} c={} is {:.9g}, outside [{:.9g}, {:.9g}] of the visible values (slack {:.3g})", b,
                               h, i, c, got, lo, hi, slack);
        }
      }
  return "";
}

std::string batches_and_heads_are_independent(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  const CaseInputs other = other_data(p);
  Rng rng = check_rng(p, 6);
  const std::int64_t b_changed = std::int64_t(rng.below(std::uint64_t(p.batch)));
  const std::int64_t g_changed = std::int64_t(rng.below(std::uint64_t(p.h_kv)));
  const std::int64_t h_changed = std::int64_t(rng.below(std::uint64_t(p.h_q)));
  struct Change {
    std::string what;
    std::function<void(CaseInputs&)> apply;
    std::function<bool(std::int64_t b, std::int64_t h)> affected;
  };
  const std::vector<Change> changes{
      {fmt::format("Q, K and V of batch {} redrawn", b_changed),
       [&](CaseInputs& x) {
         copy_range(other.q, x.q, x.q.offset(b_changed, 0, 0, 0), p.h_q * p.n_q * p.d_k);
         copy_range(other.k, x.k, x.k.offset(b_changed, 0, 0, 0), p.h_kv * p.n_k * p.d_k);
         copy_range(other.v, x.v, x.v.offset(b_changed, 0, 0, 0), p.h_kv * p.n_k * p.d_v);
       },
       [&](std::int64_t b, std::int64_t) { return b == b_changed; }},
      {fmt::format("Q of head {} redrawn", h_changed),
       [&](CaseInputs& x) {
         for (std::int64_t b = 0; b < p.batch; ++b) copy_range(other.q, x.q, x.q.offset(b, h_changed, 0, 0), p.n_q * p.d_k);
       },
       [&](std::int64_t, std::int64_t h) { return h == h_changed; }},
      {fmt::format("K and V of kv head {} redrawn", g_changed),
       [&](CaseInputs& x) {
         for (std::int64_t b = 0; b < p.batch; ++b) {
           copy_range(other.k, x.k, x.k.offset(b, g_changed, 0, 0), p.n_k * p.d_k);
           copy_range(other.v, x.v, x.v.offset(b, g_changed, 0, 0), p.n_k * p.d_v);
         }
       },
       [&](std::int64_t, std::int64_t h) { return p.kv_head(h) == g_changed; }},
  };
  for (const Change& change : changes) {
    CaseInputs changed = generate_inputs(p);
    change.apply(changed);
    const Outputs again = run(impl, p, changed);
    if (!again.error.empty()) return again.error;
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.h_q; ++h) {
        if (change.affected(b, h)) continue;
        for (std::int64_t i = 0; i < p.n_q; ++i)
          if (auto d = first_bit_difference(p, o.out, again.out, b, h, i, i, change.what.c_str()); !d.empty()) return d;
      }
  }
  return "";
}

std::string causal_rows_ignore_keys_beyond_their_horizon(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  const CaseInputs other = other_data(p);
  Rng rng = check_rng(p, 7);
  const std::int64_t i = std::int64_t(rng.below(std::uint64_t(p.n_q)));
  CaseInputs changed = generate_inputs(p);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t horizon = in.mask.key_range(b, i).second;
    for (std::int64_t g = 0; g < p.h_kv; ++g)
      for (std::int64_t j = horizon; j < p.n_k; ++j) {
        copy_range(other.k, changed.k, changed.k.offset(b, g, j, 0), p.d_k);
        copy_range(other.v, changed.v, changed.v.offset(b, g, j, 0), p.d_v);
      }
  }
  const Outputs again = run(impl, p, changed);
  if (!again.error.empty()) return again.error;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      if (auto d = first_bit_difference(p, o.out, again.out, b, h, i, i,
                                        fmt::format("keys from {} on (beyond row {}'s horizon) redrawn", in.mask.key_range(b, i).second, i).c_str());
          !d.empty())
        return d;
  return "";
}

std::string grouped_heads_equal_repeated_heads(const Implementation& impl, const Problem& p) {
  if (p.h_kv == p.h_q) return "";
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  Problem mha = p;
  mha.h_kv = p.h_q;
  CaseInputs repeated{in.q, Tensor(p.dtype, {p.batch, p.h_q, p.n_k, p.d_k}), Tensor(p.dtype, {p.batch, p.h_q, p.n_k, p.d_v}), in.mask};
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h) {
      for (std::int64_t e = 0; e < p.n_k * p.d_k; ++e)
        repeated.k.set_bits(repeated.k.offset(b, h, 0, 0) + e, in.k.bits(in.k.offset(b, p.kv_head(h), 0, 0) + e));
      for (std::int64_t e = 0; e < p.n_k * p.d_v; ++e)
        repeated.v.set_bits(repeated.v.offset(b, h, 0, 0) + e, in.v.bits(in.v.offset(b, p.kv_head(h), 0, 0) + e));
    }
  if (!impl.supports(mha).ok) return "";
  const Outputs as_mha = run(impl, mha, repeated);
  if (!as_mha.error.empty()) return as_mha.error;
  if (impl.describe().deterministic) {
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.h_q; ++h)
        for (std::int64_t i = 0; i < p.n_q; ++i)
          if (auto d = first_bit_difference(p, o.out, as_mha.out, b, h, i, i, "the same problem as MHA with K and V heads repeated"); !d.empty())
            return d;
    return "";
  }
  return verdict_failure(judge_against_reference(impl, mha, repeated, as_mha), "as MHA with K and V heads repeated");
}

std::string large_scores_give_finite_outputs(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        if (in.mask.row_fully_masked(b, h, i)) continue;
        for (std::int64_t c = 0; c < p.d_v; ++c)
          if (!std::isfinite(o.out.get(out_index(p, b, h, i, c))))
            return fmt::format("output b={} h={} i={} c={} is {} with scores near the dtype's overflow", b, h, i, c,
                               o.out.get(out_index(p, b, h, i, c)));
      }
  return "";
}

// Eight runs, not two: nondeterminism that shows once in a few calls (a race lost now and then,
// state kept between calls) is then caught on one problem, so the printed rerun replays it.
std::string repeated_runs_are_bitwise_equal(const Implementation& impl, const Problem& p) {
  constexpr int runs = 8;
  const CaseInputs in = generate_inputs(p);
  const Outputs first = run(impl, p, in);
  if (!first.error.empty()) return first.error;
  for (int k = 2; k <= runs; ++k) {
    const Outputs again = run(impl, p, in);
    if (!again.error.empty()) return again.error;
    for (std::int64_t e = 0; e < first.out.numel(); ++e)
      if (first.out.bits(e) != again.out.bits(e))
        return fmt::format("runs on the same input differ: run {} of {} at {}: {:.17g}, the first run {:.17g}", k, runs,
                           output_coordinates(p, e), again.out.get(e), first.out.get(e));
  }
  return "";
}

std::string fully_masked_rows_follow_the_policy(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  const Capabilities caps = impl.describe();
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        const bool empty = in.mask.row_fully_masked(b, h, i);
        for (std::int64_t c = 0; c < p.d_v; ++c) {
          const double got = o.out.get(out_index(p, b, h, i, c));
          if (empty && caps.fully_masked == FullyMaskedPolicy::zeros && got != 0)
            return fmt::format("fully masked row b={} h={} i={}: output c={} is {:.9g}, the declared policy is zeros", b, h, i, c, got);
          if (empty && caps.fully_masked == FullyMaskedPolicy::nan && !std::isnan(got))
            return fmt::format("fully masked row b={} h={} i={}: output c={} is {:.9g}, the declared policy is NaN", b, h, i, c, got);
          if (!empty && std::isnan(got)) return fmt::format("NaN at b={} h={} i={} c={}, a row with visible keys", b, h, i, c);
        }
        if (caps.returns_lse && empty && caps.fully_masked != FullyMaskedPolicy::any) {
          const double lse = o.lse.get((b * p.h_q + h) * p.n_q + i);
          if (!(std::isinf(lse) && lse < 0)) return fmt::format("fully masked row b={} h={} i={}: LSE is {}, not -inf", b, h, i, lse);
        }
      }
  return "";
}

std::string agrees_with_the_reference(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  return verdict_failure(judge_against_reference(impl, p, in, o), "against the reference");
}

std::string shifting_every_key_changes_nothing(const Implementation& impl, const Problem& p) {
  CaseInputs in = generate_inputs(p);
  Rng rng = check_rng(p, 14);
  // The offset scale * q.u that the shift adds to a row's scores, aimed at: small, large, and
  // past exp's overflow in f32 (a kernel that does not subtract the row maximum, or starts it
  // at a finite value, breaks there; softmax does not change).
  const double target = std::array<double, 3>{4.0, 30.0, 100.0}[rng.below(3)];
  const double scale = p.effective_scale();
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t g = 0; g < p.h_kv; ++g) {
      std::vector<double> sign(static_cast<std::size_t>(p.d_k));
      for (auto& s : sign) s = rng.below(2) ? 1.0 : -1.0;
      double offsets = 0, rows = 0;
      for (std::int64_t h = 0; h < p.h_q; ++h) {
        if (p.kv_head(h) != g) continue;
        for (std::int64_t i = 0; i < p.n_q; ++i, ++rows) {
          double dot = 0;
          for (std::int64_t c = 0; c < p.d_k; ++c) dot += in.q.get(in.q.offset(b, h, i, c)) * sign[std::size_t(c)];
          offsets += std::fabs(dot);
        }
      }
      const double mean = rows > 0 ? offsets / rows : 0;
      const double t = std::min(max_finite(p.dtype) / 16, target / (scale * std::max(mean, 1e-6)));
      for (std::int64_t j = 0; j < p.n_k; ++j)
        for (std::int64_t c = 0; c < p.d_k; ++c) {
          const std::int64_t e = in.k.offset(b, g, j, c);
          in.k.set(e, in.k.get(e) + round_to(p.dtype, t * sign[std::size_t(c)]));
        }
    }
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  return verdict_failure(judge_against_reference(impl, p, in, o),
                         fmt::format("every key of each batch and kv head shifted by one vector (row score offsets near {:g})", target).c_str());
}

std::string scaling_q_against_the_scale_changes_nothing(const Implementation& impl, const Problem& p) {
  CaseInputs in = generate_inputs(p);
  Rng rng = check_rng(p, 15);
  // A power of two: c q and scale / c are exact (short of overflow and underflow), so the
  // scores are the same numbers and the output must pass against the same answer.
  double c = std::array<double, 5>{2.0, 4.0, 8.0, 0.5, 0.25}[rng.below(5)];
  double largest = 0;
  for (std::int64_t e = 0; e < in.q.numel(); ++e) largest = std::max(largest, std::fabs(in.q.get(e)));
  // Scores near the overflow (the large regime) leave no room for a larger q.k before the
  // scale: there Q only shrinks.
  if (c > 1 && (p.regime == Regime::large || largest * c > max_finite(p.dtype) / 2)) c = 1 / c;
  for (std::int64_t e = 0; e < in.q.numel(); ++e) in.q.set(e, in.q.get(e) * c);
  Problem scaled = p;
  scaled.scale = p.effective_scale() / c;
  const Outputs o = run(impl, scaled, in);
  if (!o.error.empty()) return o.error;
  // Judged against the reference of the inputs as stored (a Q element that underflowed is
  // what the kernel was given).
  return verdict_failure(judge_against_reference(impl, scaled, in, o),
                         fmt::format("Q multiplied by {:g} and the scale divided by it (scale={:.17g})", c, *scaled.scale).c_str());
}

std::vector<Property> build_suite() {
  const ProblemSpace any;
  ProblemSpace masked = any;  // a masked key in every problem
  masked.needs_mask = true;
  ProblemSpace permutable = any;  // only masks that permuting queries or keys within the visible prefix keeps
  permutable.masks = MaskSupport{false, false, true, false, false, false};
  ProblemSpace causal = any;
  causal.needs_causal = true;
  ProblemSpace gqa = any;
  gqa.needs_gqa = true;
  ProblemSpace large = any;
  large.regimes = {Regime::large};
  ProblemSpace fully_masked = any;
  fully_masked.wants_fully_masked = true;
  ProblemSpace shiftable = any;  // scores near the overflow leave no room for an offset
  shiftable.regimes = {Regime::diffuse, Regime::peaked, Regime::saturated, Regime::sparse_int, Regime::uniform01};
  // 14 and 15 are about the scores' arithmetic, not tile edges (3, 12 reach those): a quarter of
  // the work keeps their reference evaluations cheap.
  shiftable.max_work = any.max_work / 4;
  ProblemSpace rescaled = any;
  rescaled.max_work = any.max_work / 4;

  using Caps = const Capabilities&;
  auto returns_weights = [](Caps c) { return c.returns_weights ? "" : std::string("needs returns_weights (returns no weights)"); };
  auto a_mask = [](Caps c) {
    return masks_keys(c.masks) ? ""
           : c.masks.bias      ? std::string("needs a mask that excludes keys (declares only an additive bias)")
                               : std::string("needs a mask (declares none)");
  };
  auto a_causal_mask = [](Caps c) {
    return c.masks.causal_top_left || c.masks.causal_bottom_right ? "" : std::string("needs a causal mask (declares none)");
  };
  auto grouped_heads = [](Caps c) { return c.gqa ? "" : std::string("needs GQA (declares MHA only)"); };
  auto deterministic = [](Caps c) { return c.deterministic ? "" : std::string("needs deterministic (declares nondeterministic)"); };
  auto unless_declared_safe = [](Caps c) { return !c.masked_nonfinite_safe; };

  std::vector<Property> suite{
      {1, "the weights of every visible row sum to one", any, returns_weights, weights_of_visible_rows_sum_to_one, {}},
      {2, "masked keys get exactly zero weight, and large finite values in their K and V change no output bit", masked, a_mask,
       masked_keys_change_nothing, {}},
      {3, "permuting queries permutes the output rows, and permuting keys with their values leaves the output unchanged", permutable,
       {}, permutations_commute, {}},
      {4, "adding a constant to every value row adds it to the output, and scaling V scales O", any, {},
       values_shift_and_scale_the_output, {}},
      {5, "every output coordinate lies within the visible values of that coordinate", any, {}, outputs_lie_within_the_visible_values, {}},
      {6, "batches and heads are independent: changing one never changes another's output", any, {},
       batches_and_heads_are_independent, {}},
      {7, "under a causal mask, a row's output ignores keys beyond its horizon", causal, a_causal_mask,
       causal_rows_ignore_keys_beyond_their_horizon, {}},
      {8, "grouped-query attention equals multi-head attention with the K and V heads repeated", gqa, grouped_heads,
       grouped_heads_equal_repeated_heads, {}},
      {9, "scores near the dtype's overflow give finite outputs", large, {}, large_scores_give_finite_outputs, {}},
      {10, "repeated runs on the same input are bitwise equal", any, deterministic, repeated_runs_are_bitwise_equal, {}},
      {11, "fully masked rows follow the declared policy, and no NaN appears anywhere else", fully_masked, a_mask,
       fully_masked_rows_follow_the_policy, {}},
      {12, "the output agrees with the high-precision reference under the pass rule", any, {}, agrees_with_the_reference, {}},
      {13, "non-finite values (NaN, +-Inf) in masked K and V rows stay out of the outputs of rows that do not see them", masked, a_mask,
       masked_nonfinite_values_stay_out, unless_declared_safe},
      {14, "adding one vector to every key leaves the output unchanged (softmax ignores a per-row offset)", shiftable, {},
       shifting_every_key_changes_nothing, {}},
      {15, "Q multiplied by a power of two c with the scale divided by c gives the same output", rescaled, {},
       scaling_q_against_the_scale_changes_nothing, {}},
  };
  for (auto& property : suite)
    if (!property.missing) property.missing = [](Caps) { return std::string(); };
  return suite;
}

}  // namespace

const std::vector<Property>& property_suite() {
  static const std::vector<Property> suite = build_suite();
  return suite;
}

namespace {

PropertyVerdict verdict_for(const Property& property, const Implementation& impl) {
  PropertyVerdict v;
  v.property = property.number;
  v.property_name = property.name;
  v.implementation = impl.name();
  return v;
}

// The property's space narrowed to the declaration, or why nothing is left ("" when something is).
std::string narrow(const Property& property, const Capabilities& caps, ProblemSpace& space) {
  if (auto missing = property.missing(caps); !missing.empty()) return missing;
  space = narrowed_to(property.space, caps);
  auto names = [](const auto& values) {
    std::vector<std::string> out;
    for (const auto& x : values) out.emplace_back(to_string(x));
    return fmt::format("{}", fmt::join(out, ", "));
  };
  if (space.dtypes.empty())
    return fmt::format("needs one of the dtypes {} (declares {})", names(property.space.dtypes), caps.dtypes.empty() ? "none" : names(caps.dtypes));
  if (space.layouts.empty()) return fmt::format("needs one of the layouts {} (declares {})", names(property.space.layouts), caps.layouts.empty() ? "none" : names(caps.layouts));
  return "";
}

// A failure the implementation's declaration allows is a finding.
void classify_failure(const Property& property, const Capabilities& caps, PropertyVerdict& v) {
  if (v.kind == PropertyVerdict::Kind::failed && property.failure_is_finding && property.failure_is_finding(caps))
    v.kind = PropertyVerdict::Kind::finding;
}

// A projection can grow the work (equal sequence lengths: 1013 x 2 becomes 1013 x 1013): both
// lengths halve together, which keeps their relation (equal stays equal), until the problem is
// back within the space's budget.
Problem fit_to_budget(Problem p, const ProblemSpace& space) {
  const double budget = space.max_work * (space.large ? 16 : 1);
  const std::int64_t old_n_q = p.n_q;
  while (work_of(p) > budget && std::max(p.n_q, p.n_k) > 1) {
    p.n_q = std::max<std::int64_t>(1, p.n_q / 2);
    p.n_k = std::max<std::int64_t>(1, p.n_k / 2);
  }
  if (p.padding.kind == KeyPadding::Kind::per_query && p.n_q != old_n_q) {
    std::vector<std::int64_t> lengths;
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t i = 0; i < p.n_q; ++i) lengths.push_back(p.padding.valid_len[std::size_t(b * old_n_q + i)]);
    p.padding.valid_len = std::move(lengths);
  }
  for (auto& len : p.padding.valid_len) len = std::min(len, p.n_k);
  return p;
}

}  // namespace

PropertyVerdict check_property_on(const Property& property, const Implementation& impl, const Problem& problem) {
  PropertyVerdict v = verdict_for(property, impl);
  v.repro = problem.repro();
  const Capabilities caps = impl.describe();
  ProblemSpace space;
  if (auto why = narrow(property, caps, space); !why.empty()) {
    v.kind = PropertyVerdict::Kind::not_applicable;
    v.message = why;
    return v;
  }
  if (Support s = covers(caps, problem); !s.ok || !(s = impl.supports(problem)).ok) {
    v.kind = PropertyVerdict::Kind::not_applicable;
    v.message = "unsupported problem: " + s.reason;
    return v;
  }
  v.message = property.check(impl, problem);
  v.kind = v.message.empty() ? PropertyVerdict::Kind::held : PropertyVerdict::Kind::failed;
  v.cases = v.message.empty() ? 1 : 0;
  classify_failure(property, caps, v);
  return v;
}

PropertyVerdict check_property(const Property& property, const Implementation& impl, const PropertyOptions& options) {
  PropertyVerdict v = verdict_for(property, impl);
  v.seed = options.seed != 0 ? options.seed : std::random_device{}();
  const Capabilities caps = impl.describe();
  ProblemSpace space;
  if (auto why = narrow(property, caps, space); !why.empty()) {
    v.kind = PropertyVerdict::Kind::not_applicable;
    v.message = why;
    return v;
  }
  space.large = options.large;
  const auto problems = gen_problem(space);

  std::string last_failure;
  std::optional<Problem> last_failing;  // what ran in the last failing case: the shrunk counterexample, projected
  int drawn = 0, projected = 0, discarded = 0;
  std::string discard_reason;
  // Once a call has timed out, no problem runs again: each shrinking step would cost another
  // timeout (an implementation that hangs everywhere would cost one per step). Every candidate
  // is discarded, so the counterexample stays the one that hung.
  const int timeouts_before = impl.timed_out_calls();
  auto timed_out = [&] { return impl.timed_out_calls() != timeouts_before; };
  auto testable = [&] {
    if (timed_out()) RC_DISCARD("a call timed out: nothing runs again");
    Problem p = *problems;
    ++drawn;
    try {
      p.validate();
    } catch (const std::exception& e) {
      RC_FAIL(std::string("the property's generator made an invalid problem (a bug in properties/): ") + e.what());
    }
    // A problem the implementation refuses runs as its projection onto what it accepts, when
    // that projection is still a problem the property is about.
    bool moved = false;
    if (!covers(caps, p).ok || !impl.supports(p).ok) {
      const Resolution r = resolve(impl, p);
      if (!r.problem || !admits(space, *r.problem)) {
        ++discarded;
        discard_reason = r.problem ? fmt::format("{}; its projection ({}) is not a problem property {} is about", r.skip_reason, r.changes,
                                                 property.number)
                                   : r.skip_reason;
        RC_DISCARD("unsupported problem");
      }
      p = fit_to_budget(*r.problem, space);
      if (!admits(space, p) || !covers(caps, p).ok || !impl.supports(p).ok) {
        ++discarded;
        discard_reason = fmt::format("{}; its projection ({}) is refused once shortened to the work budget", r.skip_reason, r.changes);
        RC_DISCARD("unsupported problem");
      }
      moved = true;
    }
    const std::string failure = property.check(impl, p);
    if (!failure.empty()) {
      last_failure = failure;
      last_failing = p;
      RC_FAIL(failure);
    }
    projected += moved;
  };
  rc::detail::TestMetadata metadata;
  metadata.id = fmt::format("{}/{}", impl.name(), property.number);
  metadata.description = property.name;
  rc::detail::TestParams params;
  params.seed = v.seed;
  params.maxSuccess = options.cases;
  params.maxSize = 100;
  params.maxDiscardRatio = 10;
  params.disableShrinking = !options.shrink;
  // A listener of our own: the default one collects failures for a "reproduce" banner at exit,
  // which expected failures (the mutants' kill matrix) would fill with noise. The repro string
  // and seed in the verdict are how a failure reruns.
  struct Silent final : rc::detail::TestListener {
    void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
    void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
    void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
  } silent;
  const rc::detail::TestResult result = rc::detail::checkProperty(rc::detail::toProperty(testable), metadata, params, silent);

  rc::detail::SuccessResult success;
  rc::detail::FailureResult failure;
  rc::detail::GaveUpResult gave_up;
  rc::detail::Error error;
  v.discarded = discarded;
  if (result.match(success)) {
    v.kind = PropertyVerdict::Kind::held;
    v.cases = success.numSuccess;
    v.projected = projected;
  } else if (result.match(failure)) {
    v.kind = PropertyVerdict::Kind::failed;
    v.cases = failure.numSuccess;
    // The last failing case is the shrunk one; its problem as it ran (projected where it was)
    // is the counterexample, so the printed repro string reruns it without a projection.
    if (last_failing)
      v.repro = last_failing->repro();
    else if (!failure.counterExample.empty())
      v.repro = failure.counterExample.front().second;
    v.message = last_failure.empty() ? failure.description : last_failure;
    if (!v.repro.empty() && !timed_out()) {
      try {
        const Problem shrunk = parse_problem(v.repro);
        if (auto again = property.check(impl, shrunk); !again.empty()) v.message = again;
      } catch (const std::exception&) {
      }
    }
    classify_failure(property, caps, v);
  } else if (result.match(gave_up) && gave_up.numSuccess == 0) {
    // It accepts none of the problems drawn, nor their projections (e.g. a GPU implementation
    // where no device is): nothing to check, which is not the same as a sparse space.
    v.kind = PropertyVerdict::Kind::not_applicable;
    v.message = fmt::format("accepts none of the {} problems drawn, nor their projections: {}", drawn, discard_reason);
  } else if (result.match(gave_up)) {
    v.kind = PropertyVerdict::Kind::gave_up;
    v.cases = gave_up.numSuccess;
    v.projected = projected;
    v.message = fmt::format("{} of {} problems drawn were refused, and so were their projections (last: {})", discarded, drawn,
                            discard_reason);
  } else if (result.match(error)) {
    v.kind = PropertyVerdict::Kind::failed;
    v.message = "RapidCheck error: " + error.description;
  }
  return v;
}

std::string describe_failure(const PropertyVerdict& v) {
  return fmt::format(
      "property {} {} for {}: {}\n  {}\n  counterexample: {}\n  rerun: attnbench properties --impl {} --property {} --case '{}'\n"
      "  the same problem under the pass rule: attnbench verify --impl {} --case '{}'\n"
      "  RapidCheck seed: {} (after {} passing case(s))\n",
      v.property, v.kind == PropertyVerdict::Kind::finding ? "finding" : "failed", v.implementation, v.property_name, v.message, v.repro,
      v.implementation, v.property, v.repro, v.implementation, v.repro, v.seed, v.cases);
}

}  // namespace attn

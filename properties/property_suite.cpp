#include "properties/property_suite.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <rapidcheck/detail/Property.h>
#include <rapidcheck/detail/Results.h>
#include <rapidcheck/detail/TestListener.h>
#include <rapidcheck/detail/TestMetadata.h>
#include <rapidcheck/detail/TestParams.h>

#include "core/inputs.hpp"
#include "core/metrics.hpp"
#include "core/pass_rule.hpp"
#include "core/rng.hpp"
#include "impls/cpu_naive/cpu_naive.hpp"
#include "reference/reference.hpp"

namespace attn {
namespace {

// ---------------------------------------------------------------------------------------------
// Problems

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

rc::Gen<std::int64_t> gen_head_dim() {
  return rc::gen::weightedOneOf<std::int64_t>({
      {3, rc::gen::inRange<std::int64_t>(1, 81)},
      {2, rc::gen::element<std::int64_t>(1, 2, 7, 15, 16, 17, 31, 32, 33, 64)},
      {1, rc::gen::element<std::int64_t>(96, 128, 256)},
  });
}

template <class T>
T pick(const std::vector<T>& options) {
  return *rc::gen::elementOf(options);
}

}  // namespace

rc::Gen<Problem> gen_problem(const ProblemSpace& space) {
  return rc::gen::exec([space] {
    const double budget = space.max_work * (space.large ? 16 : 1);
    Problem p;
    // Dimensions first.
    p.n_q = *gen_length(space.large);
    p.n_k = *gen_length(space.large);
    p.d_k = *gen_head_dim();
    p.d_v = *rc::gen::weightedOneOf<std::int64_t>({{2, rc::gen::just(p.d_k)}, {1, gen_head_dim()}});
    // Wide heads on long sequences would blow the budget: narrow them first, then shorten.
    while (double(p.n_q) * double(p.n_k) * double(p.d_k + p.d_v) > budget && (p.d_k > 8 || p.d_v > 8))
      p.d_k = std::max<std::int64_t>(1, p.d_k / 2), p.d_v = std::max<std::int64_t>(1, p.d_v / 2);
    while (double(p.n_q) * double(p.n_k) * double(p.d_k + p.d_v) > budget) (p.n_q > p.n_k ? p.n_q : p.n_k) /= 2;
    const double per_head = double(p.n_q) * double(p.n_k) * double(p.d_k + p.d_v);
    const auto heads_budget = std::max<std::int64_t>(1, std::int64_t(budget / per_head));
    p.h_kv = *rc::gen::inRange<std::int64_t>(1, 4);
    const std::int64_t ratio = *rc::gen::element<std::int64_t>(1, 1, 2, 4, 3);  // GQA ratios; 3 with h_kv 1 is MQA over 3 heads
    p.h_q = p.h_kv * ratio;
    while (p.h_q > heads_budget && p.h_kv > 1) p.h_q = --p.h_kv * ratio;
    if (p.h_q > heads_budget) p.h_q = p.h_kv = 1;
    p.batch = *rc::gen::inRange<std::int64_t>(1, std::clamp<std::int64_t>(heads_budget / p.h_q, 1, 3) + 1);

    // Masks, each optional, intersecting when several are drawn.
    if (space.causal) p.causal = *rc::gen::element(Causal::none, Causal::none, Causal::top_left, Causal::bottom_right);
    if (space.padding && *rc::gen::inRange(0, 10) < 3) {
      const bool per_query = space.query_padding && *rc::gen::arbitrary<bool>();
      p.padding.kind = per_query ? KeyPadding::Kind::per_query : KeyPadding::Kind::per_batch;
      const std::int64_t count = per_query ? p.batch * p.n_q : p.batch;
      const auto valid = rc::gen::weightedOneOf<std::int64_t>({{4, rc::gen::inRange<std::int64_t>(0, p.n_k + 1)},
                                                               {1, rc::gen::element<std::int64_t>(0, p.n_k, 1)}});
      for (std::int64_t i = 0; i < count; ++i) p.padding.valid_len.push_back(std::min(*valid, p.n_k));
    }
    const std::vector<Broadcast> broadcasts{Broadcast::shared, Broadcast::per_batch, Broadcast::per_head, Broadcast::per_batch_head};
    if (space.bool_mask && *rc::gen::inRange(0, 10) < 2) {
      p.bool_mask.enabled = true;
      p.bool_mask.keep = *rc::gen::element(0.1, 0.5, 0.9);
      p.bool_mask.broadcast = pick(broadcasts);
    }
    if (space.bias && *rc::gen::inRange(0, 10) < 2) {
      p.bias.enabled = true;
      p.bias.stddev = *rc::gen::element(0.5, 1.0, 4.0);
      p.bias.broadcast = pick(broadcasts);
    }
    p.regime = space.all_regimes ? *rc::gen::element(Regime::diffuse, Regime::peaked, Regime::saturated, Regime::large,
                                                     Regime::sparse_int, Regime::uniform01)
                                 : Regime::diffuse;
    p.dtype = pick(space.dtypes);
    // Then the data: the seed fixes every input bit.
    p.seed = *rc::gen::inRange<std::uint64_t>(0, 1000000);
    return p;
  });
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
  // Every row within the default problem space's work budget (rows are sampled only in the
  // slow sweep): the pass rule compares maxima, and a max over a sample of the naive
  // baseline's rows understates its error against an implementation's worst row.
  ReferenceOptions ro;
  ro.max_work = 2.5e6;
  const ReferenceResult ref = compute_reference(p, in, ro);
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

bool row_is_fully_masked(const Problem& p, const Mask& m, std::int64_t b, std::int64_t h, std::int64_t i) {
  (void)p;
  return m.row_fully_masked(b, h, i);
}

double unit_roundoff_of_accumulation(DType dtype) { return dtype == DType::f64 ? 0x1p-53 : 0x1p-24; }

// ---------------------------------------------------------------------------------------------
// The properties

std::string weights_of_visible_rows_sum_to_one(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  const double tol = 4.0 * double(p.n_k + 2) * unit_roundoff_of_accumulation(p.dtype);
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

std::string masked_keys_change_nothing(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs o = run(impl, p, in);
  if (!o.error.empty()) return o.error;
  if (impl.describe().returns_weights)
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.h_q; ++h)
        for (std::int64_t i = 0; i < p.n_q; ++i)
          for (std::int64_t j = 0; j < p.n_k; ++j)
            if (!in.mask.visible(b, h, i, j) && o.weights.get(((b * p.h_q + h) * p.n_q + i) * p.n_k + j) != 0)
              return fmt::format("masked key j={} of row b={} h={} i={} has weight {:.17g}, not 0", j, b, h, i,
                                 o.weights.get(((b * p.h_q + h) * p.n_q + i) * p.n_k + j));
  // Poison the keys one row does not see with NaN, +1e30 and -1e30 (rounded to the dtype: inf
  // in f16); that row's output must keep every bit.
  Rng rng = check_rng(p, 2);
  const double poisons[] = {std::numeric_limits<double>::quiet_NaN(), 1e30, -1e30};
  for (double poison : poisons) {
    const std::int64_t b = std::int64_t(rng.below(std::uint64_t(p.batch))), h = std::int64_t(rng.below(std::uint64_t(p.h_q))),
                       i = std::int64_t(rng.below(std::uint64_t(p.n_q))), g = p.kv_head(h);
    CaseInputs poisoned = generate_inputs(p);
    std::int64_t masked = 0;
    for (std::int64_t j = 0; j < p.n_k; ++j) {
      if (in.mask.visible(b, h, i, j)) continue;
      ++masked;
      for (std::int64_t c = 0; c < p.d_k; ++c) poisoned.k.set(poisoned.k.offset(b, g, j, c), poison);
      for (std::int64_t c = 0; c < p.d_v; ++c) poisoned.v.set(poisoned.v.offset(b, g, j, c), poison);
    }
    if (masked == 0) continue;
    const Outputs again = run(impl, p, poisoned);
    if (!again.error.empty()) return again.error;
    const std::string diff = first_bit_difference(p, o.out, again.out, b, h, i, i,
                                                  fmt::format("K and V of the {} keys row b={} h={} i={} does not see set to {}", masked, b,
                                                              h, i, poison)
                                                      .c_str());
    if (!diff.empty()) return diff;
  }
  return "";
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
    const std::int64_t visible = in.mask.key_limit(b, 0);
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
  const double u = unit_roundoff_of_accumulation(p.dtype);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        if (row_is_fully_masked(p, in.mask, b, h, i)) continue;
        for (std::int64_t c = 0; c < p.d_v; ++c) {
          double lo = std::numeric_limits<double>::infinity(), hi = -lo, magnitude = 0;
          for (std::int64_t j = 0; j < p.n_k; ++j)
            if (in.mask.visible(b, h, i, j)) {
              const double v = in.v.get(in.v.offset(b, p.kv_head(h), j, c));
              lo = std::min(lo, v), hi = std::max(hi, v), magnitude = std::max(magnitude, std::fabs(v));
            }
          // A convex combination computed in floating point may step outside by its rounding.
          const double slack = double(p.n_k + 8) * u * magnitude + 2 * ulp_at(p.dtype, magnitude);
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
    const std::int64_t horizon = in.mask.key_limit(b, i);
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
                                        fmt::format("keys from {} on (beyond row {}'s horizon) redrawn", in.mask.key_limit(b, i), i).c_str());
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

std::string repeated_runs_are_bitwise_equal(const Implementation& impl, const Problem& p) {
  const CaseInputs in = generate_inputs(p);
  const Outputs first = run(impl, p, in), second = run(impl, p, in);
  if (!first.error.empty()) return first.error;
  if (!second.error.empty()) return second.error;
  for (std::int64_t e = 0; e < first.out.numel(); ++e)
    if (first.out.bits(e) != second.out.bits(e))
      return fmt::format("two runs on the same input differ at {}: {:.17g} then {:.17g}", output_coordinates(p, e), first.out.get(e),
                         second.out.get(e));
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
        if (caps.returns_lse && empty) {
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

std::vector<Property> build_suite() {
  const ProblemSpace any;
  ProblemSpace masked = any;  // every problem the generator makes; masks are frequent enough
  ProblemSpace permutable = any;
  permutable.causal = permutable.query_padding = permutable.bool_mask = permutable.bias = false;
  ProblemSpace causal = any;
  ProblemSpace gqa = any;
  ProblemSpace large = any;
  large.all_regimes = false;
  ProblemSpace fully_masked = any;
  auto returns_weights = [](const Implementation& impl) { return impl.describe().returns_weights; };
  auto deterministic = [](const Implementation& impl) { return impl.describe().deterministic; };

  std::vector<Property> suite{
      {1, "the weights of every visible row sum to one", any, returns_weights, weights_of_visible_rows_sum_to_one},
      {2, "masked keys get exactly zero weight, and NaN or +-1e30 in their K and V changes no output bit", masked, {},
       masked_keys_change_nothing},
      {3, "permuting queries permutes the output rows, and permuting keys with their values leaves the output unchanged", permutable,
       {}, permutations_commute},
      {4, "adding a constant to every value row adds it to the output, and scaling V scales O", any, {},
       values_shift_and_scale_the_output},
      {5, "every output coordinate lies within the visible values of that coordinate", any, {}, outputs_lie_within_the_visible_values},
      {6, "batches and heads are independent: changing one never changes another's output", any, {},
       batches_and_heads_are_independent},
      {7, "under a causal mask, a row's output ignores keys beyond its horizon", causal, {},
       causal_rows_ignore_keys_beyond_their_horizon},
      {8, "grouped-query attention equals multi-head attention with the K and V heads repeated", gqa, {},
       grouped_heads_equal_repeated_heads},
      {9, "scores near the dtype's overflow give finite outputs", large, {}, large_scores_give_finite_outputs},
      {10, "two runs on the same input are bitwise equal", any, deterministic, repeated_runs_are_bitwise_equal},
      {11, "fully masked rows follow the declared policy, and no NaN appears anywhere else", fully_masked, {},
       fully_masked_rows_follow_the_policy},
      {12, "the output agrees with the high-precision reference under the pass rule", any, {}, agrees_with_the_reference},
  };
  for (auto& property : suite)
    if (!property.applies) property.applies = [](const Implementation&) { return true; };
  return suite;
}

// Per-property problem shaping that a ProblemSpace flag cannot express.
Problem shape_for(int property, Problem p) {
  switch (property) {
    case 7:  // causal required
      if (p.causal == Causal::none) p.causal = (p.seed % 2) ? Causal::top_left : Causal::bottom_right;
      break;
    case 8:  // grouped heads required
      if (p.h_kv == p.h_q) p.h_q *= 2;
      break;
    case 9:
      p.regime = Regime::large;
      break;
    case 11:  // make fully masked rows likely: short padded keys, or more queries than keys under bottom-right
      if (p.padding.kind == KeyPadding::Kind::none && p.causal != Causal::bottom_right) p.causal = Causal::bottom_right;
      if (p.causal == Causal::bottom_right && p.n_q <= p.n_k && p.n_k > 1) {
        p.n_k = std::max<std::int64_t>(1, p.n_q / 2);
        for (auto& valid : p.padding.valid_len) valid = std::min(valid, p.n_k);
      }
      break;
    default: break;
  }
  return p;
}

}  // namespace

const std::vector<Property>& property_suite() {
  static const std::vector<Property> suite = build_suite();
  return suite;
}

PropertyVerdict check_property_on(const Property& property, const Implementation& impl, const Problem& problem) {
  PropertyVerdict v;
  v.property = property.number;
  v.property_name = property.name;
  v.implementation = impl.name();
  v.repro = problem.repro();
  if (!property.applies(impl)) {
    v.kind = PropertyVerdict::Kind::not_applicable;
    v.message = "does not apply to this implementation (see its capabilities)";
    return v;
  }
  if (const Support s = impl.supports(problem); !s.ok) {
    v.kind = PropertyVerdict::Kind::not_applicable;
    v.message = "unsupported problem: " + s.reason;
    return v;
  }
  v.message = property.check(impl, problem);
  v.kind = v.message.empty() ? PropertyVerdict::Kind::held : PropertyVerdict::Kind::failed;
  v.cases = v.message.empty() ? 1 : 0;
  return v;
}

PropertyVerdict check_property(const Property& property, const Implementation& impl, const PropertyOptions& options) {
  PropertyVerdict v;
  v.property = property.number;
  v.property_name = property.name;
  v.implementation = impl.name();
  v.seed = options.seed != 0 ? options.seed : std::random_device{}();
  if (!property.applies(impl)) {
    v.kind = PropertyVerdict::Kind::not_applicable;
    v.message = "does not apply to this implementation (see its capabilities)";
    return v;
  }
  ProblemSpace space = property.space;
  space.large = options.large;
  const auto supported = impl.describe().dtypes;
  std::vector<DType> dtypes;
  for (DType d : space.dtypes)
    if (std::find(supported.begin(), supported.end(), d) != supported.end()) dtypes.push_back(d);
  if (dtypes.empty()) {
    v.kind = PropertyVerdict::Kind::not_applicable;
    v.message = "supports none of the property's dtypes";
    return v;
  }
  space.dtypes = dtypes;
  const int number = property.number;
  const auto problems = rc::gen::map(gen_problem(space), [number](Problem p) { return shape_for(number, std::move(p)); });

  std::string last_failure;
  std::int64_t unsupported = 0;  // problems discarded as unsupported, and the last reason
  std::string unsupported_reason;
  auto testable = [&] {
    const Problem p = *problems;
    try {
      p.validate();
    } catch (const std::exception& e) {
      RC_FAIL(std::string("the property's generator made an invalid problem (a bug in properties/): ") + e.what());
    }
    if (const Support support = impl.supports(p); !support.ok) {
      ++unsupported;
      unsupported_reason = support.reason;
      RC_DISCARD("unsupported problem");
    }
    const std::string failure = property.check(impl, p);
    if (!failure.empty()) {
      last_failure = failure;
      RC_FAIL(failure);
    }
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
  if (result.match(success)) {
    v.kind = PropertyVerdict::Kind::held;
    v.cases = success.numSuccess;
  } else if (result.match(failure)) {
    v.kind = PropertyVerdict::Kind::failed;
    v.cases = failure.numSuccess;
    // The shrunk problem is the first value the case drew: its repro string.
    if (!failure.counterExample.empty()) v.repro = failure.counterExample.front().second;
    // Rerun the shrunk case for its own message (RapidCheck's description holds the last one
    // tried, which is the shrunk one, but with its own decoration).
    v.message = last_failure.empty() ? failure.description : last_failure;
    if (!v.repro.empty()) {
      try {
        const Problem shrunk = parse_problem(v.repro);
        if (auto again = property.check(impl, shrunk); !again.empty()) v.message = again;
      } catch (const std::exception&) {
      }
    }
  } else if (result.match(gave_up) && gave_up.numSuccess == 0 && unsupported > 0) {
    // It supports none of the problems drawn (e.g. a GPU implementation where no device is):
    // nothing to check, which is not the same as a property that gave up on a sparse space.
    v.kind = PropertyVerdict::Kind::not_applicable;
    v.message = fmt::format("supports none of the {} problems drawn: {}", unsupported, unsupported_reason);
  } else if (result.match(gave_up)) {
    v.kind = PropertyVerdict::Kind::gave_up;
    v.cases = gave_up.numSuccess;
    v.message = gave_up.description;
  } else if (result.match(error)) {
    v.kind = PropertyVerdict::Kind::failed;
    v.message = "RapidCheck error: " + error.description;
  }
  return v;
}

std::string describe_failure(const PropertyVerdict& v) {
  return fmt::format(
      "property {} failed for {}: {}\n  {}\n  counterexample: {}\n  rerun: attnbench properties --impl {} --property {} --case '{}'\n"
      "  the same problem under the pass rule: attnbench verify --impl {} --case '{}'\n"
      "  RapidCheck seed: {} (after {} passing case(s))\n",
      v.property, v.implementation, v.property_name, v.message, v.repro, v.implementation, v.property, v.repro, v.implementation,
      v.repro, v.seed, v.cases);
}

}  // namespace attn

#include "impls/cpu_blocked/cpu_blocked.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include <Eigen/Core>

#include "core/parallel.hpp"

namespace attn {
namespace {

constexpr std::int64_t query_tile = 256;  // Q tile reused across all keys: K and V stream 4x less than at 64
constexpr std::int64_t key_tile = 128;
constexpr std::size_t alignment = 64;

std::size_t aligned(std::size_t bytes) { return (bytes + alignment - 1) / alignment * alignment; }

// Per-thread scratch, all bounded by the tile sizes and head dims.
template <class Acc>
struct Scratch {
  static std::size_t bytes(const Problem& p) {
    const auto dk = std::size_t(p.d_k), dv = std::size_t(p.d_v);
    return aligned(sizeof(Acc) * query_tile * dk)        // Q tile widened (f16/bf16 inputs)
           + aligned(sizeof(Acc) * query_tile * key_tile)  // scores, then probabilities
           + aligned(sizeof(Acc) * query_tile * dv)        // output accumulator
           + 2 * aligned(sizeof(Acc) * query_tile)         // running max and sum
           + aligned(sizeof(Acc) * key_tile * (dk + dv))   // K and V tiles widened (f16/bf16 inputs)
           + aligned(sizeof(std::int64_t) * query_tile);   // per-row key limits
  }
  Acc *q, *s, *o, *m, *l, *k, *v;
  std::int64_t* limit;
  Scratch(std::byte* base, const Problem& p) {
    const auto dk = std::size_t(p.d_k), dv = std::size_t(p.d_v);
    auto take = [&](std::size_t n) {
      std::byte* here = base;
      base += aligned(n);
      return here;
    };
    q = reinterpret_cast<Acc*>(take(sizeof(Acc) * query_tile * dk));
    s = reinterpret_cast<Acc*>(take(sizeof(Acc) * query_tile * key_tile));
    o = reinterpret_cast<Acc*>(take(sizeof(Acc) * query_tile * dv));
    m = reinterpret_cast<Acc*>(take(sizeof(Acc) * query_tile));
    l = reinterpret_cast<Acc*>(take(sizeof(Acc) * query_tile));
    k = reinterpret_cast<Acc*>(take(sizeof(Acc) * key_tile * (dk + dv)));
    v = k + key_tile * dk;
    limit = reinterpret_cast<std::int64_t*>(take(sizeof(std::int64_t) * query_tile));
  }
};

template <class Acc>
using RowMajor = Eigen::Matrix<Acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Rows [first, first + rows) of a [.., .., n, d] tensor slice as Acc: the tensor's own memory
// when it already holds Acc, else widened into buffer.
template <class Acc>
const Acc* rows_as(const Tensor& t, std::int64_t offset, std::int64_t count, Acc* buffer) {
  if ((std::is_same_v<Acc, float> && t.dtype() == DType::f32) || (std::is_same_v<Acc, double> && t.dtype() == DType::f64))
    return t.as<Acc>() + offset;
  if (t.dtype() == DType::f16) {
    const std::uint16_t* bits = t.as<std::uint16_t>() + offset;
    for (std::int64_t e = 0; e < count; ++e) buffer[e] = static_cast<Acc>(f16_bits_to_double(bits[e]));
  } else if (t.dtype() == DType::bf16) {
    const std::uint16_t* bits = t.as<std::uint16_t>() + offset;
    for (std::int64_t e = 0; e < count; ++e) buffer[e] = static_cast<Acc>(bf16_bits_to_double(bits[e]));
  } else {
    for (std::int64_t e = 0; e < count; ++e) buffer[e] = static_cast<Acc>(t.get(offset + e));
  }
  return buffer;
}

template <class Acc>
void query_tile_forward(const RunArgs& a, Scratch<Acc>& w, std::int64_t b, std::int64_t h, std::int64_t i0) {
  const Problem& p = a.problem;
  const CaseInputs& in = a.inputs;
  const Mask& mask = in.mask;
  const std::int64_t g = p.kv_head(h), dk = p.d_k, dv = p.d_v;
  const std::int64_t tq = std::min(query_tile, p.n_q - i0);
  constexpr Acc minus_inf = -std::numeric_limits<Acc>::infinity();
  const bool has_bool = !mask.bool_flags().empty();

  // Scores are scaled after the product, as dot * scale (folding the scale into Q would round
  // every Q element first and double the score error).
  const Acc* q_rows = rows_as<Acc>(in.q, in.q.offset(b, h, i0, 0), tq * dk, w.q);
  const Acc scale = static_cast<Acc>(p.effective_scale());
  Eigen::Map<const RowMajor<Acc>> q(q_rows, tq, dk);
  Eigen::Map<RowMajor<Acc>> o(w.o, tq, dv);
  o.setZero();
  std::int64_t tile_limit = 0, tile_min_limit = p.n_k;
  for (std::int64_t r = 0; r < tq; ++r) {
    w.m[r] = minus_inf;
    w.l[r] = 0;
    w.limit[r] = mask.key_limit(b, i0 + r);
    tile_limit = std::max(tile_limit, w.limit[r]);
    tile_min_limit = std::min(tile_min_limit, w.limit[r]);
  }

  // Key tiles past every row's causal/padding limit are never visited.
  for (std::int64_t j0 = 0; j0 < tile_limit; j0 += key_tile) {
    const std::int64_t tk = std::min(key_tile, p.n_k - j0);
    const Acc* k_rows = rows_as<Acc>(in.k, in.k.offset(b, g, j0, 0), tk * dk, w.k);
    const Acc* v_rows = rows_as<Acc>(in.v, in.v.offset(b, g, j0, 0), tk * dv, w.v);
    Eigen::Map<const RowMajor<Acc>> k(k_rows, tk, dk);
    Eigen::Map<const RowMajor<Acc>> v(v_rows, tk, dv);
    // Rows of S start key_tile apart (64-byte aligned) whatever tk is: Eigen's vectorised row
    // reductions peel to alignment, so the summation order, and the bits, would otherwise
    // depend on where the buffer lies.
    Eigen::Map<RowMajor<Acc>, 0, Eigen::OuterStride<>> s(w.s, tq, tk, Eigen::OuterStride<>(key_tile));
    // Rows before first_row see no key of this tile (under a causal mask, the top of the query
    // tile): they are left out of both products, so the work near the diagonal is per key tile,
    // not per query tile.
    std::int64_t first_row = 0;
    while (first_row < tq && w.limit[first_row] <= j0) ++first_row;
    const std::int64_t rows = tq - first_row;
    s.topRows(rows).noalias() = q.bottomRows(rows) * k.transpose();

    // Which entries of this tile are masked: none when the tile lies inside every row's limit
    // and there is no boolean mask. Tile row r (S row r - first_row): columns from
    // visible_columns(r) on are past its causal/padding limit; before that only the boolean
    // mask can hide a key.
    const bool partial = j0 + tk > tile_min_limit || has_bool;
    auto visible_columns = [&](std::int64_t r) { return std::clamp<std::int64_t>(w.limit[r] - j0, 0, tk); };
    auto for_each_masked = [&](std::int64_t r, auto&& apply) {
      const std::int64_t limit = visible_columns(r);
      if (limit < tk) apply(s.row(r - first_row).tail(tk - limit));
      if (has_bool)
        for (std::int64_t c = 0; c < limit; ++c)
          if (!mask.visible(b, h, i0 + r, j0 + c)) apply(s.row(r - first_row).segment(c, 1));
    };
    // Without a bias the scale is applied inside the exponent below (max commutes with a
    // positive scale, and rounding is monotone, so the row max is the same).
    Acc exponent_scale = scale;
    if (mask.has_bias()) {
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < tk; ++c)
          s(r, c) = s(r, c) * scale + static_cast<Acc>(mask.bias(b, h, i0 + first_row + r, j0 + c));
      exponent_scale = 1;
    }
    if (partial)
      for (std::int64_t r = first_row; r < tq; ++r) for_each_masked(r, [&](auto&& keys) { keys.setConstant(minus_inf); });

    // Online softmax: new running max, rescale what was accumulated, add this tile.
    for (std::int64_t r = first_row; r < tq; ++r) {
      // A plain aligned array view of the row: Eigen then vectorises max, exp and sum fully.
      Eigen::Map<Eigen::Array<Acc, 1, Eigen::Dynamic>, Eigen::Aligned64> scores(w.s + (r - first_row) * key_tile, tk);
      const Acc tile_max = scores.maxCoeff() * exponent_scale;
      const Acc m_new = std::max(w.m[r], tile_max);
      if (m_new == minus_inf) {  // nothing visible in this row yet
        scores.setZero();
        continue;
      }
      const Acc correction = w.m[r] == minus_inf ? Acc(0) : std::exp(w.m[r] - m_new);
      scores = (scores * exponent_scale - m_new).exp();
      w.m[r] = m_new;
      if (partial)  // exp of -inf is clamped in Eigen's vector exp: masked keys must weigh exactly 0
        for_each_masked(r, [](auto&& keys) { keys.setZero(); });
      w.l[r] = w.l[r] * correction + scores.sum();
      if (correction != Acc(1)) o.row(r) *= correction;
    }
    o.bottomRows(rows).noalias() += s.topRows(rows) * v;
  }

  // Normalise and write; a row with no visible key gives zeros and LSE -inf.
  for (std::int64_t r = 0; r < tq; ++r) {
    const std::int64_t row = (b * p.h_q + h) * p.n_q + i0 + r;
    const bool empty = w.l[r] == Acc(0);
    const Acc inverse = empty ? Acc(0) : Acc(1) / w.l[r];
    const std::int64_t out0 = row * dv;
    for (std::int64_t c = 0; c < dv; ++c) {
      const Acc value = o(r, c) * inverse;
      if constexpr (std::is_same_v<Acc, float>) {
        if (a.out.dtype() == DType::f32) {
          a.out.as<float>()[out0 + c] = value;
          continue;
        }
      } else {
        if (a.out.dtype() == DType::f64) {
          a.out.as<double>()[out0 + c] = value;
          continue;
        }
      }
      a.out.set(out0 + c, static_cast<double>(value));
    }
    if (a.lse)
      a.lse->set(row, empty ? -std::numeric_limits<double>::infinity() : static_cast<double>(w.m[r] + std::log(w.l[r])));
  }
}

template <class Acc>
void forward(const RunArgs& a) {
  const Problem& p = a.problem;
  const std::size_t per_thread = Scratch<Acc>::bytes(p);
  // Every thread's scratch starts on a 64-byte boundary, so results do not depend on the
  // workspace's address (see the note on S's stride).
  const std::size_t shift = (alignment - reinterpret_cast<std::uintptr_t>(a.workspace.data()) % alignment) % alignment;
  std::byte* const base = a.workspace.data() + shift;
  const auto available = static_cast<std::int64_t>((a.workspace.size() - std::min(shift, a.workspace.size())) / per_thread);
  if (available < 1) throw std::runtime_error("cpu_blocked: workspace smaller than one thread's tiles");
  const int threads = static_cast<int>(std::min<std::int64_t>(a.threads > 0 ? a.threads : default_thread_count(), available));
  const std::int64_t tiles_per_head = (p.n_q + query_tile - 1) / query_tile;
  const std::int64_t items = p.batch * p.h_q * tiles_per_head;
  std::atomic<std::int64_t> next{0};
  // Dynamic scheduling: under a causal mask later query tiles cost more.
  parallel_for_ranges(threads, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t t = first; t < last; ++t) {
      Scratch<Acc> scratch(base + std::size_t(t) * per_thread, p);
      for (std::int64_t item = next++; item < items; item = next++) {
        const std::int64_t tile = item % tiles_per_head, bh = item / tiles_per_head;
        query_tile_forward<Acc>(a, scratch, bh / p.h_q, bh % p.h_q, tile * query_tile);
      }
    }
  }, threads);
}

class CpuBlocked final : public Implementation {
 public:
  std::string name() const override { return "cpu_blocked"; }
  Capabilities describe() const override {
    Capabilities c;
    c.summary = "flash-style tiles (256 queries x 128 keys) with an online softmax, Eigen GEMMs, threads over (b, h, query tile); "
                "f64, or f32 for f32/f16/bf16";
    c.dtypes = {DType::f64, DType::f32, DType::f16, DType::bf16};
    c.returns_lse = true;
    return c;
  }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem& p) const override {
    const std::size_t per_thread = p.dtype == DType::f64 ? Scratch<double>::bytes(p) : Scratch<float>::bytes(p);
    return per_thread * std::size_t(default_thread_count()) + alignment;
  }
  void run(const RunArgs& args) const override {
    if (args.problem.dtype == DType::f64)
      forward<double>(args);
    else
      forward<float>(args);
  }
};

}  // namespace

void register_cpu_blocked(Registry& registry) { registry.add(std::make_unique<CpuBlocked>()); }

}  // namespace attn

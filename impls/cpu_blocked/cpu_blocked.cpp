#include "impls/cpu_blocked/cpu_blocked.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cmath>
#include <optional>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/parallel.hpp"
#include "core/precision.hpp"
#include "core/score_pipeline.hpp"
#include "impls/cpu_blocked/cpu_blocked_backward.hpp"
#include "impls/cpu_blocked/micro_kernels.hpp"
#include "impls/cpu_blocked/simd.hpp"

namespace attn {
namespace {

// Tile shapes (chosen by timing n = 4096, d = 64 on an AVX-512 Xeon; 192..768 queries and
// 256..512 keys were within a few percent). A query tile is copied (and widened) once and sees
// every key tile, which is packed once per query tile. Inside it, row blocks go through the
// scores, the softmax and the value product back to back, so their scores stay in L1
// (12 x 512 floats = 24 KiB). The micro-kernels take 12 rows (scores) and 6 rows (values).
constexpr std::int64_t query_tile = 384;
constexpr std::int64_t row_block = 12;
constexpr std::int64_t key_tile = 512;
constexpr int score_rows = 12;
constexpr int value_rows = 6;
constexpr int value_vectors = 4;  // value columns per micro-kernel call, in vectors
static_assert(query_tile % row_block == 0 && row_block % score_rows == 0 && score_rows % value_rows == 0);
constexpr std::size_t alignment = 64;

std::size_t aligned(std::size_t bytes) { return (bytes + alignment - 1) / alignment * alignment; }
std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

// Per-thread scratch, all bounded by the tile sizes and head dims.
template <class Acc>
struct Scratch {
  static constexpr std::int64_t lanes = simd::lanes<Acc>;
  static std::int64_t padded_dv(const Problem& p) { return round_up(p.d_v, lanes); }
  static std::size_t bytes(const Problem& p) {
    const auto dk = std::size_t(p.d_k), dv = std::size_t(padded_dv(p));
    return aligned(sizeof(Acc) * query_tile * dk)         // Q tile, widened, rows past n_q zero
           + aligned(sizeof(Acc) * key_tile * dk)         // K tile transposed into panels
           + aligned(sizeof(Acc) * key_tile * dv)         // V tile widened or padded (when needed)
           + aligned(sizeof(Acc) * row_block * key_tile)  // scores, then weights, of a row block
           + aligned(sizeof(Acc) * query_tile * dv)       // output accumulator
           + 2 * aligned(sizeof(Acc) * query_tile)        // running max and sum
           + 2 * aligned(sizeof(std::int64_t) * query_tile);  // per-row first keys and key limits
  }
  Acc *q, *k, *v, *s, *o, *m, *l;
  std::int64_t *first, *limit;
  Scratch(std::byte* base, const Problem& p) {
    const auto dk = std::size_t(p.d_k), dv = std::size_t(padded_dv(p));
    auto take = [&](std::size_t n) {
      std::byte* here = base;
      base += aligned(n);
      return here;
    };
    q = reinterpret_cast<Acc*>(take(sizeof(Acc) * query_tile * dk));
    k = reinterpret_cast<Acc*>(take(sizeof(Acc) * key_tile * dk));
    v = reinterpret_cast<Acc*>(take(sizeof(Acc) * key_tile * dv));
    s = reinterpret_cast<Acc*>(take(sizeof(Acc) * row_block * key_tile));
    o = reinterpret_cast<Acc*>(take(sizeof(Acc) * query_tile * dv));
    m = reinterpret_cast<Acc*>(take(sizeof(Acc) * query_tile));
    l = reinterpret_cast<Acc*>(take(sizeof(Acc) * query_tile));
    first = reinterpret_cast<std::int64_t*>(take(sizeof(std::int64_t) * query_tile));
    limit = reinterpret_cast<std::int64_t*>(take(sizeof(std::int64_t) * query_tile));
  }
};

// Keys [j0, j0 + count) of K, transposed into panels of 2 vectors of keys ([depth][2 lanes]
// each, what micro::scores streams); keys past count are zero. Where K already holds Acc, whole
// lanes x lanes blocks go through a register transpose (a scalar copy of every element costs
// as much as a tenth of the forward pass at n = 512).
template <class Acc>
void pack_keys(const Tensor& k, std::int64_t row0_offset, std::int64_t count, std::int64_t dk, Acc* panels) {
  constexpr std::int64_t L = simd::lanes<Acc>, width = 2 * L;
  const std::int64_t padded = round_up(count, width);
  const bool in_place = holds<Acc>(k);
  const std::int64_t block_keys = in_place ? count / L * L : 0, block_depth = dk / L * L;
  for (std::int64_t j = 0; j < block_keys; j += L) {
    Acc* panel = panels + (j / width) * dk * width + j % width;
    const Acc* from = k.as<Acc>() + row0_offset + j * dk;
    for (std::int64_t e0 = 0; e0 < block_depth; e0 += L) {
      simd::Vec<Acc> rows[L];
      for (std::int64_t r = 0; r < L; ++r) rows[r] = simd::load(from + r * dk + e0);
      simd::transpose<Acc>(rows);
      for (std::int64_t e = 0; e < L; ++e) simd::store(panel + (e0 + e) * width, rows[e]);
    }
    for (std::int64_t r = 0; r < L; ++r)
      for (std::int64_t e = block_depth; e < dk; ++e) panel[e * width + r] = from[r * dk + e];
  }
  for (std::int64_t j = block_keys; j < padded; ++j) {
    Acc* panel = panels + (j / width) * dk * width + j % width;
    if (j >= count) {
      for (std::int64_t e = 0; e < dk; ++e) panel[e * width] = 0;
    } else if (in_place) {
      const Acc* from = k.as<Acc>() + row0_offset + j * dk;
      for (std::int64_t e = 0; e < dk; ++e) panel[e * width] = from[e];
    } else {
      for (std::int64_t e = 0; e < dk; ++e) copy_as<Acc>(k, row0_offset + j * dk + e, 1, panel + e * width);
    }
  }
}

template <class Acc>
void query_tile_forward(const RunArgs& a, Scratch<Acc>& w, std::int64_t b, std::int64_t h, std::int64_t i0) {
  using V = simd::Vec<Acc>;
  constexpr std::int64_t L = simd::lanes<Acc>;
  constexpr std::int64_t panel_width = 2 * L;
  const Problem& p = a.problem;
  const CaseInputs& in = a.inputs;
  const Mask& mask = in.mask;
  const std::int64_t g = p.kv_head(h), dk = p.d_k, dv = p.d_v, dv_padded = Scratch<Acc>::padded_dv(p);
  const std::int64_t tq = std::min(query_tile, p.n_q - i0);
  const std::int64_t rows_padded = round_up(tq, score_rows);
  constexpr Acc minus_inf = -std::numeric_limits<Acc>::infinity();
  const bool has_bool = !mask.bool_flags().empty();
  // A window with a lower bound (sliding window): keys before a row's first are masked like the
  // boolean mask's, in the scores; key tiles before every row's first key are not visited.
  const bool has_lower = p.window.left != Window::unbounded;
  // V is read where it lies when it already holds whole vectors of Acc per row.
  const bool values_in_place = holds<Acc>(in.v) && dv == dv_padded;

  copy_as<Acc>(in.q, in.q.offset(b, h, i0, 0), tq * dk, w.q);
  std::fill(w.q + tq * dk, w.q + rows_padded * dk, Acc(0));
  std::fill(w.o, w.o + rows_padded * dv_padded, Acc(0));
  // The sink (the pipeline's step 5) is the running softmax's first term: max sigma, sum 1, no
  // value. Every key's exp(s - m) is then taken against a max that holds it, as cpu_naive's are
  // (folding it in at the end would scale the whole row by one rounded exp(m - sigma)).
  const ScorePipeline pipeline(p, mask);
  const std::optional<double> sink = pipeline.sink(h);
  std::int64_t tile_limit = 0, first_key = p.n_k;
  for (std::int64_t r = 0; r < rows_padded; ++r) {
    w.m[r] = sink ? static_cast<Acc>(*sink) : minus_inf;
    w.l[r] = sink ? Acc(1) : Acc(0);
    const auto [lo, hi] = r < tq ? mask.key_range(b, i0 + r) : std::pair<std::int64_t, std::int64_t>{0, 0};
    w.first[r] = lo;
    w.limit[r] = hi;
    tile_limit = std::max(tile_limit, hi);
    if (lo < hi) first_key = std::min(first_key, lo);
  }
  // Scores are scaled after the product, as dot * scale (folding the scale into Q would round
  // every Q element first and double the score error). With a bias, scale and bias are applied
  // together where the bias is read; without, in the softmax's max pass.
  const Acc exponent_scale = pipeline.beyond_scale() ? Acc(1) : static_cast<Acc>(pipeline.scale());

  // Key tiles past every row's causal/padding limit are never visited, nor those before every
  // row's window. The tiles keep their places (multiples of key_tile) and a skipped tile holds
  // no visible key of any row, so the sums are the same bits as when every tile is visited.
  for (std::int64_t j0 = first_key / key_tile * key_tile; j0 < tile_limit; j0 += key_tile) {
    // Keys of this tile that some row of the query tile sees.
    const std::int64_t tile_keys = std::min({key_tile, p.n_k - j0, tile_limit - j0});
    pack_keys<Acc>(in.k, in.k.offset(b, g, j0, 0), tile_keys, dk, w.k);
    const Acc* values = w.v;
    std::int64_t values_stride = dv_padded;
    if (values_in_place) {
      values = in.v.as<Acc>() + in.v.offset(b, g, j0, 0);
      values_stride = dv;
    } else {
      for (std::int64_t j = 0; j < tile_keys; ++j) {
        copy_as<Acc>(in.v, in.v.offset(b, g, j0 + j, 0), dv, w.v + j * dv_padded);
        std::fill(w.v + j * dv_padded + dv, w.v + (j + 1) * dv_padded, Acc(0));
      }
    }
    const bool values_finite = simd::all_finite(values, values_stride, tile_keys, dv_padded);

    for (std::int64_t block0 = 0; block0 < rows_padded; block0 += row_block) {
      const std::int64_t block_rows = std::min(row_block, rows_padded - block0);
      const std::int64_t* limit = w.limit + block0;
      // The block's work near the diagonal is per 12 rows and per panel of keys, not per tile:
      // leading row groups that see no key of this tile and panels past every row's limit are
      // left out of both products.
      std::int64_t block_keys = 0, first_row = block_rows, first_col = tile_keys;
      for (std::int64_t r = 0; r < block_rows; ++r) {
        const std::int64_t visible = std::clamp<std::int64_t>(limit[r] - j0, 0, tile_keys);
        block_keys = std::max(block_keys, visible);
        if (visible > 0) first_row = std::min(first_row, r), first_col = std::min(first_col, std::max<std::int64_t>(w.first[block0 + r] - j0, 0));
      }
      if (block_keys == 0) continue;
      first_row = first_row / score_rows * score_rows;
      // Under a sliding window the keys before every row's window start are left out of the
      // scores, the softmax and the value product alike, from the panel that holds the first one
      // on (their weights would be exactly 0: the same bits either way).
      first_col = has_lower ? first_col / panel_width * panel_width : 0;
      // Scores are computed for whole vectors of keys: whole panels, and half of the last one
      // when no row of the block sees past its first vector.
      const std::int64_t columns = round_up(block_keys, L);
      Acc* const s = w.s;  // row r of the block at s + r * key_tile

      for (std::int64_t c0 = first_col; c0 < columns; c0 += panel_width)
        for (std::int64_t r = first_row; r < block_rows; r += score_rows) {
          const Acc* q_rows = w.q + (block0 + r) * dk;
          Acc* s_rows = s + r * key_tile + c0;
          if (columns - c0 >= panel_width)
            micro::scores<Acc, score_rows>(q_rows, dk, w.k + c0 * dk, dk, s_rows, key_tile);
          else
            micro::scores<Acc, score_rows, 1>(q_rows, dk, w.k + c0 * dk, dk, s_rows, key_tile);
        }

      // Online softmax per row: new running max, rescale what was accumulated, add this tile.
      for (std::int64_t r = first_row; r < block_rows; ++r) {
        const std::int64_t row = block0 + r;
        Acc* const scores = s + r * key_tile;
        const std::int64_t visible = std::clamp<std::int64_t>(limit[r] - j0, 0, block_keys);
        if (pipeline.beyond_scale())
          for (std::int64_t c = first_col; c < visible; ++c) scores[c] = pipeline.score<Acc>(scores[c], b, h, i0 + row, j0 + c);
        if (has_bool)
          for (std::int64_t c = first_col; c < visible; ++c)
            if (!mask.visible(b, h, i0 + row, j0 + c)) scores[c] = minus_inf;
        if (has_lower && row < tq) {
          const std::int64_t first = std::clamp<std::int64_t>(w.first[row] - j0, first_col, std::max(visible, first_col));
          std::fill(scores + first_col, scores + first, minus_inf);
        }
        std::fill(scores + std::max(visible, first_col), scores + columns, minus_inf);

        // Scaled scores are rounded and stored before the row max is taken and subtracted: an
        // FMA of score * scale - max would subtract from the unrounded product, off by up to
        // half an ulp of the score, which near the dtype's overflow is itself astronomically
        // large. Two running maxima: one alone would wait on max's latency at every vector.
        V top0 = simd::broadcast(minus_inf), top1 = top0;
        std::int64_t c = first_col;
        for (; c + 2 * L <= columns; c += 2 * L) {
          const V scaled0 = simd::load(scores + c) * exponent_scale, scaled1 = simd::load(scores + c + L) * exponent_scale;
          simd::store(scores + c, scaled0);
          simd::store(scores + c + L, scaled1);
          top0 = simd::max<Acc>(top0, scaled0);
          top1 = simd::max<Acc>(top1, scaled1);
        }
        if (c < columns) {
          const V scaled0 = simd::load(scores + c) * exponent_scale;
          simd::store(scores + c, scaled0);
          top0 = simd::max<Acc>(top0, scaled0);
        }
        const Acc m_new = std::max(w.m[row], simd::reduce_max<Acc>(simd::max<Acc>(top0, top1)));
        if (m_new == minus_inf) {  // nothing visible in this row yet
          std::fill(scores, scores + columns, Acc(0));
          continue;
        }
        const Acc correction = w.m[row] == minus_inf ? Acc(0) : std::exp(w.m[row] - m_new);
        V sum{};
        for (std::int64_t c = first_col; c < columns; c += L) {
          // exp of -inf (a masked key) is exactly 0; every other argument is <= 0.
          const V weights = simd::exp<Acc>(simd::load(scores + c) - m_new);
          simd::store(scores + c, weights);
          sum += weights;
        }
        w.m[row] = m_new;
        w.l[row] = w.l[row] * correction + simd::reduce_sum<Acc>(sum);
        // Dropout (the pipeline's step 6): the sum has every weight, the value product the kept ones.
        if (pipeline.has_dropout() && row < tq)
          for (std::int64_t c = first_col; c < visible; ++c)
            if (!pipeline.kept(b, h, i0 + row, j0 + c)) scores[c] = Acc(0);
        if (correction != Acc(1))
          for (std::int64_t c = 0; c < dv_padded; c += L)
            simd::store(w.o + row * dv_padded + c, simd::load(w.o + row * dv_padded + c) * correction);
      }

      // O += P V. A masked key's weight is exactly 0, but 0 * V is NaN when V is NaN or
      // infinite (padding memory often holds garbage): masked keys must be left out, not
      // multiplied by 0. Where the tile's V is finite, 0 * V adds nothing and every key goes
      // through the micro-kernel. Otherwise keys every row of a 6-row group sees do, and the
      // rest (near the diagonal, or anywhere under a boolean mask) go row by row, skipping
      // zero weights. Both sum over keys in order, one FMA each.
      for (std::int64_t r = first_row; r < block_rows; r += value_rows) {
        std::int64_t shared_keys = block_keys;
        for (std::int64_t g = r; g < r + value_rows; ++g)
          shared_keys = std::min(shared_keys, std::clamp<std::int64_t>(limit[g] - j0, 0, block_keys));
        if (has_bool || has_lower) shared_keys = 0;
        if (values_finite) shared_keys = block_keys;
        const Acc* weights = s + r * key_tile + first_col;
        const std::int64_t micro_keys = std::max<std::int64_t>(shared_keys - first_col, 0);
        for (std::int64_t c0 = 0; c0 < dv_padded; c0 += value_vectors * L) {
          const auto vectors = std::min<std::int64_t>(value_vectors, (dv_padded - c0) / L);
          Acc* out = w.o + (block0 + r) * dv_padded + c0;
          const Acc* v0 = values + first_col * values_stride + c0;
          switch (vectors) {
            case 4: micro::weighted_values<Acc, value_rows, 4>(weights, key_tile, v0, values_stride, micro_keys, out, dv_padded); break;
            case 3: micro::weighted_values<Acc, value_rows, 3>(weights, key_tile, v0, values_stride, micro_keys, out, dv_padded); break;
            case 2: micro::weighted_values<Acc, value_rows, 2>(weights, key_tile, v0, values_stride, micro_keys, out, dv_padded); break;
            default: micro::weighted_values<Acc, value_rows, 1>(weights, key_tile, v0, values_stride, micro_keys, out, dv_padded); break;
          }
        }
        for (std::int64_t g = r; g < r + value_rows; ++g) {
          Acc* out = w.o + (block0 + g) * dv_padded;
          for (std::int64_t j = std::max(shared_keys, first_col); j < block_keys; ++j) {
            const Acc weight = s[g * key_tile + j];
            if (weight == Acc(0)) continue;
            for (std::int64_t c = 0; c < dv_padded; c += L)
              simd::store(out + c, simd::load(out + c) + weight * simd::load(values + j * values_stride + c));
          }
        }
      }
    }
  }

  // Normalise and write; a row with no visible key gives zeros and LSE -inf.
  Tensor& out_tensor = a.tensors.required_output(Role::o);
  Tensor* lse = a.tensors.output(Role::lse);
  Tensor* keep = a.tensors.output(Role::keep);
  const Acc rescale = pipeline.dropout_rescale<Acc>();
  for (std::int64_t r = 0; r < tq; ++r) {
    const std::int64_t row = (b * p.h_q + h) * p.n_q + i0 + r;
    if (keep) pipeline.write_keep_row(*keep, b, h, i0 + r);
    // With a sink every row's sum holds its term from the start: emptiness is the mask's.
    const bool empty = sink ? mask.row_fully_masked(b, h, i0 + r) : w.l[r] == Acc(0);
    // o / l, one rounding (o * (1 / l) would be two); an empty row's o is 0 and gives 0.
    const Acc sum = empty ? Acc(1) : w.l[r];
    const std::int64_t out0 = row * dv;
    const Acc* o = w.o + r * dv_padded;
    // With dropout, (o / l) / (1 - p) as FlashAttention scales: one more rounding.
    if (holds<Acc>(out_tensor)) {
      Acc* out = out_tensor.as<Acc>() + out0;
      if (pipeline.has_dropout())
        for (std::int64_t c = 0; c < dv; ++c) out[c] = o[c] / sum * rescale;
      else
        for (std::int64_t c = 0; c < dv; ++c) out[c] = o[c] / sum;
    } else {
      for (std::int64_t c = 0; c < dv; ++c) out_tensor.set(out0 + c, static_cast<double>(o[c] / sum * rescale));
    }
    if (lse)
      lse->set(row, empty ? -std::numeric_limits<double>::infinity() : static_cast<double>(w.m[r] + std::log(w.l[r])));
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
  const std::int64_t items = p.batch * p.h_q * ((p.n_q + query_tile - 1) / query_tile);
  // Dynamic scheduling, costliest first (longest-processing-time order, cost = the visible
  // pairs a query tile can touch): under a causal mask the tiles of a head differ up to n-fold,
  // and the cheap ones should fill in at the end, when the threads would otherwise wait on one
  // long item. Handing out the last tile of every head first is not the same: at n = 512 the
  // partial last tile is the cheapest.
  // The cost depends on (batch, tile) only: the key limits are per batch and query row.
  const std::int64_t heads = p.batch * p.h_q, tiles = items / heads;
  std::vector<std::int64_t> tile_cost(static_cast<std::size_t>(p.batch * tiles), 0);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < p.n_q; ++i) tile_cost[static_cast<std::size_t>(b * tiles + i / query_tile)] += a.inputs.mask.key_range(b, i).second - a.inputs.mask.key_range(b, i).first;
  std::vector<std::pair<std::int64_t, std::int64_t>> schedule(static_cast<std::size_t>(items));  // (-cost, item)
  for (std::int64_t item = 0; item < items; ++item) {
    const std::int64_t b = item % heads / p.h_q;
    schedule[static_cast<std::size_t>(item)] = {-tile_cost[static_cast<std::size_t>(b * tiles + item / heads)], item};
  }
  std::stable_sort(schedule.begin(), schedule.end());
  std::atomic<std::size_t> next{0};
  parallel_for_ranges(threads, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t t = first; t < last; ++t) {
      Scratch<Acc> scratch(base + std::size_t(t) * per_thread, p);
      for (std::size_t k = next++; k < schedule.size(); k = next++) {
        const std::int64_t item = schedule[k].second, bh = item % heads;
        query_tile_forward<Acc>(a, scratch, bh / p.h_q, bh % p.h_q, item / heads * query_tile);
      }
    }
  }, threads);
}

class CpuBlocked final : public Implementation {
 public:
  std::string name() const override { return "cpu_blocked"; }
  Capabilities describe() const override {
    Capabilities c;
    c.summary = "flash-style tiles (384 queries x 512 keys) with an online softmax, register-blocked SIMD micro-kernels, threads over (b, h, query tile); "
                "f64, or f32 for f32/f16/bf16";
    // Its backward (cpu_blocked_backward.hpp): FlashAttention-2's, P recomputed from the LSE tile by
    // tile, O(n) workspace, deterministic at any thread count.
    c.operations = {Operation::forward, Operation::backward};
    declare_every_dtype(c);  // each tensor is read and written in its own dtype
    declare_every_mask_and_shape(c);
    c.returns_lse = true;
    // Masked keys never reach P V (skipped, not multiplied by 0): NaN or Inf there stays out.
    c.masked_nonfinite_safe = true;
    // core/score_pipeline.hpp: soft-capping on the scalar path of each tile, the sink as the running
    // softmax's first term, dropout on each tile's weights after their sum.
    c.score_modifications = {ScoreModification::softcap, ScoreModification::sink, ScoreModification::dropout};
    return c;
  }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem& p) const override {
    if (p.operation == Operation::backward) return blocked_backward_workspace_bytes(p);
    const std::size_t per_thread = with_working_type(p.numerics(), [&]<class Acc>(Acc) { return Scratch<Acc>::bytes(p); });
    return per_thread * std::size_t(default_thread_count()) + alignment;
  }
  void run(const RunArgs& args) const override {
    if (args.problem.operation == Operation::backward) return blocked_backward(args);
    with_working_type(args.problem.numerics(), [&]<class Acc>(Acc) { forward<Acc>(args); });
  }
};

}  // namespace

void register_cpu_blocked(Registry& registry) { registry.add(std::make_unique<CpuBlocked>()); }

}  // namespace attn

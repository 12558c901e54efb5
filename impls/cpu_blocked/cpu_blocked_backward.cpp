#include "impls/cpu_blocked/cpu_blocked_backward.hpp"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <atomic>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/parallel.hpp"
#include "core/precision.hpp"
#include "core/score_pipeline.hpp"
#include "impls/cpu_blocked/micro_kernels.hpp"
#include "impls/cpu_blocked/simd.hpp"

namespace attn {
namespace {
// Apart from cpu_blocked.cpp's names (its tile sizes, its helpers), which a unity build puts
// in the same anonymous namespace.
namespace tiled_backward {

// Tile shapes. A key tile's K, V and its dK, dV accumulators stay in cache while the query tiles
// of a step stream past it. Timed at n = 2048, d = 64 on one core: 128 keys x 64 queries and
// 128 x 128 within 2 %, 64 x 64 and 96 x 64 5 to 8 % slower; 128 divides the usual power-of-two
// lengths, so a head's slots carry equal work. Query tiles are whole panels (2 vectors wide).
constexpr std::int64_t key_tile = 128;
constexpr std::int64_t query_tile = 64;
// Queries per step: every slot holds a dQ partial of this many rows, so it bounds that memory.
// A head's queries take at least two steps (steps_per_head): a step's compute items are what
// threads last wait for at the end of a pass, and at short lengths one item of a one-step head
// was a sixteenth of a thread's work (n = 512 ran at 94% of twice one thread's speed on two).
constexpr std::int64_t chunk_rows = 512;
constexpr std::int64_t steps_per_head = 2;
// Slots per head: the parallelism within a head, and the number of dQ partials it sums.
constexpr std::int64_t max_slots = 32;
// Sets of step rows per head where threads share a head: a step's rows are prepared, computed on
// and summed from while the steps after it use the other sets, so threads run up to two steps
// ahead of a late one. A thread with heads of its own works through their steps in order: one set.
constexpr std::int64_t shared_row_sets = 3;
constexpr std::int64_t prefetch_rows = 8;  // how far ahead prepare() fetches Q, dO and O rows
constexpr int score_rows = 12;  // micro::scores rows (keys of S^T and dP^T)
constexpr int value_rows = 6;   // micro::weighted_values rows (keys of dK, dV; queries of dQ)
constexpr int value_vectors = 4;
constexpr std::size_t alignment = 64;
static_assert(query_tile % (2 * simd::lanes<float>) == 0 && query_tile % (2 * simd::lanes<double>) == 0);
static_assert(chunk_rows % query_tile == 0);

std::size_t aligned(std::size_t bytes) { return (bytes + alignment - 1) / alignment * alignment; }
std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }
std::int64_t ceil_div(std::int64_t x, std::int64_t by) { return (x + by - 1) / by; }

// Sizes of one problem's pass for a thread count.
template <class Acc>
struct Plan {
  static constexpr std::int64_t lanes_per_vector = simd::lanes<Acc>;
  std::int64_t dk, dv, dk_padded, dv_padded;
  std::int64_t key_tiles, slots;
  std::int64_t chunk, chunks, query_tiles;  // rows per step, steps per query head, query tiles per step
  std::int64_t kv_heads, group;
  // plan_for: kv heads per step, and whether each thread works through whole kv heads of its own
  // (heads_per_step is then 1, and there is one head's buffers per thread).
  std::int64_t heads_per_step = 1;
  bool own_heads = false;
  std::int64_t row_sets() const { return own_heads ? 1 : shared_row_sets; }

  std::int64_t threads;

  Plan(const Problem& p, std::int64_t thread_count)
      : dk(p.d_k), dv(p.d_v), dk_padded(round_up(p.d_k, lanes_per_vector)), dv_padded(round_up(p.d_v, lanes_per_vector)),
        key_tiles(ceil_div(p.n_k, key_tile)), slots(std::min(key_tiles, max_slots)), chunk(std::min(chunk_rows, round_up(ceil_div(p.n_q, steps_per_head), query_tile))),
        chunks(ceil_div(p.n_q, chunk)), query_tiles(chunk / query_tile), kv_heads(p.batch * p.h_kv), group(p.h_q / p.h_kv),
        threads(thread_count) {}
};

// Hands out consecutive aligned blocks of the workspace; without a workspace, only counts their
// bytes (so workspace_bytes reports the layout run() carves, by construction).
class Carver {
 public:
  explicit Carver(std::byte* base = nullptr) : base_(base) {}
  template <class T>
  T* take(std::size_t count) {
    T* here = base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + used_);
    used_ += aligned(sizeof(T) * count);
    return here;
  }
  std::size_t used() const { return used_; }

 private:
  std::byte* base_;
  std::size_t used_ = 0;
};

// A step's rows of one query head: the slots' dQ partials, and which query tiles of them each
// slot wrote (a slot zeroes a tile's rows when it first adds to them, and dQ sums the tiles that
// were written: under a causal mask most slots see few of a step's query tiles, and zeroing and
// summing every partial row was 7 % of the pass); Q and dO widened (zeros past n_q and past the
// head dims) and transposed into panels; LSE, D and the key ranges per row and per vector of rows;
// per query tile the keys its rows see at most and whether its Q and dO are finite.
template <class Acc>
struct StepRows {
  using Index = simd::IntLane<Acc>;
  Acc *partials, *q_rows, *do_rows, *q_panels, *do_panels, *lse, *d;
  std::uint8_t* written;  // [slot][query tile]
  Index *lo, *hi;
  Index *vector_lo, *vector_hi;  // per vector of rows (row / lanes): the keys some row of it sees lie in [lo, hi)
  std::int64_t *tile_lo, *tile_hi;  // the keys a query tile's rows see lie in [tile_lo, tile_hi)
  std::uint8_t* tile_finite;
  StepRows(Carver& c, const Plan<Acc>& plan) {
    const auto rows = std::size_t(plan.chunk), tiles = std::size_t(plan.query_tiles);
    partials = c.take<Acc>(std::size_t(plan.slots) * rows * std::size_t(plan.dk_padded));
    written = c.take<std::uint8_t>(std::size_t(plan.slots) * tiles);
    q_rows = c.take<Acc>(rows * std::size_t(plan.dk_padded));
    do_rows = c.take<Acc>(rows * std::size_t(plan.dv_padded));
    q_panels = c.take<Acc>(rows * std::size_t(plan.dk));
    do_panels = c.take<Acc>(rows * std::size_t(plan.dv));
    lse = c.take<Acc>(rows);
    d = c.take<Acc>(rows);
    lo = c.take<Index>(rows);
    hi = c.take<Index>(rows);
    vector_lo = c.take<Index>(rows / std::size_t(simd::lanes<Acc>));
    vector_hi = c.take<Index>(rows / std::size_t(simd::lanes<Acc>));
    tile_lo = c.take<std::int64_t>(tiles);
    tile_hi = c.take<std::int64_t>(tiles);
    tile_finite = c.take<std::uint8_t>(tiles);
  }
};

// Per kv head of a step: dK and dV accumulated over the whole head (all its query heads and
// rows), and the sets of step rows (step s uses set s % plan.row_sets()).
template <class Acc>
struct HeadBuffers {
  Acc *dk_acc, *dv_acc;
  std::vector<StepRows<Acc>> rows;
  HeadBuffers(Carver& c, const Plan<Acc>& plan) {
    const auto keys = std::size_t(plan.key_tiles * key_tile);
    dk_acc = c.take<Acc>(keys * std::size_t(plan.dk_padded));
    dv_acc = c.take<Acc>(keys * std::size_t(plan.dv_padded));
    for (std::int64_t set = 0; set < plan.row_sets(); ++set) rows.emplace_back(c, plan);
  }
};

// Per thread: a key tile's K and V widened, the S^T (then P^T) and dP^T (then dS^T) tiles, the
// soft-cap's slopes, one O row widened, one dQ row summed.
template <class Acc>
struct ThreadScratch {
  Acc *k_rows, *v_rows, *pt, *dpt, *slope, *o_row, *dq_row;
  ThreadScratch(Carver& c, const Plan<Acc>& plan) {
    const auto tile = std::size_t(key_tile * query_tile);
    k_rows = c.take<Acc>(std::size_t(key_tile * plan.dk_padded));
    v_rows = c.take<Acc>(std::size_t(key_tile * plan.dv_padded));
    pt = c.take<Acc>(tile);
    dpt = c.take<Acc>(tile);
    slope = c.take<Acc>(tile);
    o_row = c.take<Acc>(std::size_t(plan.dv_padded));
    dq_row = c.take<Acc>(std::size_t(plan.dk_padded));
  }
};

// kv heads worked on side by side: short sequences have few slots per head, and every thread
// should have a slot to work on, as long as the heads' buffers stay within a few MiB.
constexpr std::size_t side_by_side_bytes = std::size_t(8) << 20;
// Where there are kv heads enough to share out evenly and their buffers fit in this, each thread
// works through whole heads of its own instead: threads sharing a head hand its rows, dQ partials
// and dK/dV accumulators from core to core, and on a virtual machine whose two cores sit on
// different core complexes that cost a sixth of the pass at n = 512 (rows prepared and dQ summed
// at half speed, the rest 10 % slower), in some runs and not others.
constexpr std::size_t own_heads_bytes = std::size_t(16) << 20;
template <class Acc>
Plan<Acc> plan_for(const Problem& p, std::int64_t threads) {
  Plan<Acc> plan(p, threads);
  const auto head_bytes = [&] {
    Carver one_head;
    const HeadBuffers<Acc> counted(one_head, plan);
    return one_head.used();
  };
  // One thread works through the heads in order, with the least workspace of any plan (so
  // that a run whose workspace was sized for more threads can always fall back to one).
  const bool even = plan.kv_heads % threads == 0 || plan.kv_heads >= 4 * threads;
  if (threads == 1 || (plan.kv_heads >= threads && even)) {
    plan.own_heads = true;
    if (threads == 1 || std::size_t(threads) * head_bytes() <= own_heads_bytes) return plan;
    plan.own_heads = false;
  }
  const auto fitting = std::max<std::int64_t>(1, std::int64_t(side_by_side_bytes / head_bytes()));
  plan.heads_per_step = std::clamp<std::int64_t>(ceil_div(2 * threads, plan.slots), 1, std::min(plan.kv_heads, fitting));
  return plan;
}

// The workspace: the buffers of heads_per_step kv heads (of one per thread with own_heads), then
// every thread's scratch, from a 64-byte boundary on (one alignment's worth of slack).
template <class Acc>
std::int64_t head_buffer_count(const Plan<Acc>& plan) {
  return plan.own_heads ? plan.threads : plan.heads_per_step;
}
template <class Acc>
std::size_t workspace_bytes_of(const Plan<Acc>& plan) {
  Carver carver;
  for (std::int64_t h = 0; h < head_buffer_count(plan); ++h) const HeadBuffers<Acc> counted(carver, plan);
  for (std::int64_t t = 0; t < plan.threads; ++t) const ThreadScratch<Acc> counted(carver, plan);
  return alignment + carver.used();
}

// Rows [0, count) of `rows` (`stride` elements apart; count a multiple of 2 vectors) transposed
// into panels of 2 vectors of rows ([depth][2 lanes] each): what micro::scores streams.
template <class Acc>
void pack_panels(const Acc* rows, std::int64_t stride, std::int64_t count, std::int64_t depth, Acc* panels) {
  constexpr std::int64_t L = simd::lanes<Acc>, width = 2 * L;
  const std::int64_t block_depth = depth / L * L;
  for (std::int64_t j = 0; j < count; j += L) {
    Acc* panel = panels + (j / width) * depth * width + j % width;
    const Acc* from = rows + j * stride;
    for (std::int64_t e0 = 0; e0 < block_depth; e0 += L) {
      simd::Vec<Acc> block[L];
      for (std::int64_t r = 0; r < L; ++r) block[r] = simd::load(from + r * stride + e0);
      simd::transpose<Acc>(block);
      for (std::int64_t e = 0; e < L; ++e) simd::store(panel + (e0 + e) * width, block[e]);
    }
    for (std::int64_t r = 0; r < L; ++r)
      for (std::int64_t e = block_depth; e < depth; ++e) panel[e * width + r] = from[r * stride + e];
  }
}

// Runs kernel.template operator()<V>(c) for the column vectors [0, vectors) in groups of up to
// value_vectors, c the group's first element.
template <class Acc, class Kernel>
void over_vector_groups(std::int64_t vectors, Kernel&& kernel) {
  constexpr std::int64_t L = simd::lanes<Acc>;
  for (std::int64_t v = 0; v < vectors; v += value_vectors) {
    switch (std::min<std::int64_t>(value_vectors, vectors - v)) {
      case 4: kernel.template operator()<4>(v * L); break;
      case 3: kernel.template operator()<3>(v * L); break;
      case 2: kernel.template operator()<2>(v * L); break;
      default: kernel.template operator()<1>(v * L); break;
    }
  }
}

// o[r][:width] += sum_j w(r, j) v[j][:width] over the keys whose weight is not 0, in key order:
// the products' fallback where an operand holds a NaN or an infinity, which a masked pair's
// weight of 0 must not turn into a NaN (0 * NaN). w(r, j) = w[r * row_step + j * key_step].
template <class Acc>
void weighted_nonzero(const Acc* w, std::int64_t row_step, std::int64_t key_step, const Acc* v, std::int64_t v_stride, std::int64_t rows,
                      std::int64_t keys, Acc* o, std::int64_t o_stride, std::int64_t width) {
  constexpr std::int64_t L = simd::lanes<Acc>;
  for (std::int64_t r = 0; r < rows; ++r) {
    Acc* out = o + r * o_stride;
    for (std::int64_t j = 0; j < keys; ++j) {
      const Acc weight = w[r * row_step + j * key_step];
      if (weight == Acc(0)) continue;
      for (std::int64_t c = 0; c < width; c += L) simd::store(out + c, simd::load(out + c) + weight * simd::load(v + j * v_stride + c));
    }
  }
}

// count elements of `from` into t from `offset` on: copied where t holds Acc, else rounded once.
template <class Acc>
void write_elements(Tensor& t, std::int64_t offset, std::int64_t count, const Acc* from) {
  if (holds<Acc>(t)) {
    std::copy_n(from, count, t.as<Acc>() + offset);
  } else {
    for (std::int64_t e = 0; e < count; ++e) t.set(offset + e, static_cast<double>(from[e]));
  }
}

// One step: query rows [chunk * plan.chunk, ...) of the head_in_group-th query head of each kv
// head in [first_head, first_head + heads). The first step of a kv head zeroes its dK and dV
// accumulators, its last writes them out.
struct Step {
  std::int64_t first_head, heads, head_in_group, chunk;
  bool first, last;
  std::size_t set;      // its set of step rows
  std::size_t buffers;  // its heads' buffers are heads_[buffers + head]
};

// The work of a pass and what orders it. Step s's items: prepare its rows (one per query tile
// and head), compute (one per slot and head) and sum dQ (one per query tile and head). Every
// item writes what no other running item touches and reads what is complete:
//   prepare(s)      after every compute(s - row_sets) (the rows it overwrites were theirs);
//   compute(s, k)   after every prepare(s), every sum(s - row_sets) (the partials it writes
//                   were theirs) and compute(s - 1, k) of the same head and slot (the same key
//                   tiles' dK and dV accumulators, zeroed in a kv head's first step and written
//                   out in its last);
//   sum(s)          after every compute(s).
// What an item computes never depends on when or on which thread it runs, so neither do the
// results; the order only decides how long threads wait: none at the end of a step, as a
// barrier would make them.
class Schedule {
 public:
  enum class Kind { prepare, compute, sum };
  struct Item {
    Kind kind;
    std::size_t step;
    std::int64_t index;  // prepare, sum: head * query_tiles + tile; compute: head * slots + slot
  };

  Schedule(std::vector<Step> steps, std::int64_t query_tiles, std::int64_t slots, std::int64_t row_sets)
      : steps_(std::move(steps)), query_tiles_(query_tiles), slots_(slots), row_sets_(std::size_t(row_sets)), state_(steps_.size()) {
    std::int64_t heads = 0;
    for (const Step& s : steps_) heads = std::max(heads, s.heads);
    next_step_of_chain_.assign(std::size_t(heads * slots), 0);
  }
  const std::vector<Step>& steps() const { return steps_; }

  // The next item whose inputs are complete, lowest step first (which unblocks the most), or
  // none for now. Called under the caller's lock, as are done() and finished().
  std::optional<Item> next() {
    const std::size_t last = std::min(steps_.size(), first_open_ + row_sets_ + 1);
    for (std::size_t s = first_open_; s < last; ++s) {
      State& st = state_[s];
      const std::int64_t rows = steps_[s].heads * query_tiles_;
      if (st.prepares_taken < rows && (s < row_sets_ || computed(s - row_sets_)))
        return Item{Kind::prepare, s, st.prepares_taken++};
      if (st.prepares_done == rows && (s < row_sets_ || summed(s - row_sets_)))
        for (std::size_t k = st.first_untaken; k < st.compute_order.size(); ++k) {
          const std::int64_t item = st.compute_order[k];
          if (st.taken[k] || next_step_of_chain_[std::size_t(item)] != s) continue;
          st.taken[k] = true;
          while (st.first_untaken < st.taken.size() && st.taken[st.first_untaken]) ++st.first_untaken;
          return Item{Kind::compute, s, item};
        }
      if (computed(s) && st.sums_taken < rows) return Item{Kind::sum, s, st.sums_taken++};
    }
    return std::nullopt;
  }

  // Marks an item done; `order` gives step s's compute items, costliest first, once its last
  // row is prepared.
  template <class Order>
  void done(const Item& item, Order&& order) {
    State& st = state_[item.step];
    switch (item.kind) {
      case Kind::prepare:
        if (++st.prepares_done == steps_[item.step].heads * query_tiles_) {
          st.compute_order = order(steps_[item.step]);
          st.taken.assign(st.compute_order.size(), false);
        }
        break;
      case Kind::compute:
        ++st.computes_done;
        next_step_of_chain_[std::size_t(item.index)] = item.step + 1;
        break;
      case Kind::sum:
        ++st.sums_done;
        while (first_open_ < steps_.size() && summed(first_open_)) ++first_open_;
        break;
    }
  }
  bool finished() const { return first_open_ == steps_.size(); }

 private:
  struct State {
    std::int64_t prepares_taken = 0, prepares_done = 0, computes_done = 0, sums_taken = 0, sums_done = 0;
    std::vector<std::int64_t> compute_order;
    std::vector<bool> taken;
    std::size_t first_untaken = 0;
  };
  bool computed(std::size_t s) const { return state_[s].computes_done == steps_[s].heads * slots_; }
  bool summed(std::size_t s) const { return state_[s].sums_done == steps_[s].heads * query_tiles_; }

  std::vector<Step> steps_;
  std::int64_t query_tiles_, slots_;
  std::size_t row_sets_;
  std::vector<State> state_;
  std::vector<std::size_t> next_step_of_chain_;  // per head * slots + slot: its next compute step
  std::size_t first_open_ = 0;                   // every step before it is summed
};

template <class Acc>
class Backward {
  using V = simd::Vec<Acc>;
  using IntV = simd::Int<Acc>;
  using Index = simd::IntLane<Acc>;
  static constexpr std::int64_t L = simd::lanes<Acc>;
  // A query tile's vectors of rows (row c in vector c / L): the keys [lo, hi) some row of each sees.
  struct VectorKeys {
    const Index *lo, *hi;
    bool sees(std::int64_t c, std::int64_t key) const { return key >= lo[c / L] && key < hi[c / L]; }
  };

 public:
  Backward(const RunArgs& a, const Plan<Acc>& plan, std::byte* base)
      : p_(a.problem), in_(a.inputs), plan_(plan), pipeline_(a.problem, a.inputs.mask), scale_(static_cast<Acc>(pipeline_.scale())),
        rescale_(pipeline_.dropout_rescale<Acc>()), has_bool_(!a.inputs.mask.bool_flags().empty()) {
    d_o_ = a.tensors.input(Role::d_o);
    o_ = a.tensors.input(Role::o);
    lse_ = a.tensors.input(Role::lse);
    if (d_o_ == nullptr || o_ == nullptr || lse_ == nullptr) throw std::logic_error("cpu_blocked: a backward pass needs dO and the forward's O and LSE");
    dq_ = &a.tensors.required_output(Role::dq);
    dk_ = &a.tensors.required_output(Role::dk);
    dv_ = &a.tensors.required_output(Role::dv);
    // Tensors are dense [b, h, n, d]: rows of one head are consecutive, d elements apart.
    k_in_place_ = holds<Acc>(in_.k) && plan.dk == plan.dk_padded;
    v_in_place_ = holds<Acc>(in_.v) && plan.dv == plan.dv_padded;
    dq_in_place_ = holds<Acc>(*dq_) && plan.dk == plan.dk_padded;
    dk_in_place_ = holds<Acc>(*dk_) && plan.dk == plan.dk_padded;
    dv_in_place_ = holds<Acc>(*dv_) && plan.dv == plan.dv_padded;
    Carver carver(base);
    for (std::int64_t h = 0; h < head_buffer_count(plan); ++h) heads_.emplace_back(carver, plan);
    for (std::int64_t t = 0; t < plan.threads; ++t) scratch_.emplace_back(carver, plan);
  }

  void run() {
    const auto threads = static_cast<int>(plan_.threads);
    if (plan_.own_heads) {
      std::atomic<std::int64_t> next_head{0};
      parallel_for_ranges(threads, [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t t = first; t < last; ++t)
          for (std::int64_t kv = next_head++; kv < plan_.kv_heads; kv = next_head++) {
            Schedule schedule(steps_of(kv, 1, std::size_t(t)), plan_.query_tiles, plan_.slots, plan_.row_sets());
            work_through(schedule, 1, scratch_[std::size_t(t)]);
          }
      }, threads);
      return;
    }
    std::vector<Step> steps;
    for (std::int64_t first = 0; first < plan_.kv_heads; first += plan_.heads_per_step)
      for (Step s : steps_of(first, std::min(plan_.heads_per_step, plan_.kv_heads - first), 0)) {
        s.set = steps.size() % std::size_t(plan_.row_sets());
        steps.push_back(s);
      }
    Schedule schedule(std::move(steps), plan_.query_tiles, plan_.slots, plan_.row_sets());
    parallel_for_ranges(threads, [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t t = first; t < last; ++t) work_through(schedule, threads, scratch_[std::size_t(t)]);
    }, threads);
  }

 private:
  // The steps of kv heads [first, first + heads), their buffers from heads_[buffers] on.
  std::vector<Step> steps_of(std::int64_t first, std::int64_t heads, std::size_t buffers) const {
    std::vector<Step> steps;
    for (std::int64_t k = 0; k < plan_.group; ++k)
      for (std::int64_t c = 0; c < plan_.chunks; ++c)
        steps.push_back({first, heads, k, c, k == 0 && c == 0, k == plan_.group - 1 && c == plan_.chunks - 1,
                         steps.size() % std::size_t(plan_.row_sets()), buffers});
    return steps;
  }

  // Runs the schedule's items on this thread until every one is done, `threads` threads (this
  // one among them) doing the same.
  void work_through(Schedule& schedule, int threads, ThreadScratch<Acc>& w) {
    if (threads == 1) {
      while (const std::optional<Schedule::Item> item = schedule.next()) {
        run(*item, schedule.steps()[item->step], w);
        schedule.done(*item, [&](const Step& s) { return slots_by_cost(s); });
      }
      if (!schedule.finished()) throw std::logic_error("cpu_blocked: backward schedule stalled");
      return;
    }
    std::unique_lock lock(mutex_);
    while (!schedule.finished()) {
      const std::optional<Schedule::Item> item = schedule.next();
      if (!item) {
        const std::uint32_t seen = progress_.load(std::memory_order_relaxed);
        lock.unlock();
        wait_for_change(progress_, seen, threads <= default_thread_count());
        lock.lock();
        continue;
      }
      lock.unlock();
      run(*item, schedule.steps()[item->step], w);
      lock.lock();
      schedule.done(*item, [&](const Step& s) { return slots_by_cost(s); });
      progress_.fetch_add(1, std::memory_order_release);
      progress_.notify_all();
    }
  }

  void run(const Schedule::Item& item, const Step& s, ThreadScratch<Acc>& w) {
    switch (item.kind) {
      case Schedule::Kind::prepare: prepare(s, item.index / plan_.query_tiles, item.index % plan_.query_tiles, w); break;
      case Schedule::Kind::compute: compute_slot(s, item.index / plan_.slots, item.index % plan_.slots, w); break;
      case Schedule::Kind::sum: sum_dq(s, item.index / plan_.query_tiles, item.index % plan_.query_tiles, w); break;
    }
  }

  std::int64_t batch_of(std::int64_t kv_head) const { return kv_head / p_.h_kv; }
  std::int64_t query_head(const Step& s, std::int64_t kv_head) const { return kv_head % p_.h_kv * plan_.group + s.head_in_group; }

  // Query tile `tile` of the step's rows for its `head`-th kv head: Q and dO widened (zeros past
  // n_q) and packed into panels, the LSE (+inf where the forward's is -inf, a fully masked row,
  // so that every weight of it is exp(-inf) = 0), D = <dO_i, O_i>, the key ranges.
  void prepare(const Step& s, std::int64_t head, std::int64_t tile, ThreadScratch<Acc>& w) {
    StepRows<Acc>& buffers = heads_[s.buffers + std::size_t(head)].rows[s.set];
    const std::int64_t kv = s.first_head + head, b = batch_of(kv), h = query_head(s, kv);
    const std::int64_t dk = plan_.dk, dv = plan_.dv, dkp = plan_.dk_padded, dvp = plan_.dv_padded;
    std::int64_t tile_lo = p_.n_k, tile_hi = 0;
    for (std::int64_t r = tile * query_tile; r < (tile + 1) * query_tile; ++r) {
      const std::int64_t i = s.chunk * plan_.chunk + r;
      Acc* q = buffers.q_rows + r * dkp;
      Acc* d_o = buffers.do_rows + r * dvp;
      if (i >= p_.n_q) {
        std::fill(q, q + dkp, Acc(0));
        std::fill(d_o, d_o + dvp, Acc(0));
        buffers.lse[r] = std::numeric_limits<Acc>::infinity();
        buffers.d[r] = 0;
        buffers.lo[r] = buffers.hi[r] = 0;
        continue;
      }
      // The rows a few ahead, into cache while this one is worked on: the tensors are read once
      // a pass, and waiting on each row's lines was half of preparing it at n = 512.
      if (i + prefetch_rows < p_.n_q)
        for (const Tensor* t : {&in_.q, d_o_, o_}) {
          const std::size_t element = bytes_per_element(t->dtype());
          const char* ahead = static_cast<const char*>(t->data()) + std::size_t(t->offset(b, h, i + prefetch_rows, 0)) * element;
          for (std::size_t at = 0; at < std::size_t(t->shape()[3]) * element; at += 64) __builtin_prefetch(ahead + at);
        }
      copy_as<Acc>(in_.q, in_.q.offset(b, h, i, 0), dk, q);
      std::fill(q + dk, q + dkp, Acc(0));
      copy_as<Acc>(*d_o_, d_o_->offset(b, h, i, 0), dv, d_o);
      std::fill(d_o + dv, d_o + dvp, Acc(0));
      const Acc lse = holds<Acc>(*lse_) ? lse_->as<Acc>()[lse_->offset(b, h, i, 0)] : static_cast<Acc>(lse_->get(lse_->offset(b, h, i, 0)));
      buffers.lse[r] = lse == -std::numeric_limits<Acc>::infinity() ? std::numeric_limits<Acc>::infinity() : lse;
      const Acc* o = w.o_row;
      if (holds<Acc>(*o_))
        o = o_->as<Acc>() + o_->offset(b, h, i, 0);
      else
        copy_as<Acc>(*o_, o_->offset(b, h, i, 0), dv, w.o_row);
      // In vectors, then the lanes summed: a sum in order is a chain of d_v dependent adds per row,
      // which perf showed among the pass's hot spots at n = 512.
      V lanes{};
      std::int64_t c = 0;
      for (; c + L <= dv; c += L) lanes += simd::load(d_o + c) * simd::load(o + c);
      Acc d = simd::reduce_sum<Acc>(lanes);
      for (; c < dv; ++c) d += d_o[c] * o[c];
      buffers.d[r] = d;
      const auto [lo, hi] = pipeline_.key_range(b, i);
      buffers.lo[r] = static_cast<Index>(lo);
      buffers.hi[r] = static_cast<Index>(hi);
      if (lo < hi) tile_lo = std::min(tile_lo, lo), tile_hi = std::max(tile_hi, hi);
    }
    buffers.tile_lo[tile] = tile_lo;
    buffers.tile_hi[tile] = tile_hi;
    const std::int64_t row0 = tile * query_tile;
    for (std::int64_t c = row0; c < row0 + query_tile; c += L) {
      Index first = std::numeric_limits<Index>::max(), last = std::numeric_limits<Index>::min();
      for (std::int64_t l = c; l < c + L; ++l)
        if (buffers.lo[l] < buffers.hi[l]) first = std::min(first, buffers.lo[l]), last = std::max(last, buffers.hi[l]);
      buffers.vector_lo[c / L] = first;
      buffers.vector_hi[c / L] = last;
    }
    buffers.tile_finite[tile] = simd::all_finite(buffers.q_rows + row0 * dkp, dkp, query_tile, dkp) &&
                                simd::all_finite(buffers.do_rows + row0 * dvp, dvp, query_tile, dvp);
    pack_panels(buffers.q_rows + row0 * dkp, dkp, query_tile, dk, buffers.q_panels + row0 * dk);
    pack_panels(buffers.do_rows + row0 * dvp, dvp, query_tile, dv, buffers.do_panels + row0 * dv);
  }

  // Every (kv head, slot) of the step as head * slots + slot, costliest first (the visible pairs
  // it can touch, from the query tiles' key bounds), so that the cheap ones fill in at the end.
  std::vector<std::int64_t> slots_by_cost(const Step& s) const {
    std::vector<std::pair<std::int64_t, std::int64_t>> order;  // (-cost, item)
    for (std::int64_t head = 0; head < s.heads; ++head) {
      const StepRows<Acc>& rows = heads_[s.buffers + std::size_t(head)].rows[s.set];
      for (std::int64_t slot = 0; slot < plan_.slots; ++slot) {
        std::int64_t cost = 0;
        for (std::int64_t kt = slot; kt < plan_.key_tiles; kt += plan_.slots)
          for (std::int64_t qt = 0; qt < plan_.query_tiles; ++qt)
            cost += std::max<std::int64_t>(0, std::min(rows.tile_hi[qt], (kt + 1) * key_tile) - std::max(rows.tile_lo[qt], kt * key_tile));
        order.emplace_back(-cost, head * plan_.slots + slot);
      }
    }
    std::stable_sort(order.begin(), order.end());
    std::vector<std::int64_t> items;
    for (const auto& [cost, item] : order) items.push_back(item);
    return items;
  }

  // The slot's key tiles (slot, slot + slots, ...) against every query tile of the step, into
  // the slot's dQ partial.
  void compute_slot(const Step& s, std::int64_t head, std::int64_t slot, ThreadScratch<Acc>& w) {
    HeadBuffers<Acc>& accumulators = heads_[s.buffers + std::size_t(head)];
    const StepRows<Acc>& buffers = accumulators.rows[s.set];
    const std::int64_t kv = s.first_head + head, b = batch_of(kv), g = kv % p_.h_kv, h = query_head(s, kv);
    const std::int64_t dk = plan_.dk, dv = plan_.dv, dkp = plan_.dk_padded, dvp = plan_.dv_padded;
    Acc* partial = buffers.partials + slot * plan_.chunk * dkp;
    std::uint8_t* written = buffers.written + slot * plan_.query_tiles;
    std::fill(written, written + plan_.query_tiles, std::uint8_t(0));
    for (std::int64_t kt = slot; kt < plan_.key_tiles; kt += plan_.slots) {
      const std::int64_t j0 = kt * key_tile, tile_keys = std::min(key_tile, p_.n_k - j0);
      // dK and dV accumulate in the outputs themselves where those hold Acc rows as wide as ours
      // (no copy at the end); the copies of K and V are skipped likewise. At n = 512 perf put these
      // row copies (a memmove call per row) at a seventh of the pass's samples.
      Acc* dk_acc = dk_in_place_ ? dk_->as<Acc>() + dk_->offset(b, g, j0, 0) : accumulators.dk_acc + j0 * dkp;
      Acc* dv_acc = dv_in_place_ ? dv_->as<Acc>() + dv_->offset(b, g, j0, 0) : accumulators.dv_acc + j0 * dvp;
      if (s.first) {
        std::fill(dk_acc, dk_acc + tile_keys * dkp, Acc(0));
        std::fill(dv_acc, dv_acc + tile_keys * dvp, Acc(0));
      }
      bool seen = false;
      for (std::int64_t qt = 0; qt < plan_.query_tiles; ++qt) seen = seen || (buffers.tile_lo[qt] < j0 + tile_keys && buffers.tile_hi[qt] > j0);
      if (seen) {
        const Acc* k_rows = k_in_place_ ? in_.k.as<Acc>() + in_.k.offset(b, g, j0, 0) : w.k_rows;
        const Acc* v_rows = v_in_place_ ? in_.v.as<Acc>() + in_.v.offset(b, g, j0, 0) : w.v_rows;
        for (std::int64_t j = 0; j < tile_keys && !k_in_place_; ++j) {
          copy_as<Acc>(in_.k, in_.k.offset(b, g, j0 + j, 0), dk, w.k_rows + j * dkp);
          std::fill(w.k_rows + j * dkp + dk, w.k_rows + (j + 1) * dkp, Acc(0));
        }
        for (std::int64_t j = 0; j < tile_keys && !v_in_place_; ++j) {
          copy_as<Acc>(in_.v, in_.v.offset(b, g, j0 + j, 0), dv, w.v_rows + j * dvp);
          std::fill(w.v_rows + j * dvp + dv, w.v_rows + (j + 1) * dvp, Acc(0));
        }
        const bool keys_finite = simd::all_finite(k_rows, dkp, tile_keys, dkp);
        // V's rows into cache while S is computed (a copy is there already): dP, which reads them
        // first, took half as long again on a causal diagonal (where a key tile's first pair of a
        // step is) as elsewhere.
        for (std::int64_t j = 0; j < tile_keys && v_in_place_; ++j)
          for (std::int64_t c = 0; c < dvp; c += 64 / std::int64_t(sizeof(Acc))) __builtin_prefetch(v_rows + j * dvp + c);
        for (std::int64_t qt = 0; qt < plan_.query_tiles; ++qt)
          if (buffers.tile_lo[qt] < j0 + tile_keys && buffers.tile_hi[qt] > j0)
            tile_pair(buffers, b, h, s.chunk * plan_.chunk + qt * query_tile, qt, j0, tile_keys, k_rows, v_rows, keys_finite, w, partial,
                      written[qt], dk_acc, dv_acc);
      }
      if (s.last)
        for (std::int64_t j = 0; j < tile_keys; ++j) {
          if (!dk_in_place_) write_elements(*dk_, dk_->offset(b, g, j0 + j, 0), dk, dk_acc + j * dkp);
          if (!dv_in_place_) write_elements(*dv_, dv_->offset(b, g, j0 + j, 0), dv, dv_acc + j * dvp);
        }
    }
  }

  // Query tile qt (rows from i0 on) against the key tile at j0: S^T, P^T = exp(S^T - LSE), dP^T,
  // dS^T, then dV += P^T dO, dK += dS^T Q (the key tile's rows) and dQ += dS K (the partial's).
  // Tiles are key-major (row j of a tile is key j0 + j, Br queries wide), so that the two
  // key-side products read their weights row by row and dQ's read them column by column
  // (micro::weighted_values with KeyMajor): no transpose of any tile.
  void tile_pair(const StepRows<Acc>& buffers, std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t qt, std::int64_t j0,
                 std::int64_t tile_keys, const Acc* k_rows, const Acc* v_rows, bool keys_finite, ThreadScratch<Acc>& w, Acc* partial, std::uint8_t& written, Acc* dk_acc,
                 Acc* dv_acc) const {
    const std::int64_t row0 = qt * query_tile;
    const Index* lo = buffers.lo + row0;
    const Index* hi = buffers.hi + row0;
    // The queries that see a key of this tile, and the keys they see: only that rectangle is
    // computed (near a causal diagonal, or a window's edges, much of a tile pair is masked).
    std::int64_t first_query = query_tile, last_query = -1, first_key = tile_keys, last_key = 0;
    for (std::int64_t r = 0; r < query_tile; ++r) {
      const std::int64_t from = std::max<std::int64_t>(lo[r] - j0, 0), to = std::min<std::int64_t>(hi[r] - j0, tile_keys);
      if (from >= to) continue;
      first_query = std::min(first_query, r), last_query = r;
      first_key = std::min(first_key, from), last_key = std::max(last_key, to);
    }
    if (last_query < 0) return;
    const std::int64_t c0 = first_query / (2 * L) * (2 * L), c1 = round_up(last_query + 1, 2 * L);
    const std::int64_t k0 = first_key, keys = last_key - first_key;
    const std::int64_t dk = plan_.dk, dv = plan_.dv, dkp = plan_.dk_padded, dvp = plan_.dv_padded;
    const Acc* q_panels = buffers.q_panels + row0 * dk;
    const Acc* do_panels = buffers.do_panels + row0 * dv;
    Acc* const pt = w.pt;
    Acc* const dpt = w.dpt;

    // Near a mask's edge (a causal diagonal) the rectangle is still half masked: each block of
    // the products below is cut to the rows that see its keys and the keys its rows see. Under a
    // causal mask the masked part of the diagonal's rectangles is about 31 n pairs, an eighth of
    // the n^2 / 2 visible ones at n = 512. What is cut holds weights of exactly 0: the sums are
    // the same.
    // The tile's rows [first, last) in [c0, c1) that see a key of [from, to) (tile-relative), and
    // the keys that rows [first, last) see. Where every row of the rectangle sees every key of it
    // (most tile pairs) that is all of it. Where the key ranges only move forward with the row
    // (causal masks, windows) they are found by binary search and read off the ends: a scan of
    // the rows for each block of keys was a quarter of a diagonal tile pair's time at n = 512.
    // Elsewhere the rows are scanned. A row or key that sees nothing may be included (its weights
    // are 0); none that sees something is left out.
    bool whole = true, monotone = true;
    for (std::int64_t r = c0; r < c1 && whole; ++r) whole = lo[r] <= j0 + k0 && hi[r] >= j0 + k0 + keys;
    for (std::int64_t r = c0 + 1; r < c1 && monotone && !whole; ++r) monotone = lo[r] >= lo[r - 1] && hi[r] >= hi[r - 1];
    const auto rows_seeing = [&](std::int64_t from, std::int64_t to) {
      if (whole) return std::pair{c0, c1};
      if (monotone) {
        const std::int64_t first = std::partition_point(hi + c0, hi + c1, [&](Index h) { return h <= j0 + from; }) - hi;
        const std::int64_t last = std::partition_point(lo + c0, lo + c1, [&](Index l) { return l < j0 + to; }) - lo;
        return std::pair{first, std::max(first, last)};
      }
      std::int64_t first = c1, last = c0;
      for (std::int64_t r = c0; r < c1; ++r)
        if (lo[r] < j0 + to && hi[r] > j0 + from) first = std::min(first, r), last = r + 1;
      return std::pair{first, last};
    };
    const auto keys_seen = [&](std::int64_t first, std::int64_t last) {
      if (whole) return std::pair{k0, k0 + keys};
      std::int64_t from = k0 + keys, to = k0;
      if (monotone) {
        if (first < last)
          from = std::max<std::int64_t>(lo[first] - j0, k0), to = std::max(from, std::min<std::int64_t>(hi[last - 1] - j0, k0 + keys));
        return std::pair{from, to};
      }
      for (std::int64_t r = first; r < last; ++r) {
        const std::int64_t a = std::max<std::int64_t>(lo[r] - j0, k0), b = std::min<std::int64_t>(hi[r] - j0, k0 + keys);
        if (a < b) from = std::min(from, a), to = std::max(to, b);
      }
      return std::pair{from, to};
    };
    // S^T and dP^T for the vectors of queries that see a key of the block (of a panel's two
    // vectors, a block on a causal diagonal often needs one); the vectors left out keep stale
    // values, which weights() and score_gradients() select away as masked.
    const auto products = [&]<int R>(const Acc* key_rows, std::int64_t stride, const Acc* panels, std::int64_t depth, Acc* out,
                                     std::int64_t first, std::int64_t last) {
      for (std::int64_t c = first / (2 * L) * (2 * L); c < last; c += 2 * L) {
        const bool low = first < c + L, high = last > c + L;
        if (low && high)
          micro::scores<Acc, R>(key_rows, stride, panels + c * depth, depth, out + c, query_tile);
        else if (low)
          micro::scores<Acc, R, 1>(key_rows, stride, panels + c * depth, depth, out + c, query_tile);
        else
          micro::scores<Acc, R, 1>(key_rows, stride, panels + c * depth + L, depth, out + c + L, query_tile);
      }
    };
    micro::over_row_blocks<score_rows>(keys, [&]<int R>(std::int64_t r) {
      const auto [first, last] = rows_seeing(k0 + r, k0 + r + R);
      products.template operator()<R>(k_rows + (k0 + r) * dkp, dkp, q_panels, dk, pt + (k0 + r) * query_tile, first, last);
    });
    // Per vector of rows, the keys any of its rows sees (prepared with the rows): weights() and
    // score_gradients() skip a vector its key is outside of (on a causal diagonal, about half the
    // rectangle's vectors).
    const VectorKeys seen_by_vector{buffers.vector_lo + row0 / L, buffers.vector_hi + row0 / L};
    weights(b, h, i0, j0, k0, keys, c0, c1, lo, hi, seen_by_vector, buffers.lse + row0, w);
    micro::over_row_blocks<score_rows>(keys, [&]<int R>(std::int64_t r) {
      const auto [first, last] = rows_seeing(k0 + r, k0 + r + R);
      products.template operator()<R>(v_rows + (k0 + r) * dvp, dvp, do_panels, dv, dpt + (k0 + r) * query_tile, first, last);
    });
    score_gradients(b, h, i0, j0, k0, keys, c0, c1, seen_by_vector, buffers.d + row0, w);

    // dV += P^T dO and dK += dS^T Q, summed over the queries that see the keys, in order.
    const Acc* d_o = buffers.do_rows + row0 * dvp;
    const Acc* q = buffers.q_rows + row0 * dkp;
    if (buffers.tile_finite[qt]) {
      micro::over_row_blocks<value_rows>(keys, [&]<int R>(std::int64_t r) {
        const auto [first, last] = rows_seeing(k0 + r, k0 + r + R);
        if (first >= last) return;
        const Acc* p_rows = pt + (k0 + r) * query_tile + first;
        const Acc* ds_rows = dpt + (k0 + r) * query_tile + first;
        over_vector_groups<Acc>(dvp / L, [&]<int Vectors>(std::int64_t c) {
          micro::weighted_values<Acc, R, Vectors>(p_rows, query_tile, d_o + first * dvp + c, dvp, last - first, dv_acc + (k0 + r) * dvp + c, dvp);
        });
        over_vector_groups<Acc>(dkp / L, [&]<int Vectors>(std::int64_t c) {
          micro::weighted_values<Acc, R, Vectors>(ds_rows, query_tile, q + first * dkp + c, dkp, last - first, dk_acc + (k0 + r) * dkp + c, dkp);
        });
      });
    } else {
      const std::int64_t queries = c1 - c0;
      weighted_nonzero(pt + k0 * query_tile + c0, query_tile, 1, d_o + c0 * dvp, dvp, keys, queries, dv_acc + k0 * dvp, dvp, dvp);
      weighted_nonzero(dpt + k0 * query_tile + c0, query_tile, 1, q + c0 * dkp, dkp, keys, queries, dk_acc + k0 * dkp, dkp, dkp);
    }
    // dQ += dS K, summed over the keys the rows see, in order.
    if (!written) {
      std::fill(partial + row0 * dkp, partial + (row0 + query_tile) * dkp, Acc(0));
      written = 1;
    }
    Acc* dq = partial + row0 * dkp;
    if (keys_finite) {
      micro::over_row_blocks<value_rows>(c1 - c0, [&]<int R>(std::int64_t r) {
        const auto [from, to] = keys_seen(c0 + r, c0 + r + R);
        if (from >= to) return;
        over_vector_groups<Acc>(dkp / L, [&]<int Vectors>(std::int64_t c) {
          micro::weighted_values<Acc, R, Vectors, true>(dpt + from * query_tile + c0 + r, query_tile, k_rows + from * dkp + c, dkp, to - from,
                                                         dq + (c0 + r) * dkp + c, dkp);
        });
      });
    } else {
      weighted_nonzero(dpt + k0 * query_tile + c0, 1, query_tile, k_rows + k0 * dkp, dkp, c1 - c0, keys, dq + c0 * dkp, dkp, dkp);
    }
  }

  // S^T (products <q_i, k_j>) into P^T: the pipeline's score, exp(score - LSE_i), 0 for every
  // pair the mask hides (selected, not multiplied: the products of a masked key may be NaN).
  // With soft-capping, the slope at each scaled product is kept for dS.
  void weights(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t j0, std::int64_t k0, std::int64_t keys, std::int64_t c0,
               std::int64_t c1, const Index* lo, const Index* hi, const VectorKeys& seen, const Acc* lse, ThreadScratch<Acc>& w) const {
    const bool beyond_scale = pipeline_.beyond_scale(), softcap = pipeline_.modifies_product();
    for (std::int64_t j = k0; j < k0 + keys; ++j) {
      const std::int64_t key = j0 + j;
      const IntV key_lanes = IntV{} + static_cast<Index>(key);
      Acc* row = w.pt + j * query_tile;
      for (std::int64_t c = c0; c < c1; c += L) {
        if (!seen.sees(c, key)) {
          simd::store(row + c, V{});
          continue;
        }
        const IntV visible = (key_lanes >= simd::load_int<Acc>(lo + c)) & (key_lanes < simd::load_int<Acc>(hi + c));
        V s = simd::load(row + c);
        if (!beyond_scale) {
          s = s * scale_;
        } else {
          V slope{};
          for (std::int64_t l = 0; l < L; ++l) {
            if (!visible[l]) continue;
            if (softcap) slope[l] = pipeline_.product_slope(s[l] * scale_);
            s[l] = pipeline_.score<Acc>(s[l], b, h, i0 + c + l, key);
          }
          if (softcap) simd::store(w.slope + j * query_tile + c, slope);
        }
        V weight = visible ? simd::exp<Acc>(s - simd::load(lse + c)) : V{};
        if (has_bool_)
          for (std::int64_t l = 0; l < L; ++l)
            if (weight[l] != Acc(0) && !pipeline_.visible(b, h, i0 + c + l, key)) weight[l] = 0;
        simd::store(row + c, weight);
      }
    }
  }

  // dP^T (products <dO_i, v_j>) into dS^T, through dropout (Z r on dP, and P^T becomes the kept
  // weights P Z r that dV takes), D, the soft-cap's slope and the scale; 0 wherever P is 0 (the
  // masked pairs and the weights that underflowed), whatever dP holds there.
  void score_gradients(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t j0, std::int64_t k0, std::int64_t keys, std::int64_t c0,
                       std::int64_t c1, const VectorKeys& seen, const Acc* d, ThreadScratch<Acc>& w) const {
    const bool dropout = pipeline_.has_dropout(), softcap = pipeline_.modifies_product();
    for (std::int64_t j = k0; j < k0 + keys; ++j)
      for (std::int64_t c = c0; c < c1; c += L) {
        Acc* const p_at = w.pt + j * query_tile + c;
        Acc* const dp_at = w.dpt + j * query_tile + c;
        if (!seen.sees(c, j0 + j)) {  // P is 0 there
          simd::store(dp_at, V{});
          continue;
        }
        const V p = simd::load(p_at);
        V dp = simd::load(dp_at);
        if (dropout) {
          V kept{};
          for (std::int64_t l = 0; l < L; ++l)
            if (p[l] != Acc(0) && pipeline_.kept(b, h, i0 + c + l, j0 + j)) kept[l] = rescale_;
          dp = dp * kept;
          simd::store(p_at, p * kept);
        }
        V ds = p * (dp - simd::load(d + c));
        if (softcap) ds = ds * simd::load(w.slope + j * query_tile + c);
        ds = ds * scale_;
        simd::store(dp_at, p != V{} ? ds : V{});
      }
  }

  // dQ of query tile `tile` of the step's rows for its `head`-th kv head: the partials of the
  // slots that wrote it, summed in slot order, rounded once.
  void sum_dq(const Step& s, std::int64_t head, std::int64_t tile, ThreadScratch<Acc>& w) {
    const StepRows<Acc>& buffers = heads_[s.buffers + std::size_t(head)].rows[s.set];
    const std::int64_t kv = s.first_head + head, b = batch_of(kv), h = query_head(s, kv);
    const std::int64_t dkp = plan_.dk_padded;
    const Acc* partials[max_slots];
    std::int64_t count = 0;
    for (std::int64_t slot = 0; slot < plan_.slots; ++slot)
      if (buffers.written[slot * plan_.query_tiles + tile]) partials[count++] = buffers.partials + slot * plan_.chunk * dkp;
    for (std::int64_t r = tile * query_tile; r < (tile + 1) * query_tile && s.chunk * plan_.chunk + r < p_.n_q; ++r) {
      const std::int64_t at = dq_->offset(b, h, s.chunk * plan_.chunk + r, 0);
      Acc* const row = dq_in_place_ ? dq_->as<Acc>() + at : w.dq_row;
      for (std::int64_t c = 0; c < dkp; c += L) {
        V total{};
        for (std::int64_t k = 0; k < count; ++k) total += simd::load(partials[k] + r * dkp + c);
        simd::store(row + c, total);
      }
      if (!dq_in_place_) write_elements(*dq_, at, plan_.dk, w.dq_row);
    }
  }

  const Problem& p_;
  const CaseInputs& in_;
  const Plan<Acc>& plan_;
  const ScorePipeline pipeline_;
  const Acc scale_, rescale_;
  const bool has_bool_;
  const Tensor *d_o_, *o_, *lse_;
  Tensor *dq_, *dk_, *dv_;
  // Which tensors the pass reads or accumulates in place: those holding Acc, d a whole number of
  // vectors (no padding).
  bool k_in_place_, v_in_place_, dq_in_place_, dk_in_place_, dv_in_place_;
  std::vector<HeadBuffers<Acc>> heads_;
  std::vector<ThreadScratch<Acc>> scratch_;
  // The shared schedule's lock, and the items done so far (changed under it): a thread with
  // nothing to do waits for that count to change, spinning first, since items finish every few
  // microseconds at short lengths.
  std::mutex mutex_;
  std::atomic<std::uint32_t> progress_{0};
};

template <class Acc>
void backward(const RunArgs& a) {
  const Problem& p = a.problem;
  if (p.n_k > std::numeric_limits<simd::IntLane<Acc>>::max()) throw std::runtime_error("cpu_blocked: n_k too large for the backward pass's key indices");
  // Every buffer starts on a 64-byte boundary, so results do not depend on the workspace's address.
  const std::size_t shift = (alignment - reinterpret_cast<std::uintptr_t>(a.workspace.data()) % alignment) % alignment;
  // The threads asked for, or as many as the workspace holds the buffers of.
  std::int64_t threads = a.threads > 0 ? a.threads : default_thread_count();
  while (threads > 1 && workspace_bytes_of(plan_for<Acc>(p, threads)) > a.workspace.size()) --threads;
  const Plan<Acc> plan = plan_for<Acc>(p, threads);
  if (workspace_bytes_of(plan) > a.workspace.size()) throw std::runtime_error("cpu_blocked: workspace too small for the backward pass");
  Backward<Acc>(a, plan, a.workspace.data() + shift).run();
}

}  // namespace tiled_backward
}  // namespace

std::size_t blocked_backward_workspace_bytes(const Problem& p, int threads) {
  const std::int64_t count = threads > 0 ? threads : default_thread_count();
  return with_working_type(p.numerics(), [&]<class Acc>(Acc) { return tiled_backward::workspace_bytes_of(tiled_backward::plan_for<Acc>(p, count)); });
}

void blocked_backward(const RunArgs& args) {
  with_working_type(args.problem.numerics(), [&]<class Acc>(Acc) { tiled_backward::backward<Acc>(args); });
}

}  // namespace attn

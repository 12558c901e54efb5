#pragma once
// The one problem description passed everywhere: an operation and four plain parts, the shape
// (extents), the variant (window, masks, bias, scale), the numerics (a dtype per role, the
// accumulation) and the data (regime, seed, layout). It validates itself, prints as a one-line repro string that
// parse_problem reads back to an equal problem, and serialises to JSON; those four and the short
// label are generated from one table of fields (core/problem_fields.cpp), which a new field joins.
// Derived figures (visible pairs, FLOPs, bytes) are methods so every report counts them the same way.
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/dtype.hpp"
#include "core/precision.hpp"
#include "core/tensor_role.hpp"

namespace attn {

// Where a window's diagonal lies: query i's diagonal key is i + delta, with delta 0 (top-left,
// PyTorch's convention) or n_k - n_q (bottom-right, FlashAttention's).
enum class Align { top_left, bottom_right };

// The three windows that a `causal=` token, bench's --masks and the plugin ABI v1 can name.
enum class Causal { none, top_left, bottom_right };

// Which keys each query sees by position (DESIGN.md, "Variants, normatively", step 4): query i
// sees key j iff i + delta - left <= j <= i + delta + right. Either side may be unbounded; no
// window is {unbounded, unbounded}, causal is {unbounded, 0}, a sliding window (Mistral) is
// {w, 0}. Padding and the boolean mask intersect with it (Mask::key_range).
struct Window {
  static constexpr std::int64_t unbounded = std::numeric_limits<std::int64_t>::max();
  std::int64_t left = unbounded;   // keys before the diagonal
  std::int64_t right = unbounded;  // keys after the diagonal
  Align align = Align::top_left;

  static constexpr Window of(Causal c) {
    return c == Causal::none ? Window{} : Window{unbounded, 0, c == Causal::top_left ? Align::top_left : Align::bottom_right};
  }
  bool is_none() const { return left == unbounded && right == unbounded; }
  bool is_causal() const { return left == unbounded && right == 0; }
  // none, top_left or bottom_right; empty for any other window.
  std::optional<Causal> as_causal() const;
  std::int64_t delta(std::int64_t n_q, std::int64_t n_k) const { return align == Align::bottom_right ? n_k - n_q : 0; }
  // The keys [lo, hi) of [0, n_k) that query i sees; lo == hi when none.
  std::pair<std::int64_t, std::int64_t> key_range(std::int64_t i, std::int64_t n_q, std::int64_t n_k) const;
  // Without a bound the diagonal does not matter: no window equals no window whatever its align.
  bool operator==(const Window& o) const { return left == o.left && right == o.right && (is_none() || align == o.align); }
};

// How the tensors are laid out in memory when handed to an implementation. The harness computes
// in dense BHSD; a third-party kernel may take [b, s, h, d] (FlashAttention's, PyTorch's) or any
// strides, which the harness then passes with padding between rows and heads so that a kernel
// assuming dense strides reads the wrong elements. Built-in implementations take BHSD only.
enum class Layout { bhsd, bshd, strided };

// How the inputs are drawn (DESIGN.md, "Input regimes matter more than tolerances").
enum class Regime {
  diffuse,     // scores with unit variance
  peaked,      // scores with standard deviation 8 (what unscaled d_k = 64 gives)
  saturated,   // one dominant key per head: weights close to one-hot
  large,       // scores near the dtype's overflow
  sparse_int,  // small integers in [-2, 2], mostly zero: every input exactly representable
  uniform01,   // every input uniform in [0, 1)
};

// Which query heads and batches a generated boolean mask or bias varies over; the other
// dimensions broadcast (extent 1).
enum class Broadcast { shared, per_batch, per_head, per_batch_head };

// The one home of the broadcast rule: a generated mask or bias is stored [1|b, 1|h_q, n_q, n_k],
// varying over batch and/or query head as its Broadcast says and of extent 1 (stride 0) over the
// others. Mask, the case files and the CUDA plans take their extents and strides from here.
bool varies_over_batch(Broadcast b);
bool varies_over_head(Broadcast b);
struct BroadcastStrides {
  std::int64_t batch = 0, head = 0;  // in elements; 0 where broadcast
};
BroadcastStrides broadcast_strides(Broadcast b, std::int64_t h_q, std::int64_t n_q, std::int64_t n_k);

struct KeyPadding {
  enum class Kind { none, per_batch, per_query };
  Kind kind = Kind::none;
  // per_batch: valid_len[b]; per_query: valid_len[b * n_q + i]. Leading keys are visible.
  std::vector<std::int64_t> valid_len;
  bool operator==(const KeyPadding&) const = default;
};

// A boolean mask drawn from the problem's seed: each (query, key) is kept with probability keep.
struct BoolMaskSpec {
  bool enabled = false;
  double keep = 1.0;
  Broadcast broadcast = Broadcast::shared;
  // A disabled mask's settings mean nothing (and are not in the repro string).
  bool operator==(const BoolMaskSpec& o) const {
    return enabled == o.enabled && (!enabled || (keep == o.keep && broadcast == o.broadcast));
  }
};

// An additive float bias, rounded to the bias role's dtype: either drawn from the problem's seed
// (normal with standard deviation stddev, over `broadcast`), or a function of the positions,
// ALiBi's linear bias (Press et al., 2022): query head h adds -alibi_slope(h, h_q) * |i + delta - j|
// to the score of key j, the same for every batch (broadcast per_head; stddev unused), with the
// diagonal's delta of the window (alibi_delta).
struct BiasSpec {
  enum class Kind { normal, alibi };
  bool enabled = false;
  double stddev = 1.0;
  Broadcast broadcast = Broadcast::shared;
  Kind kind = Kind::normal;
  bool operator==(const BiasSpec& o) const {
    if (enabled != o.enabled || kind != o.kind) return false;
    return !enabled || kind == Kind::alibi || (stddev == o.stddev && broadcast == o.broadcast);
  }
  static BiasSpec alibi() { return {true, 1.0, Broadcast::per_head, Kind::alibi}; }
};
// ALiBi's slope of query head h of `heads`: 2^(-8(h+1)/heads) when heads is a power of two; else
// the slopes of the largest power of two below it, then every other slope of twice that power
// (the paper's reference code, as FlashAttention's alibi_slopes are usually built).
double alibi_slope(std::int64_t head, std::int64_t heads);

// What is computed. Only the forward pass is implemented: every implementation declares the
// operations it computes (Capabilities::operations, forward by default), covers() refuses the
// others naming them, and verify judges the forward pass only (its reference computes nothing else).
enum class Operation { forward, backward };

// The extents. Per-sequence lengths (cu_seqlens, packed batches) and paged K/V join here later.
struct ProblemShape {
  std::int64_t batch = 1;
  std::int64_t h_q = 1;
  std::int64_t h_kv = 1;
  std::int64_t n_q = 1;
  std::int64_t n_k = 1;
  std::int64_t d_k = 64;
  std::int64_t d_v = 64;

  // Query head h reads kv head kv_head(h) (MHA, GQA and MQA are one rule).
  std::int64_t kv_head(std::int64_t h) const { return h / (h_q / h_kv); }
  std::int64_t rows() const { return batch * h_q * n_q; }  // output rows, one per (b, h, i)
  bool operator==(const ProblemShape&) const = default;
};

// Attention sinks (gpt-oss, StreamingLLM, ggml): a logit sigma_h per query head that joins every
// row's softmax denominator and carries no value (core/score_pipeline.hpp, step 5). Drawn per head
// from the problem's seed, normal with mean `mean` and standard deviation 1 (a mean far above the
// scores makes rows that mostly attend to the sink), or given, one per query head. Either way
// rounded to f32, the dtype kernels take them in.
struct SinkSpec {
  bool enabled = false;
  double mean = 0;
  std::vector<double> given;  // h_q values; empty: drawn
  bool operator==(const SinkSpec& o) const {
    return enabled == o.enabled && (!enabled || (given == o.given && (!given.empty() || mean == o.mean)));
  }
};

// Dropout (training kernels; core/score_pipeline.hpp, step 6): each weight of the softmax is kept
// with probability 1 - p and scaled by 1 / (1 - p), O = (P * Z / (1 - p)) V with Z the 0/1 keep
// mask, and the LSE is the softmax's, before dropout. Z comes from the implementation's own random
// stream seeded with `seed` (unset: the problem's seed), and the implementation reports it (Role::
// keep): the harness judges O given that Z, and Z by its statistics. p is rounded to f32, the dtype
// kernels take it in, so every implementation rescales by the same 1 / (1 - p).
struct DropoutSpec {
  double p = 0;  // 0: none
  std::optional<std::uint64_t> seed;
  bool enabled() const { return p > 0; }
  bool operator==(const DropoutSpec& o) const { return p == o.p && (!enabled() || seed == o.seed); }
};

// Which keys each query sees and how scores are formed (core/score_pipeline.hpp applies them in
// order).
struct ProblemVariant {
  Window window;
  KeyPadding padding;
  BoolMaskSpec bool_mask;
  BiasSpec bias;
  std::optional<double> scale;  // unset: 1/sqrt(d_k)
  // Soft-capping (Gemma 2, FlashAttention >= 2.6): the scaled product s becomes c * tanh(s / c),
  // before the additive terms. Unset: none.
  std::optional<double> softcap;
  SinkSpec sinks;
  DropoutSpec dropout;
  bool operator==(const ProblemVariant&) const = default;
};

// The roles that hold a problem's data (the plugin ABI's ATTNBENCH_ROLE_DATA): the inputs, the
// bias, the output and the gradients. Each has the problem's dtype unless given its own.
inline constexpr std::array<Role, 9> data_roles{Role::q, Role::k, Role::v, Role::bias, Role::o, Role::d_o, Role::dq, Role::dk, Role::dv};
bool is_data_role(Role role);

// The types: a dtype per data role and the precision sums and the softmax are carried in.
// `dtype` is every data role's; `role_dtypes` gives a role its own (a mixed-precision problem:
// f16 inputs written to an f32 output, dtypes=o:f32). dtype_of(role) is the one place that
// reads them: the inputs are drawn in their roles' dtypes, the output and the reference's rounding
// are in o's, the pass rule's floor in ulps of o's. An entry equal to `dtype` is the same problem
// as none (operator==, and repro() leaves it out).
// The accumulation, when unset, is the working precision (core/precision.hpp) of the widest
// input (q, k, v, d_o): f64 when one is f64, else f32. Every implementation, the LSE tensors and
// the pass rule's unit roundoff follow it; working_dtype(numerics) is the one place that reads it.
// No implementation nor the pass rule honours another accumulation yet, so validate() refuses one
// that differs from the working precision (acc=f64 on f32 inputs) rather than let it be ignored;
// an accumulation equal to it is the same problem as none.
struct ProblemNumerics {
  DType dtype = DType::f32;
  std::optional<DType> accumulation;
  std::map<Role, DType> role_dtypes;  // data roles only (validate() refuses another)

  // A data role's dtype; lse's is the working dtype. Throws std::invalid_argument for a role
  // that holds no floating-point data of the problem (mask, the sequence indices).
  DType dtype_of(Role role) const;
  // Some data role's dtype differs from `dtype`.
  bool mixed() const;
  bool operator==(const ProblemNumerics& o) const;
};
// "f16", or with the roles of their own dtype "f16+o:f32" (labels, projections' changes).
std::string dtype_summary(const ProblemNumerics& numerics);

// The working precision the inputs' dtypes give, before an accumulation is named.
DType default_working_dtype(const ProblemNumerics& numerics);
DType working_dtype(const ProblemNumerics& numerics);
// with_working_type (core/precision.hpp) for a problem's numerics.
template <class F>
decltype(auto) with_working_type(const ProblemNumerics& numerics, F&& f) {
  return with_working_type(working_dtype(numerics), std::forward<F>(f));
}

// How the inputs are drawn and laid out.
struct ProblemData {
  Regime regime = Regime::diffuse;
  std::uint64_t seed = 0;
  Layout layout = Layout::bhsd;  // only a plugin sees anything but BHSD
  bool operator==(const ProblemData&) const = default;
};

// The parts are the model; Problem inherits them so that the flat access every caller uses
// (p.n_q, p.dtype, p.window, ...; some 2700 uses) keeps working unchanged, and code that is about
// one part can take that part alone (shape(), variant(), numerics(), data()). Still an aggregate:
// Problem{} is the default problem.
struct Problem : ProblemShape, ProblemVariant, ProblemNumerics, ProblemData {
  Operation operation = Operation::forward;

  bool operator==(const Problem&) const = default;

  ProblemShape& shape() { return *this; }
  const ProblemShape& shape() const { return *this; }
  ProblemVariant& variant() { return *this; }
  const ProblemVariant& variant() const { return *this; }
  ProblemNumerics& numerics() { return *this; }
  const ProblemNumerics& numerics() const { return *this; }
  ProblemData& data() { return *this; }
  const ProblemData& data() const { return *this; }
  // The same case as another operation: a backward problem's forward pass, or the reverse.
  Problem with_operation(Operation other) const {
    Problem p = *this;
    p.operation = other;
    return p;
  }

  double effective_scale() const;
  bool has_mask() const;

  // Throws InputError naming the first offending field.
  void validate() const;

  // One line, `key=value` tokens separated by spaces; parse_problem reads it back exactly.
  std::string repro() const;
  // A short human label for tables: operation (unless forward), shape, dtype, mask and regime, no data.
  std::string label() const;

  // Exact count of visible (query, key) pairs over all batches and query heads.
  std::int64_t visible_pairs() const;
  // The matrix products' multiply-adds, times 2, over the exact visible pairs P (the softmax's
  // elementwise work not counted, as nobody's convention counts it). Forward: 2 * b * h_q * P *
  // (d_k + d_v) (S = Q K^T, O = P V). Backward, S recomputed as FlashAttention-2 does: 2 * b * h_q *
  // P * (3 d_k + 2 d_v) (S = Q K^T, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q).
  double flops() const;
  // The published convention: 4 * b * h * n_q * n_k * d (d = (d_k + d_v) / 2), halved for causal;
  // for another window (no convention is published) the exact count of the forward pass. A
  // backward pass is 2.5 times its forward's (FlashAttention's papers' convention), which equals
  // the exact count when d_k = d_v and the window is none or causal.
  double flops_published() const;
  // Forward: reading Q, K, V (and the mask or bias) once and writing O once. Backward: reading
  // Q, K, V, O, dO and the LSE (and the mask or bias) once and writing dQ, dK, dV once.
  double bytes_min() const;
};

Problem parse_problem(std::string_view repro);
// ALiBi's diagonal: the window's (DESIGN: one alignment shared by causal, window and ALiBi), and
// bottom-right, FlashAttention's, when the problem has no window and so no alignment of its own.
std::int64_t alibi_delta(const Problem& p);
// The sink logit of each query head (h_q values, each an f32), drawn or given; empty without sinks.
std::vector<double> sink_logits(const Problem& p);
// The seed of dropout's random stream: dropout_seed= when given, else the problem's seed.
std::uint64_t dropout_seed(const Problem& p);
// "o:f32,q:f16", the dtypes= token's value, naming `key` in its errors (unknown or non-data role,
// a role twice, a bad dtype).
std::map<Role, DType> parse_role_dtypes(std::string_view key, std::string_view text);
// The data roles a problem's operation reads or writes: q k v o (and bias when it has one) forward;
// the backward adds d_o dq dk dv.
std::vector<Role> data_roles_of(const Problem& problem);
  // throws InputError naming the token
// Elements of a generated mask or bias with this broadcast (in double: checked before validation).
double broadcast_elements(const Problem& p, Broadcast b);

std::string_view to_string(Causal causal);
std::string_view to_string(Align align);
// A causal window as its `causal=` value (none, top_left, bottom_right); another as LEFT,RIGHT@ALIGN
// with `inf` for an unbounded side, e.g. 128,0@bottom_right.
std::string to_string(const Window& window);
std::string_view to_string(Operation operation);
Operation parse_operation(std::string_view text);
std::string_view to_string(Regime regime);
std::string_view to_string(Broadcast broadcast);
std::string_view to_string(Layout layout);
Layout parse_layout(std::string_view text);
const std::vector<Layout>& all_layouts();  // bhsd first: the order layouts are handed out in
Regime parse_regime(std::string_view text);
const std::vector<Regime>& all_regimes();

void to_json(nlohmann::json& j, const Problem& p);
void from_json(const nlohmann::json& j, Problem& p);

}  // namespace attn

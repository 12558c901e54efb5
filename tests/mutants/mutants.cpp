#include "tests/mutants/mutants.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace attn::mutants {
namespace {

using M = Mistake;

// ---- The mistaken pieces of the mask, evaluated locally (core/mask.cpp's rules, one changed) ----

// Mask::key_limit with the causal alignment and the padding as the mutant (mis)reads them.
std::int64_t key_limit_as_written(Mistake mistake, const Problem& p, std::int64_t b, std::int64_t i) {
  Causal causal = p.causal;
  if (mistake == M::causal_ignored) causal = Causal::none;
  if (mistake == M::causal_alignment_swapped) {
    if (causal == Causal::top_left)
      causal = Causal::bottom_right;
    else if (causal == Causal::bottom_right)
      causal = Causal::top_left;
  }
  std::int64_t limit = p.n_k;
  if (causal == Causal::top_left) limit = std::min(limit, i + 1);
  if (causal == Causal::bottom_right) limit = std::min(limit, i + 1 + (p.n_k - p.n_q));
  if (mistake != M::padding_ignored) {
    if (p.padding.kind == KeyPadding::Kind::per_batch)
      limit = std::min(limit, p.padding.valid_len[static_cast<std::size_t>(b)]);
    if (p.padding.kind == KeyPadding::Kind::per_query)
      limit = std::min(limit, p.padding.valid_len[static_cast<std::size_t>(b * p.n_q + i)]);
  }
  return std::max<std::int64_t>(limit, 0);
}

// The boolean mask's flag for (b, h, i, j), whatever causality and padding say. The flags are
// [bb, hh, n_q, n_k] with bb = batch or 1 and hh = h_q or 1 by the mask's broadcast.
bool bool_flag(const Problem& p, const Mask& mask, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  const auto& flags = mask.bool_flags();
  if (flags.empty()) return true;
  const Broadcast bc = p.bool_mask.broadcast;
  const bool per_batch = bc == Broadcast::per_batch || bc == Broadcast::per_batch_head;
  const bool per_head = bc == Broadcast::per_head || bc == Broadcast::per_batch_head;
  const std::int64_t index =
      (((per_batch ? b : 0) * (per_head ? p.h_q : 1) + (per_head ? h : 0)) * p.n_q + i) * p.n_k + j;
  return flags[static_cast<std::size_t>(index)] != 0;
}

// ---- The other mistakes' pieces ----

double scale_as_written(Mistake mistake, const Problem& p) {
  if (mistake == M::no_scaling) return 1.0;
  if (mistake == M::scale_one_over_dk && !p.scale) return 1.0 / double(p.d_k);
  return p.effective_scale();
}

std::int64_t kv_head_as_written(Mistake mistake, const Problem& p, std::int64_t h) {
  return mistake == M::gqa_head_mapping_ignored ? h % p.h_kv : p.kv_head(h);
}

// The query head whose output row receives head h's result.
std::int64_t output_head_as_written(Mistake mistake, const Problem& p, std::int64_t h) {
  return mistake == M::query_rows_swapped_between_heads ? (h + 1) % p.h_q : h;
}

// The stand-in score a masked_fill gives masked keys: -1, or -1e4 in f16 (where -1e9 overflows).
double masked_fill_value(const Problem& p) { return p.dtype == DType::f16 ? -1e4 : -1.0; }

// ---- The one implementation ----

// Scores in Acc (double for f64 problems, float otherwise), in the same order as cpu_naive:
// dot over d_k, times scale, plus bias; row max; exp(s - m); sum; divide; P V over keys in order.
template <class Acc>
void run_in(Mistake mistake, const RunArgs& a) {
  const Problem& p = a.problem;
  const CaseInputs& in = a.inputs;
  const auto nk = static_cast<std::size_t>(p.n_k);
  const auto dk = static_cast<std::size_t>(p.d_k), dv = static_cast<std::size_t>(p.d_v);
  const Acc scale = static_cast<Acc>(scale_as_written(mistake, p));
  constexpr Acc excluded = -std::numeric_limits<Acc>::infinity();  // exp(-inf - m) == 0 exactly
  const Acc fill = static_cast<Acc>(masked_fill_value(p));

  std::vector<Acc> q(dk), k(nk * dk), v(nk * dv), s(nk), o(dv);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t h = 0; h < p.h_q; ++h) {
      const std::int64_t g = kv_head_as_written(mistake, p, h);
      for (std::size_t e = 0; e < nk * dk; ++e) k[e] = static_cast<Acc>(in.k.get(in.k.offset(b, g, 0, 0) + std::int64_t(e)));
      for (std::size_t e = 0; e < nk * dv; ++e) v[e] = static_cast<Acc>(in.v.get(in.v.offset(b, g, 0, 0) + std::int64_t(e)));

      for (std::int64_t i = 0; i < p.n_q; ++i) {
        for (std::size_t t = 0; t < dk; ++t) q[t] = static_cast<Acc>(in.q.get(in.q.offset(b, h, i, std::int64_t(t))));
        // Scores, scaled and masked.
        for (std::size_t j = 0; j < nk; ++j) {
          if (!sees(mistake, p, in.mask, b, h, i, std::int64_t(j))) {
            s[j] = mistake == M::masked_fill_minus_one ? fill : excluded;
            continue;
          }
          Acc dot = 0;
          for (std::size_t t = 0; t < dk; ++t) dot += q[t] * k[j * dk + t];
          s[j] = dot * scale + static_cast<Acc>(in.mask.bias(b, h, i, std::int64_t(j)));
        }
        Acc m = excluded;
        for (std::size_t j = 0; j < nk; ++j) m = std::max(m, s[j]);

        const std::int64_t row = (b * p.h_q + h) * p.n_q + i;  // LSE and weights: the right row
        const std::int64_t out_row = (b * p.h_q + output_head_as_written(mistake, p, h)) * p.n_q + i;
        if (m == excluded) {  // every key masked: zeros, LSE -inf
          for (std::size_t c = 0; c < dv; ++c) a.out.set(out_row * p.d_v + std::int64_t(c), 0.0);
          if (a.lse) a.lse->set(row, -std::numeric_limits<double>::infinity());
          if (a.weights)
            for (std::size_t j = 0; j < nk; ++j) a.weights->set(row * p.n_k + std::int64_t(j), 0.0);
          continue;
        }
        // Softmax: exponentiate (less the row max), sum, normalise.
        const bool subtract_max = mistake != M::no_max_subtraction;
        Acc sum = 0;
        for (std::size_t j = 0; j < nk; ++j) {
          s[j] = subtract_max ? std::exp(s[j] - m) : std::exp(s[j]);
          sum += s[j];
        }
        if (mistake != M::weights_not_normalised)
          for (std::size_t j = 0; j < nk; ++j) s[j] /= sum;
        // Weighted sum of V. Keys of weight 0 (every excluded key) are skipped, so a masked key's
        // V (NaN or infinite included) changes nothing.
        std::fill(o.begin(), o.end(), Acc(0));
        for (std::size_t j = 0; j < nk; ++j)
          if (s[j] != Acc(0))
            for (std::size_t c = 0; c < dv; ++c) o[c] += s[j] * v[j * dv + c];
        for (std::size_t c = 0; c < dv; ++c) a.out.set(out_row * p.d_v + std::int64_t(c), static_cast<double>(o[c]));
        if (a.lse) a.lse->set(row, static_cast<double>(subtract_max ? m + std::log(sum) : std::log(sum)));
        if (a.weights)
          for (std::size_t j = 0; j < nk; ++j) a.weights->set(row * p.n_k + std::int64_t(j), static_cast<double>(s[j]));
      }
    }
  }
}

std::string_view description(Mistake mistake) {
  switch (mistake) {
    case M::none: return "no mistake (the control)";
    case M::no_scaling: return "scores not scaled (scale 1)";
    case M::scale_one_over_dk: return "default scale 1/d_k instead of 1/sqrt(d_k)";
    case M::masked_fill_minus_one: return "masked scores filled with -1 (-1e4 in f16) instead of excluded";
    case M::causal_ignored: return "the causal mask ignored";
    case M::causal_alignment_swapped: return "causal alignment swapped (top-left <-> bottom-right)";
    case M::padding_ignored: return "key padding ignored";
    case M::no_max_subtraction: return "softmax without subtracting the row max";
    case M::last_key_tile_dropped: return "the partial last key tile of 16 dropped when n_k > 16";
    case M::gqa_head_mapping_ignored: return "kv head h % h_kv instead of h / (h_q / h_kv)";
    case M::weights_not_normalised: return "softmax numerators never divided by the row sum (LSE right)";
    case M::query_rows_swapped_between_heads: return "output row of head h written at head (h + 1) % h_q";
  }
  return "?";
}

class MutantAttention final : public Implementation {
 public:
  explicit MutantAttention(Mistake mistake) : mistake_(mistake) {}
  std::string name() const override { return "mutant_" + std::string(to_string(mistake_)); }
  Capabilities describe() const override {
    Capabilities c;
    c.summary = "deliberately wrong attention (test only): " + std::string(description(mistake_)) +
                "; single-threaded, f64 or f32 for f32/f16/bf16";
    c.dtypes = {DType::f64, DType::f32, DType::f16, DType::bf16};
    c.returns_lse = true;
    c.returns_weights = true;
    c.deterministic = true;
    c.fully_masked = FullyMaskedPolicy::zeros;
    return c;
  }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem&) const override { return 0; }  // allocates its own
  void run(const RunArgs& args) const override {
    if (args.problem.dtype == DType::f64)
      run_in<double>(mistake_, args);
    else
      run_in<float>(mistake_, args);
  }

 private:
  Mistake mistake_;
};

}  // namespace

std::string_view to_string(Mistake mistake) {
  switch (mistake) {
    case M::none: return "control";
    case M::no_scaling: return "no_scaling";
    case M::scale_one_over_dk: return "scale_one_over_dk";
    case M::masked_fill_minus_one: return "masked_fill_minus_one";
    case M::causal_ignored: return "causal_ignored";
    case M::causal_alignment_swapped: return "causal_alignment_swapped";
    case M::padding_ignored: return "padding_ignored";
    case M::no_max_subtraction: return "no_max_subtraction";
    case M::last_key_tile_dropped: return "last_key_tile_dropped";
    case M::gqa_head_mapping_ignored: return "gqa_head_mapping_ignored";
    case M::weights_not_normalised: return "weights_not_normalised";
    case M::query_rows_swapped_between_heads: return "query_rows_swapped_between_heads";
  }
  return "?";
}

const std::vector<Mistake>& all_mistakes() {
  static const std::vector<Mistake> mistakes{
      M::no_scaling,         M::scale_one_over_dk,     M::masked_fill_minus_one,    M::causal_ignored,
      M::causal_alignment_swapped, M::padding_ignored, M::no_max_subtraction,       M::last_key_tile_dropped,
      M::gqa_head_mapping_ignored, M::weights_not_normalised, M::query_rows_swapped_between_heads};
  return mistakes;
}

bool sees(Mistake mistake, const Problem& p, const Mask& mask, std::int64_t b, std::int64_t h, std::int64_t i,
          std::int64_t j) {
  switch (mistake) {
    case M::causal_ignored:
    case M::causal_alignment_swapped:
    case M::padding_ignored:
      return j < key_limit_as_written(mistake, p, b, i) && bool_flag(p, mask, b, h, i, j);
    case M::last_key_tile_dropped: {
      // Loops over full tiles, then forgets the remainder tile (only once a full tile exists).
      const std::int64_t full_tiles_end = p.n_k / key_tile * key_tile;
      if (p.n_k > key_tile && j >= full_tiles_end) return false;
      return mask.visible(b, h, i, j);
    }
    default: return mask.visible(b, h, i, j);
  }
}

std::unique_ptr<Implementation> make_mutant(Mistake mistake) { return std::make_unique<MutantAttention>(mistake); }

std::vector<std::unique_ptr<Implementation>> make_all() {
  std::vector<std::unique_ptr<Implementation>> all;
  for (Mistake m : all_mistakes()) all.push_back(make_mutant(m));
  return all;
}

std::unique_ptr<Implementation> make_correct_control() { return make_mutant(M::none); }

}  // namespace attn::mutants

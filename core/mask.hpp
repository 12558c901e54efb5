#pragma once
// The mask of a problem, materialised: which keys each query sees and the additive bias.
// Every part composes by intersection (DESIGN.md); a masked key is excluded exactly.
//   window:              query i sees key j iff i + delta - left <= j <= i + delta + right, delta
//                        0 (top_left) or n_k - n_q (bottom_right); causal is {unbounded, 0}
//   key padding:         query i of batch b sees key j iff j < valid_len
//   boolean mask:        drawn from the problem's seed, broadcast over batch and/or head, or given
//                        (a user's own mask, `attnbench check --inputs`: Mask::given)
#include <cstdint>
#include <utility>
#include <vector>

#include "core/problem.hpp"
#include "core/tensor.hpp"

namespace attn {

class Mask {
 public:
  explicit Mask(const Problem& problem);  // generates the boolean mask and bias from the seed

  // A user's own mask and bias instead of seeded ones; the window and padding still come from the
  // problem. flags: [1|b, 1|h_q, n_q, n_k], nonzero = visible, empty = no boolean mask; bias:
  // [1|b, 1|h_q, n_q, n_k] in the problem's dtype, numel 0 = none. An extent of 1 broadcasts.
  // The problem's bool_mask/bias specs are not consulted (nothing is drawn from its seed).
  static Mask given(const Problem& problem, std::vector<std::uint8_t> flags, bool flags_per_batch, bool flags_per_head, Tensor bias);

  // This mask's boolean flags and bias (drawn or given) under another problem's window and
  // padding, of the same extents: what a hypothesis about the window or the padding predicts
  // with, whether the inputs came from a seed or from a user (nothing is drawn again). ALiBi's
  // bias is a function of the window's alignment, so a problem with bias=alibi gets it rebuilt.
  Mask with_visibility_of(const Problem& problem) const;
  // This mask with another bias ([1|b, 1|h_q, n_q, n_k] in the bias role's dtype): what a
  // hypothesis about the bias (ALiBi's slopes reversed) predicts with.
  Mask with_bias(Tensor bias) const;

  // This mask with dropout's keep mask as an implementation reported it ([b, h_q, n_q, n_k],
  // nonzero = kept): what the reference and the naive yardstick compute dropout with
  // (ScorePipeline::kept). A generated mask has none: an implementation draws its own.
  Mask with_keep(const Tensor& keep) const;
  bool has_keep() const { return !keep_.empty(); }
  bool kept(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return keep_[static_cast<std::size_t>(((b * h_q_ + h) * n_q_ + i) * n_k_ + j)] != 0;
  }

  // Query i of batch b sees keys in [lo, hi) at most: the window and padding intersected (the
  // bool mask may mask more). lo == hi when it sees none.
  std::pair<std::int64_t, std::int64_t> key_range(std::int64_t b, std::int64_t i) const;
  bool visible(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    const auto [lo, hi] = key_range(b, i);
    if (j < lo || j >= hi) return false;
    return bool_flags_.empty() || bool_flags_[static_cast<std::size_t>(flag_index(b, h, i, j))] != 0;
  }
  bool has_bias() const { return bias_.numel() > 0; }
  double bias(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return has_bias() ? bias_.get(bias_.offset(bias_batch_ ? b : 0, bias_head_ ? h : 0, i, j)) : 0.0;
  }
  bool row_fully_masked(std::int64_t b, std::int64_t h, std::int64_t i) const;
  std::int64_t count_visible() const;

  // The sink logits (sink_logits(problem)) as a tensor [h_q, 1, 1, 1] in f32, what the plugin ABI
  // hands over; numel 0 without sinks.
  bool has_sinks() const { return sinks_.numel() > 0; }
  const Tensor& sinks_tensor() const { return sinks_; }

  // The materialised parts, for implementations that pass them on (e.g. to a device).
  const std::vector<std::uint8_t>& bool_flags() const { return bool_flags_; }  // [bb, hh, n_q, n_k]
  const Tensor& bias_tensor() const { return bias_; }                           // [bb, hh, n_q, n_k]

 private:
  Mask(const Problem& problem, bool generate);
  std::int64_t flag_index(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return (((bool_batch_ ? b : 0) * (bool_head_ ? h_q_ : 1) + (bool_head_ ? h : 0)) * n_q_ + i) * n_k_ + j;
  }

  std::int64_t batch_, h_q_, n_q_, n_k_;
  Window window_;
  KeyPadding padding_;
  std::vector<std::uint8_t> bool_flags_;
  bool bool_batch_ = false, bool_head_ = false;
  Tensor bias_;
  bool bias_batch_ = false, bias_head_ = false;
  Tensor sinks_;
  std::vector<std::uint8_t> keep_;  // [b, h_q, n_q, n_k]; empty: none reported
};

}  // namespace attn

#include "core/mask.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "core/rng.hpp"

namespace attn {

Mask::Mask(const Problem& p) : Mask(p, true) {}

Mask::Mask(const Problem& p, bool generate)
    : batch_(p.batch), h_q_(p.h_q), n_q_(p.n_q), n_k_(p.n_k), window_(p.window), padding_(p.padding) {
  if (p.sinks.enabled) {  // from the problem, given or drawn, whether the rest is drawn or given
    const std::vector<double> logits = sink_logits(p);
    sinks_ = Tensor(DType::f32, {p.h_q, 1, 1, 1});
    for (std::int64_t h = 0; h < p.h_q; ++h) sinks_.set(h, logits[static_cast<std::size_t>(h)]);
  }
  if (!generate) return;
  if (p.bool_mask.enabled) {
    bool_batch_ = varies_over_batch(p.bool_mask.broadcast);
    bool_head_ = varies_over_head(p.bool_mask.broadcast);
    const std::int64_t n = (bool_batch_ ? p.batch : 1) * (bool_head_ ? p.h_q : 1) * p.n_q * p.n_k;
    bool_flags_.resize(static_cast<std::size_t>(n));
    draw_in_chunks(n, p.seed, stream_bool_mask,
                   [&](std::int64_t e, Rng& rng) { bool_flags_[static_cast<std::size_t>(e)] = rng.uniform() < p.bool_mask.keep ? 1 : 0; });
  }
  if (p.bias.enabled) {
    bias_batch_ = varies_over_batch(p.bias.broadcast);
    bias_head_ = varies_over_head(p.bias.broadcast);
    bias_ = Tensor(p.dtype_of(Role::bias), {bias_batch_ ? p.batch : 1, bias_head_ ? p.h_q : 1, p.n_q, p.n_k});
    if (p.bias.kind == BiasSpec::Kind::alibi) {
      // -slope_h |i + delta - j|, the distance from the diagonal, exact in double (an integer times
      // a power of two, or near one), rounded once to the bias's dtype.
      const std::int64_t delta = alibi_delta(p);
      for (std::int64_t h = 0; h < p.h_q; ++h) {
        const double slope = alibi_slope(h, p.h_q);
        for (std::int64_t i = 0; i < p.n_q; ++i)
          for (std::int64_t j = 0; j < p.n_k; ++j)
            bias_.set(bias_.offset(0, bias_head_ ? h : 0, i, j), -slope * double(std::llabs(i + delta - j)));
      }
    } else {
      draw_in_chunks(bias_.numel(), p.seed, stream_bias, [&](std::int64_t e, Rng& rng) { bias_.set(e, rng.normal() * p.bias.stddev); });
    }
  }
}

Mask Mask::given(const Problem& p, std::vector<std::uint8_t> flags, bool flags_per_batch, bool flags_per_head, Tensor bias) {
  Mask m(p, false);
  if (!flags.empty()) {
    const std::int64_t want = (flags_per_batch ? p.batch : 1) * (flags_per_head ? p.h_q : 1) * p.n_q * p.n_k;
    if (std::int64_t(flags.size()) != want) throw std::invalid_argument("Mask::given: the flags do not have the problem's extents");
    m.bool_flags_ = std::move(flags);
    m.bool_batch_ = flags_per_batch;
    m.bool_head_ = flags_per_head;
  }
  if (bias.numel() > 0) {
    const auto& s = bias.shape();
    if (bias.dtype() != p.dtype_of(Role::bias) || !(s[0] == 1 || s[0] == p.batch) || !(s[1] == 1 || s[1] == p.h_q) || s[2] != p.n_q || s[3] != p.n_k)
      throw std::invalid_argument("Mask::given: the bias does not have its role's dtype and the problem's extents");
    // An extent equal to 1 broadcasts even where b or h_q is 1 too: indexing 0 is then the same.
    m.bias_batch_ = s[0] != 1;
    m.bias_head_ = s[1] != 1;
    m.bias_ = std::move(bias);
  }
  return m;
}

Mask Mask::with_visibility_of(const Problem& p) const {
  if (p.batch != batch_ || p.h_q != h_q_ || p.n_q != n_q_ || p.n_k != n_k_)
    throw std::invalid_argument("Mask::with_visibility_of: the problem does not have this mask's extents");
  if (p.bias.enabled && p.bias.kind == BiasSpec::Kind::alibi) {
    Mask m(p);
    m.keep_ = keep_;
    return m;
  }
  Mask m(p, false);
  m.sinks_ = sinks_;
  m.keep_ = keep_;
  m.bool_flags_ = bool_flags_;
  m.bool_batch_ = bool_batch_;
  m.bool_head_ = bool_head_;
  m.bias_ = bias_;
  m.bias_batch_ = bias_batch_;
  m.bias_head_ = bias_head_;
  return m;
}

Mask Mask::with_bias(Tensor bias) const {
  const auto& s = bias.shape();
  if (!(s[0] == 1 || s[0] == batch_) || !(s[1] == 1 || s[1] == h_q_) || s[2] != n_q_ || s[3] != n_k_)
    throw std::invalid_argument("Mask::with_bias: the bias does not have this mask's extents");
  Mask m = *this;
  m.bias_batch_ = s[0] != 1;
  m.bias_head_ = s[1] != 1;
  m.bias_ = std::move(bias);
  return m;
}

Mask Mask::with_keep(const Tensor& keep) const {
  const auto& s = keep.shape();
  if (s[0] != batch_ || s[1] != h_q_ || s[2] != n_q_ || s[3] != n_k_)
    throw std::invalid_argument("Mask::with_keep: the keep mask does not have this mask's extents [b, h_q, n_q, n_k]");
  Mask m = *this;
  m.keep_.resize(static_cast<std::size_t>(keep.numel()));
  for (std::int64_t e = 0; e < keep.numel(); ++e) m.keep_[static_cast<std::size_t>(e)] = keep.get(e) != 0.0;
  return m;
}

std::pair<std::int64_t, std::int64_t> Mask::key_range(std::int64_t b, std::int64_t i) const {
  auto [lo, hi] = window_.key_range(i, n_q_, n_k_);
  if (padding_.kind == KeyPadding::Kind::per_batch) hi = std::min(hi, padding_.valid_len[static_cast<std::size_t>(b)]);
  if (padding_.kind == KeyPadding::Kind::per_query) hi = std::min(hi, padding_.valid_len[static_cast<std::size_t>(b * n_q_ + i)]);
  return {lo, std::max(lo, hi)};
}

bool Mask::row_fully_masked(std::int64_t b, std::int64_t h, std::int64_t i) const {
  const auto [lo, hi] = key_range(b, i);
  if (bool_flags_.empty()) return lo == hi;
  for (std::int64_t j = lo; j < hi; ++j)
    if (bool_flags_[static_cast<std::size_t>(flag_index(b, h, i, j))]) return false;
  return true;
}

std::int64_t Mask::count_visible() const {
  std::int64_t total = 0;
  for (std::int64_t b = 0; b < batch_; ++b)
    for (std::int64_t i = 0; i < n_q_; ++i) {
      const auto [lo, hi] = key_range(b, i);
      if (bool_flags_.empty()) {
        total += (hi - lo) * h_q_;
        continue;
      }
      for (std::int64_t h = 0; h < h_q_; ++h)
        for (std::int64_t j = lo; j < hi; ++j) total += bool_flags_[static_cast<std::size_t>(flag_index(b, h, i, j))];
    }
  return total;
}

}  // namespace attn

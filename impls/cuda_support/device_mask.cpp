#include "impls/cuda_support/device_mask.hpp"

#include <cstring>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace attn::cuda {

DeviceMask upload_mask(const Problem& p, const Mask& mask, bool with_key_limit, int bias_bytes, const char* who) {
  DeviceMask d;
  if (with_key_limit) {
    std::vector<std::int64_t> limits(std::size_t(p.batch * p.n_q));
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        const auto [lo, hi] = mask.key_range(b, i);
        if (lo != 0 && lo < hi)
          throw std::logic_error(fmt::format("{}: query {} of batch {} starts at key {}: the kernels take key ranges from key 0", who, i, b, lo));
        limits[std::size_t(b * p.n_q + i)] = hi;
      }
    d.key_limit = DeviceBuffer(limits.size() * sizeof(std::int64_t));
    d.key_limit.upload(limits.data());
  }
  if (const auto& flags = mask.bool_flags(); !flags.empty()) {
    d.flags_strides = broadcast_strides(p.bool_mask.broadcast, p.h_q, p.n_q, p.n_k);
    const std::int64_t expected = (varies_over_batch(p.bool_mask.broadcast) ? p.batch : 1) *
                                  (varies_over_head(p.bool_mask.broadcast) ? p.h_q : 1) * p.n_q * p.n_k;
    if (std::int64_t(flags.size()) != expected)
      throw std::logic_error(fmt::format("{}: the boolean mask holds {} flags, not the {} its broadcast implies", who, flags.size(), expected));
    d.flags = DeviceBuffer(flags.size());
    d.flags.upload(flags.data());
  }
  if (mask.has_bias()) {
    const Tensor& bias = mask.bias_tensor();
    const auto& shape = bias.shape();
    if (shape[2] != p.n_q || shape[3] != p.n_k || (shape[0] != 1 && shape[0] != p.batch) || (shape[1] != 1 && shape[1] != p.h_q))
      throw std::logic_error(fmt::format("{}: the bias tensor's shape does not broadcast to [b, h_q, n_q, n_k]", who));
    // The strides from the tensor's own extents: a user's bias (check --inputs) sets them.
    d.bias_strides = {shape[0] > 1 ? shape[1] * p.n_q * p.n_k : 0, shape[1] > 1 ? p.n_q * p.n_k : 0};
    std::vector<std::byte> bytes(std::size_t(bias.numel()) * std::size_t(bias_bytes));
    for (std::int64_t e = 0; e < bias.numel(); ++e) {
      if (bias_bytes == 8) {
        const double x = bias.get(e);
        std::memcpy(bytes.data() + std::size_t(e) * 8, &x, 8);
      } else {
        const float x = static_cast<float>(bias.get(e));
        std::memcpy(bytes.data() + std::size_t(e) * 4, &x, 4);
      }
    }
    d.bias = DeviceBuffer(bytes.size());
    d.bias.upload(bytes.data());
  }
  return d;
}

}  // namespace attn::cuda

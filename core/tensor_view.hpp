#pragma once
// A non-owning, DLPack-shaped view of a tensor: data pointer, dtype, device, rank, shape and
// strides in elements (DLTensor's fields, without byte_offset: data already points at the first
// element). core/tensor.hpp's Tensor gives one of itself (Tensor::view); the plugin ABI's
// attnbench_dl_tensor carries the same fields across the C boundary.
#include <array>
#include <cstdint>
#include <string_view>

#include "core/dtype.hpp"

namespace attn {

enum class Device : std::uint8_t { cpu, cuda };
constexpr std::string_view to_string(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }

// Room for the dense [b, h, s, d] tensors of today; a packed or paged layout fits in it too.
inline constexpr int max_view_rank = 4;

// Data is void (a writable view) or const void.
template <class Data>
struct BasicTensorView {
  using Extents = std::array<std::int64_t, max_view_rank>;
  Data* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int device_id = 0;
  int rank = 0;
  Extents shape{};    // the first `rank` entries are used
  Extents strides{};  // in elements; 0 where a dimension broadcasts

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[std::size_t(i)];
    return n;
  }
  // Dense row-major: what Tensor stores, and what a plugin that ignores strides assumes.
  bool row_major() const {
    std::int64_t expect = 1;
    for (int i = rank - 1; i >= 0; --i) {
      const auto u = std::size_t(i);
      if (shape[u] != 1 && strides[u] != expect) return false;
      expect *= shape[u];
    }
    return true;
  }
  BasicTensorView<const void> as_const() const { return {data, dtype, device, device_id, rank, shape, strides}; }
};

using TensorView = BasicTensorView<void>;
using ConstTensorView = BasicTensorView<const void>;

}  // namespace attn

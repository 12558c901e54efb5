#pragma once
// A dense row-major BHSD tensor of one dtype. f16/bf16 elements are stored as their bits;
// get() widens exactly to double and set() rounds once (to nearest, ties to even).
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.hpp"

namespace attn {

class Tensor {
 public:
  using Shape = std::array<std::int64_t, 4>;

  Tensor() = default;
  Tensor(DType dtype, Shape shape);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::int64_t numel() const { return numel_; }
  std::size_t bytes() const { return static_cast<std::size_t>(numel_) * bytes_per_element(dtype_); }
  std::int64_t offset(std::int64_t i0, std::int64_t i1, std::int64_t i2, std::int64_t i3) const {
    return ((i0 * shape_[1] + i1) * shape_[2] + i2) * shape_[3] + i3;
  }

  double get(std::int64_t index) const;
  void set(std::int64_t index, double value);
  std::uint64_t bits(std::int64_t index) const;
  void set_bits(std::int64_t index, std::uint64_t bits);

  // Fills every element with the dtype's poison NaN (see poison_bits).
  void poison();
  bool is_poisoned(std::int64_t index) const { return bits(index) == poison_bits(dtype_); }

  void* data() { return storage_.data(); }
  const void* data() const { return storage_.data(); }
  // Typed views for implementations; T must match the storage (double, float, std::uint16_t).
  template <class T> T* as() { return reinterpret_cast<T*>(storage_.data()); }
  template <class T> const T* as() const { return reinterpret_cast<const T*>(storage_.data()); }

  bool operator==(const Tensor& other) const;  // same dtype, shape and bits

 private:
  DType dtype_ = DType::f32;
  Shape shape_{0, 0, 0, 0};
  std::int64_t numel_ = 0;
  std::vector<std::uint64_t> storage_;  // 8-byte words keep every element type aligned
};

}  // namespace attn

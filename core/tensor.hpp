#pragma once
// A dense row-major BHSD tensor of one dtype. f16/bf16 elements are stored as their bits;
// get() widens exactly to double and set() rounds once (to nearest, ties to even).
//
// A tensor either owns its elements or borrows a caller's (Tensor::borrow: a user's array judged
// where it lies, with no copy). A borrowed tensor is read where it lies; anything that writes to
// it (a non-const data(), as(), set(), poison()) first copies it into storage of its own, and a
// copy of it owns its elements: the caller's memory is never written.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/dtype.hpp"
#include "core/tensor_view.hpp"

namespace attn {

class Tensor {
 public:
  using Shape = std::array<std::int64_t, 4>;

  Tensor() = default;
  Tensor(DType dtype, Shape shape);
  // Dense row-major elements at `data` (aligned to the element size), kept alive by `keep` for as
  // long as this tensor borrows them.
  static Tensor borrow(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> keep);
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor() = default;
  bool borrowed() const { return borrowed_ != nullptr; }
  // A tensor borrowing this one's elements (which must outlive it): judging without a copy.
  Tensor alias() const { return borrow(dtype_, shape_, data(), nullptr); }

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

  void* data() { return own(); }
  const void* data() const { return borrowed_ ? borrowed_ : storage_.data(); }
  // Typed views for implementations; T must match the storage (double, float, std::uint16_t).
  template <class T> T* as() { return reinterpret_cast<T*>(own()); }
  template <class T> const T* as() const { return reinterpret_cast<const T*>(data()); }

  bool operator==(const Tensor& other) const;  // same dtype, shape and bits

  // This tensor as a DLPack-shaped view: rank 4, its shape, dense row-major strides, on the CPU.
  TensorView view();
  ConstTensorView view() const;

 private:
  void* own();  // copies borrowed elements into storage_ first; then storage_.data()

  DType dtype_ = DType::f32;
  Shape shape_{0, 0, 0, 0};
  std::int64_t numel_ = 0;
  std::vector<std::uint64_t> storage_;  // 8-byte words keep every element type aligned
  const void* borrowed_ = nullptr;      // set: the elements are there, not in storage_
  std::shared_ptr<const void> keep_;    // what keeps borrowed_ alive
};

// Whether t's elements are Acc (float or double) as they lie, so as<Acc>() can be read directly.
template <class Acc>
bool holds(const Tensor& t) {
  return (std::is_same_v<Acc, float> && t.dtype() == DType::f32) || (std::is_same_v<Acc, double> && t.dtype() == DType::f64);
}

// count elements of t from offset on, as Acc: the values get() gives (f16/bf16 widen exactly),
// without get()'s out-of-line call and dtype switch per element.
template <class Acc>
void copy_as(const Tensor& t, std::int64_t offset, std::int64_t count, Acc* to) {
  if (holds<Acc>(t)) {
    std::copy_n(t.as<Acc>() + offset, count, to);
  } else if (t.dtype() == DType::f16) {
    const std::uint16_t* bits = t.as<std::uint16_t>() + offset;
    for (std::int64_t e = 0; e < count; ++e) to[e] = static_cast<Acc>(f16_bits_to_double(bits[e]));
  } else if (t.dtype() == DType::bf16) {
    const std::uint16_t* bits = t.as<std::uint16_t>() + offset;
    for (std::int64_t e = 0; e < count; ++e) to[e] = static_cast<Acc>(bf16_bits_to_double(bits[e]));
  } else {
    for (std::int64_t e = 0; e < count; ++e) to[e] = static_cast<Acc>(t.get(offset + e));
  }
}

}  // namespace attn

#include "core/tensor.hpp"

#include <cstring>

#include "core/error.hpp"

namespace attn {

namespace {

template <class View, class Data>
View view_of(Data* data, DType dtype, const Tensor::Shape& shape) {
  View v{data, dtype, Device::cpu, 0, 4, {}, {}};
  std::int64_t stride = 1;
  for (int i = 3; i >= 0; --i) {
    const auto u = std::size_t(i);
    v.shape[u] = shape[u];
    v.strides[u] = stride;
    stride *= shape[u];
  }
  return v;
}

}  // namespace

TensorView Tensor::view() { return view_of<TensorView>(data(), dtype_, shape_); }
ConstTensorView Tensor::view() const { return view_of<ConstTensorView>(data(), dtype_, shape_); }

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(shape) {
  numel_ = 1;
  for (auto extent : shape) {
    if (extent < 0) throw InputError("tensor extent must not be negative");
    numel_ *= extent;
  }
  storage_.assign((bytes() + 7) / 8, 0);
}

Tensor Tensor::borrow(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> keep) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.numel_ = 1;
  for (auto extent : shape) {
    if (extent < 0) throw InputError("tensor extent must not be negative");
    t.numel_ *= extent;
  }
  if (t.numel_ > 0 && (data == nullptr || reinterpret_cast<std::uintptr_t>(data) % bytes_per_element(dtype) != 0))
    throw InputError("a borrowed tensor's data must be non-null and aligned to its element size");
  t.borrowed_ = t.numel_ > 0 ? data : nullptr;
  t.keep_ = t.borrowed_ ? std::move(keep) : nullptr;
  return t;
}

Tensor::Tensor(const Tensor& other) : dtype_(other.dtype_), shape_(other.shape_), numel_(other.numel_) {
  if (other.borrowed_) {
    storage_.resize((bytes() + 7) / 8);
    std::memcpy(storage_.data(), other.borrowed_, bytes());
  } else {
    storage_ = other.storage_;
  }
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

Tensor::Tensor(Tensor&& other) noexcept
    : dtype_(other.dtype_), shape_(other.shape_), numel_(other.numel_), storage_(std::move(other.storage_)), borrowed_(other.borrowed_),
      keep_(std::move(other.keep_)) {
  other.borrowed_ = nullptr;
  other.storage_.clear();
  other.numel_ = 0;
  other.shape_ = {0, 0, 0, 0};
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this == &other) return *this;
  dtype_ = other.dtype_;
  shape_ = other.shape_;
  numel_ = other.numel_;
  storage_ = std::move(other.storage_);
  borrowed_ = other.borrowed_;
  keep_ = std::move(other.keep_);
  other.borrowed_ = nullptr;
  other.storage_.clear();
  other.numel_ = 0;
  other.shape_ = {0, 0, 0, 0};
  return *this;
}

void* Tensor::own() {
  if (borrowed_) {
    storage_.resize((bytes() + 7) / 8);
    std::memcpy(storage_.data(), borrowed_, bytes());
    borrowed_ = nullptr;
    keep_.reset();
  }
  return storage_.data();
}

std::uint64_t Tensor::bits(std::int64_t index) const {
  const auto* bytes = reinterpret_cast<const unsigned char*>(data());
  switch (dtype_) {
    case DType::f64: { std::uint64_t b; std::memcpy(&b, bytes + index * 8, 8); return b; }
    case DType::f32: { std::uint32_t b; std::memcpy(&b, bytes + index * 4, 4); return b; }
    case DType::f16:
    case DType::bf16: { std::uint16_t b; std::memcpy(&b, bytes + index * 2, 2); return b; }
  }
  return 0;
}

void Tensor::set_bits(std::int64_t index, std::uint64_t bits) {
  auto* bytes = reinterpret_cast<unsigned char*>(own());
  switch (dtype_) {
    case DType::f64: std::memcpy(bytes + index * 8, &bits, 8); break;
    case DType::f32: { auto b = static_cast<std::uint32_t>(bits); std::memcpy(bytes + index * 4, &b, 4); break; }
    case DType::f16:
    case DType::bf16: { auto b = static_cast<std::uint16_t>(bits); std::memcpy(bytes + index * 2, &b, 2); break; }
  }
}

double Tensor::get(std::int64_t index) const {
  switch (dtype_) {
    case DType::f64: return as<double>()[index];
    case DType::f32: return as<float>()[index];
    case DType::f16: return f16_bits_to_double(as<std::uint16_t>()[index]);
    case DType::bf16: return bf16_bits_to_double(as<std::uint16_t>()[index]);
  }
  return 0.0;
}

void Tensor::set(std::int64_t index, double value) {
  switch (dtype_) {
    case DType::f64: as<double>()[index] = value; break;
    // round_to gives the float value (overflow to Inf included); the cast is then exact.
    case DType::f32: as<float>()[index] = static_cast<float>(round_to(DType::f32, value)); break;
    case DType::f16: as<std::uint16_t>()[index] = f16_bits_from_double(value); break;
    case DType::bf16: as<std::uint16_t>()[index] = bf16_bits_from_double(value); break;
  }
}

void Tensor::poison() {
  const std::uint64_t p = poison_bits(dtype_);
  for (std::int64_t i = 0; i < numel_; ++i) set_bits(i, p);
}

bool Tensor::operator==(const Tensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ && (bytes() == 0 || std::memcmp(data(), other.data(), bytes()) == 0);
}

}  // namespace attn

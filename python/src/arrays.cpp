#include "python/src/arrays.hpp"

#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn::python {

DType dtype_of(const InArray& a, bool bits_are_bf16, const std::string& name) {
  const nb::dlpack::dtype d = a.dtype();
  const auto code = nb::dlpack::dtype_code(d.code);
  if (d.lanes == 1) {
    if (code == nb::dlpack::dtype_code::Float && d.bits == 64) return DType::f64;
    if (code == nb::dlpack::dtype_code::Float && d.bits == 32) return DType::f32;
    if (code == nb::dlpack::dtype_code::Float && d.bits == 16) return DType::f16;
    if (code == nb::dlpack::dtype_code::Bfloat && d.bits == 16) return DType::bf16;
    if (code == nb::dlpack::dtype_code::UInt && d.bits == 16 && bits_are_bf16) return DType::bf16;
  }
  throw InputError(fmt::format("{}: DLPack dtype (code {}, {} bits, {} lanes) is not a tensor dtype (float64, float32, float16, bfloat16)", name,
                               int(d.code), int(d.bits), int(d.lanes)));
}

std::vector<std::int64_t> shape_of(const InArray& a) {
  std::vector<std::int64_t> s(a.ndim());
  for (std::size_t i = 0; i < a.ndim(); ++i) s[i] = std::int64_t(a.shape(i));
  return s;
}

Tensor borrow_tensor(const InArray& a, bool bits_are_bf16, const std::string& name, const char* layout) {
  const DType dtype = dtype_of(a, bits_are_bf16, name);
  if (a.ndim() != 4)
    throw InputError(fmt::format("{}: {} dimensions; expected 4: {}", name, a.ndim(), layout));
  const Tensor::Shape shape{std::int64_t(a.shape(0)), std::int64_t(a.shape(1)), std::int64_t(a.shape(2)), std::int64_t(a.shape(3))};
  if (reinterpret_cast<std::uintptr_t>(a.data()) % std::uintptr_t(bytes_per_element(dtype)) != 0) {
    Tensor copy(dtype, shape);  // a misaligned view (an odd offset into a buffer): read through a copy
    std::memcpy(copy.data(), a.data(), copy.bytes());
    return copy;
  }
  return Tensor::borrow(dtype, shape, a.data(), nullptr);
}

namespace {

template <class T>
OutArray owning(std::vector<T>* values, std::vector<std::int64_t> shape, nb::dlpack::dtype dtype) {
  nb::capsule owner(values, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  std::vector<std::size_t> extents(shape.begin(), shape.end());
  return OutArray(values->data(), extents.size(), extents.data(), owner, nullptr, dtype);
}

}  // namespace

OutArray to_numpy(Tensor t, std::vector<std::int64_t> shape) {
  if (shape.empty()) shape.assign(t.shape().begin(), t.shape().end());
  nb::dlpack::dtype dtype;
  switch (t.dtype()) {
    case DType::f64: dtype = nb::dtype<double>(); break;
    case DType::f32: dtype = nb::dtype<float>(); break;
    case DType::f16: dtype = {std::uint8_t(nb::dlpack::dtype_code::Float), 16, 1}; break;
    case DType::bf16: dtype = nb::dtype<std::uint16_t>(); break;  // NumPy has no bf16: bits, viewed as ml_dtypes.bfloat16 in Python
  }
  auto* bytes = new std::vector<std::uint64_t>((t.bytes() + 7) / 8);
  std::memcpy(bytes->data(), std::as_const(t).data(), t.bytes());
  nb::capsule owner(bytes, [](void* p) noexcept { delete static_cast<std::vector<std::uint64_t>*>(p); });
  std::vector<std::size_t> extents(shape.begin(), shape.end());
  return OutArray(bytes->data(), extents.size(), extents.data(), owner, nullptr, dtype);
}

OutArray to_numpy(std::vector<std::uint8_t> flags, std::vector<std::int64_t> shape) {
  return owning(new std::vector<std::uint8_t>(std::move(flags)), std::move(shape), nb::dtype<bool>());
}

OutArray to_numpy(std::vector<std::int64_t> values, std::vector<std::int64_t> shape) {
  return owning(new std::vector<std::int64_t>(std::move(values)), std::move(shape), nb::dtype<std::int64_t>());
}

}  // namespace attn::python

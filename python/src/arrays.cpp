#include "python/src/arrays.hpp"

#include <cstring>
#include <stdexcept>
#include <utility>

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

OutArray to_dlpack(ConstTensorView view, nb::handle owner) {
  if (view.device != Device::cpu) throw std::logic_error("to_dlpack: a device view cannot become a NumPy array");
  nb::dlpack::dtype dtype;
  switch (view.dtype) {
    case DType::f64: dtype = nb::dtype<double>(); break;
    case DType::f32: dtype = nb::dtype<float>(); break;
    case DType::f16: dtype = {std::uint8_t(nb::dlpack::dtype_code::Float), 16, 1}; break;
    case DType::bf16: dtype = nb::dtype<std::uint16_t>(); break;
  }
  std::vector<std::size_t> shape(std::size_t(view.rank));
  std::vector<std::int64_t> strides(std::size_t(view.rank));
  for (int i = 0; i < view.rank; ++i) shape[std::size_t(i)] = std::size_t(view.shape[std::size_t(i)]), strides[std::size_t(i)] = view.strides[std::size_t(i)];
  return OutArray(const_cast<void*>(view.data), shape.size(), shape.data(), owner, strides.data(), dtype);
}

OutArray to_numpy(Tensor t, std::vector<std::int64_t> shape) {
  auto* copy = new Tensor(std::move(t));
  if (copy->borrowed()) *copy = Tensor(*copy);  // own the elements: the array outlives the borrowed memory
  nb::capsule owner(copy, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  ConstTensorView view = std::as_const(*copy).view();
  if (!shape.empty()) {  // the same elements, dense, in another shape
    view.rank = int(shape.size());
    std::int64_t stride = 1;
    for (int i = view.rank - 1; i >= 0; --i) {
      view.shape[std::size_t(i)] = shape[std::size_t(i)];
      view.strides[std::size_t(i)] = stride;
      stride *= shape[std::size_t(i)];
    }
  }
  return to_dlpack(view, owner);
}

OutArray to_numpy(std::vector<std::uint8_t> flags, std::vector<std::int64_t> shape) {
  return owning(new std::vector<std::uint8_t>(std::move(flags)), std::move(shape), nb::dtype<bool>());
}

OutArray to_numpy(std::vector<std::int64_t> values, std::vector<std::int64_t> shape) {
  return owning(new std::vector<std::int64_t>(std::move(values)), std::move(shape), nb::dtype<std::int64_t>());
}

}  // namespace attn::python

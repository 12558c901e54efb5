#pragma once
// Arrays across the Python boundary, through DLPack (nanobind's ndarray): a caller's array read
// where it lies when it is dense, aligned and of a tensor dtype (Tensor::borrow), and harness
// tensors handed out as NumPy arrays that own their elements. bf16 crosses as DLPack's bfloat
// code, or as uint16 bits that the Python side views as ml_dtypes.bfloat16 (NumPy has no bf16).
#include <cstdint>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "core/dtype.hpp"
#include "core/tensor.hpp"
#include "core/tensor_view.hpp"

namespace attn::python {

namespace nb = nanobind;

// Any CPU array; C-contiguous ones are borrowed, others copied by nanobind first.
using InArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using OutArray = nb::ndarray<nb::numpy>;

// The dtype of `a`; `bits_are_bf16`: a uint16 array holds bf16 bits. Throws InputError naming
// `name` for a dtype that is not a tensor dtype.
DType dtype_of(const InArray& a, bool bits_are_bf16, const std::string& name);
std::vector<std::int64_t> shape_of(const InArray& a);

// A rank-4 tensor over a's elements, borrowed (a must outlive it). `want_rank` is checked.
Tensor borrow_tensor(const InArray& a, bool bits_are_bf16, const std::string& name, const char* layout);

// The DLPack export of a TensorView (core/tensor_view.hpp): its data, shape, strides in elements and
// dtype, as an array that `owner` keeps alive. bf16 goes out as uint16 bits: NumPy, the array type
// handed out, has no bf16 (the Python side views it as ml_dtypes.bfloat16 or torch.bfloat16).
OutArray to_dlpack(ConstTensorView view, nb::handle owner);

// A copy of t as a NumPy array that owns it (to_dlpack of the copy's view); `shape` overrides t's
// (the same element count), e.g. an LSE [b, h, n, 1] handed out as [b, h, n].
OutArray to_numpy(Tensor t, std::vector<std::int64_t> shape = {});
OutArray to_numpy(std::vector<std::uint8_t> flags, std::vector<std::int64_t> shape);  // bool
OutArray to_numpy(std::vector<std::int64_t> values, std::vector<std::int64_t> shape);  // int64

}  // namespace attn::python

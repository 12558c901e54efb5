#pragma once
// The working precision for an input type, the one home of the rule: f64 computes in f64; f32,
// f16 and bf16 compute in f32 (half-precision inputs widen, as on tensor cores). The LSE and the
// weights are stored in it, the CPU implementations accumulate in it (with_working_type), and the
// pass rule's unit roundoff (accumulation_unit_roundoff, core/dtype.hpp) is its. A header of its
// own, apart from dtype.hpp, which the CUDA kernels include. Code about a problem goes through
// working_dtype(problem.numerics()) (core/problem.hpp), which reads the problem's accumulation.
#include "core/dtype.hpp"

namespace attn {

DType working_dtype(DType dtype);

// Calls f(double{}) or f(float{}), the working precision's C++ type, and returns its result.
template <class F>
decltype(auto) with_working_type(DType dtype, F&& f) {
  if (working_dtype(dtype) == DType::f64) return f(double{});
  return f(float{});
}

// The smallest positive subnormal of the working precision (2^-1074 or 2^-149).
double working_min_subnormal(DType dtype);

}  // namespace attn

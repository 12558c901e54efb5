#pragma once
// The working precision for an input type, the one home of the rule: f64 computes in f64; f32,
// f16 and bf16 compute in f32 (half-precision inputs widen, as on tensor cores). The LSE and the
// weights are stored in it, the CPU implementations accumulate in it (with_working_type), and the
// pass rule's unit roundoff (accumulation_unit_roundoff, core/dtype.hpp) is its. A header of its
// own, apart from dtype.hpp, which the CUDA kernels include. Code about a problem goes through
// working_dtype(problem.numerics()) (core/problem.hpp), which reads the problem's accumulation.
#include <string_view>

#include "core/dtype.hpp"

namespace attn {

DType working_dtype(DType dtype);

// Calls f(double{}) or f(float{}), the working precision's C++ type, and returns its result.
template <class F>
decltype(auto) with_working_type(DType dtype, F&& f) {
  if (working_dtype(dtype) == DType::f64) return f(double{});
  return f(float{});
}

// The arithmetic of an implementation's matrix products (QK^T and PV) when coarser than the
// working precision: TF32 tensor cores on f32 inputs (10 stored mantissa bits; f16 products round
// the same) or bf16 products. The one vocabulary from cuBLAS's compute type to the pass rule's
// scale (core/pass_rule.hpp) and the bench's roofline GEMM; plugins and capability files declare
// the unit roundoff as a number, read through matmul_precision_of.
enum class MatmulPrecision { working, tf32, bf16 };

double unit_roundoff(MatmulPrecision precision);  // 0 (the working precision's own), 2^-11, 2^-8
// The one of the two with the larger unit roundoff. The enum also names an accumulator's
// precision (Capabilities::accumulation_precision): 2^-11 is then an f16 accumulator, 2^-8 bf16.
MatmulPrecision coarser(MatmulPrecision a, MatmulPrecision b);
// The precision whose unit roundoff this is; throws InputError naming the accepted values otherwise.
MatmulPrecision matmul_precision_of(double unit_roundoff);
std::string_view to_string(MatmulPrecision precision);  // "working", "tf32", "bf16"
MatmulPrecision parse_matmul_precision(std::string_view text);  // throws InputError

// The smallest positive subnormal of the working precision (2^-1074 or 2^-149).
double working_min_subnormal(DType dtype);

}  // namespace attn

#pragma once
// Element types under test and their rounding on the CPU. f16 and bf16 are stored as their
// 16-bit patterns; every conversion from double rounds once, to nearest with ties to even, so
// results do not depend on the host having half-precision hardware.
#include <cstdint>
#include <string>
#include <string_view>

namespace attn {

enum class DType { f64, f32, f16, bf16 };

std::string_view to_string(DType dtype);
DType parse_dtype(std::string_view text);  // throws InputError naming the text

int bytes_per_element(DType dtype);
// Significand bits including the implicit one (53, 24, 11, 8).
int significand_bits(DType dtype);
double max_finite(DType dtype);
double min_normal(DType dtype);
// Unit roundoff of the arithmetic an implementation uses for this input type: f64 computes in
// f64; f32, f16 and bf16 compute in f32 (half-precision inputs widen, as on tensor cores).
double accumulation_unit_roundoff(DType dtype);

// Rounds x to the nearest value representable in dtype (ties to even, overflow to ±Inf,
// gradual underflow). The result is exact in a double.
double round_to(DType dtype, double x);
// The distance between adjacent representable values of dtype at magnitude |x|.
double ulp_at(DType dtype, double x);

std::uint16_t f16_bits_from_double(double x);
double f16_bits_to_double(std::uint16_t bits);
std::uint16_t bf16_bits_from_double(double x);
double bf16_bits_to_double(std::uint16_t bits);

// Bit pattern of x (already representable in dtype), widened to 64 bits.
std::uint64_t bits_of(DType dtype, double x);
double from_bits(DType dtype, std::uint64_t bits);

// How many representable values of dtype lie between a and b (0 when equal, ±0 are equal).
// Saturates at UINT64_MAX; either argument NaN gives UINT64_MAX.
std::uint64_t ulp_distance(DType dtype, double a, double b);

// A NaN with a payload no arithmetic produces: outputs are filled with it before each run,
// so an element that still holds it afterwards was never written.
std::uint64_t poison_bits(DType dtype);

}  // namespace attn

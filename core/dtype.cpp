#include "core/dtype.hpp"

#include <bit>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/precision.hpp"

namespace attn {
namespace {

struct Format {
  int significand_bits;  // including the implicit leading one
  int min_exponent;      // exponent of the smallest normal value
  double max_finite;
};

Format format_of(DType dtype) {
  switch (dtype) {
    case DType::f64: return {53, -1022, std::numeric_limits<double>::max()};
    case DType::f32: return {24, -126, static_cast<double>(std::numeric_limits<float>::max())};
    case DType::f16: return {11, -14, 65504.0};
    case DType::bf16: return {8, -126, 0x1.fep127};
  }
  return {53, -1022, std::numeric_limits<double>::max()};
}

// Spacing of representable values at |x| (x finite, possibly zero).
double quantum(const Format& f, double x) {
  int exponent = 0;
  std::frexp(x, &exponent);  // |x| = m * 2^exponent with m in [0.5, 1)
  int leading = x == 0.0 ? f.min_exponent : std::max(exponent - 1, f.min_exponent);
  return std::ldexp(1.0, leading - (f.significand_bits - 1));
}

}  // namespace

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

DType parse_dtype(std::string_view text) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16})
    if (text == to_string(d)) return d;
  throw InputError("unknown dtype '" + std::string(text) + "' (expected f64, f32, f16 or bf16)");
}

int bytes_per_element(DType dtype) {
  switch (dtype) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
  }
  return 8;
}

int significand_bits(DType dtype) { return format_of(dtype).significand_bits; }
double max_finite(DType dtype) { return format_of(dtype).max_finite; }
double min_normal(DType dtype) { return std::ldexp(1.0, format_of(dtype).min_exponent); }

DType working_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

double accumulation_unit_roundoff(DType dtype) { return std::ldexp(1.0, -significand_bits(working_dtype(dtype))); }

double working_min_subnormal(DType dtype) {
  const DType w = working_dtype(dtype);
  return std::ldexp(min_normal(w), 1 - significand_bits(w));
}

double round_to(DType dtype, double x) {
  if (dtype == DType::f64 || !std::isfinite(x) || x == 0.0) return x;
  const Format f = format_of(dtype);
  const double q = quantum(f, x);
  // x / q and r * q are exact (powers of two, no overflow or underflow in double for these
  // formats), so the only rounding is nearbyint's, which is to nearest, ties to even.
  const double y = std::nearbyint(x / q) * q;
  if (std::fabs(y) > f.max_finite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return y;
}

double ulp_at(DType dtype, double x) {
  if (!std::isfinite(x)) return std::numeric_limits<double>::infinity();
  if (dtype == DType::f64) {
    const double a = std::fabs(x);
    return std::nextafter(a, std::numeric_limits<double>::infinity()) - a;
  }
  return quantum(format_of(dtype), x);
}

std::uint16_t f16_bits_from_double(double x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | 0x7E00;
  const double y = std::fabs(round_to(DType::f16, x));
  if (std::isinf(y)) return sign | 0x7C00;
  if (y < 0x1p-14) return sign | static_cast<std::uint16_t>(y * 0x1p24);  // subnormal or zero
  int exponent = 0;
  const double m = std::frexp(y, &exponent);  // y = m * 2^exponent, m in [0.5, 1)
  const auto biased = static_cast<std::uint16_t>(exponent - 1 + 15);
  const auto mantissa = static_cast<std::uint16_t>((m * 2.0 - 1.0) * 1024.0);
  return sign | static_cast<std::uint16_t>(biased << 10) | mantissa;
}

double f16_bits_to_double(std::uint16_t bits) {
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int biased = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  if (biased == 0x1F)
    return mantissa ? std::copysign(std::numeric_limits<double>::quiet_NaN(), sign)
                    : sign * std::numeric_limits<double>::infinity();
  if (biased == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, biased - 15 - 10);
}

std::uint16_t bf16_bits_from_double(double x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFFC0 : 0x7FC0;
  // The bf16 value is exactly representable as a float; its top 16 bits are the bf16 pattern.
  const float y = static_cast<float>(round_to(DType::bf16, x));
  return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(y) >> 16);
}

double bf16_bits_to_double(std::uint16_t bits) {
  return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16));
}

std::uint64_t bits_of(DType dtype, double x) {
  switch (dtype) {
    case DType::f64: return std::bit_cast<std::uint64_t>(x);
    case DType::f32: return std::bit_cast<std::uint32_t>(static_cast<float>(x));
    case DType::f16: return f16_bits_from_double(x);
    case DType::bf16: return bf16_bits_from_double(x);
  }
  return 0;
}

double from_bits(DType dtype, std::uint64_t bits) {
  switch (dtype) {
    case DType::f64: return std::bit_cast<double>(bits);
    case DType::f32: return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    case DType::f16: return f16_bits_to_double(static_cast<std::uint16_t>(bits));
    case DType::bf16: return bf16_bits_to_double(static_cast<std::uint16_t>(bits));
  }
  return 0.0;
}

std::uint64_t ulp_distance(DType dtype, double a, double b) {
  constexpr auto saturated = std::numeric_limits<std::uint64_t>::max();
  if (std::isnan(a) || std::isnan(b)) return saturated;
  const int width = bytes_per_element(dtype) * 8;
  const std::uint64_t sign_bit = std::uint64_t{1} << (width - 1);
  // Map sign-magnitude patterns onto a line where adjacent values differ by one.
  auto ordered = [&](double x) -> __int128 {
    const std::uint64_t bits = bits_of(dtype, x);
    const auto magnitude = static_cast<__int128>(bits & (sign_bit - 1));
    return (bits & sign_bit) ? -magnitude : magnitude;
  };
  const __int128 d = ordered(a) - ordered(b);
  const __int128 distance = d < 0 ? -d : d;
  return distance > static_cast<__int128>(saturated) ? saturated : static_cast<std::uint64_t>(distance);
}

std::uint64_t poison_bits(DType dtype) {
  switch (dtype) {
    case DType::f64: return 0x7FF4DEADBEEF0A77ull;
    case DType::f32: return 0x7FA0DEADu;
    case DType::f16: return 0x7D0Du;
    case DType::bf16: return 0x7FA1u;
  }
  return 0;
}

double unit_roundoff(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::working: return 0;
    case MatmulPrecision::tf32: return 0x1p-11;
    case MatmulPrecision::bf16: return 0x1p-8;
  }
  return 0;
}

MatmulPrecision matmul_precision_of(double u) {
  for (MatmulPrecision p : {MatmulPrecision::working, MatmulPrecision::tf32, MatmulPrecision::bf16})
    if (u == unit_roundoff(p)) return p;
  throw InputError(fmt::format("matmul unit roundoff {:g}: expected 0 (the dtype's own arithmetic), 2^-11 = 0.00048828125 (TF32 or f16 "
                               "products) or 2^-8 = 0.00390625 (bf16 products)",
                               u));
}

MatmulPrecision coarser(MatmulPrecision a, MatmulPrecision b) { return unit_roundoff(a) >= unit_roundoff(b) ? a : b; }

MatmulPrecision parse_matmul_precision(std::string_view text) {
  for (MatmulPrecision p : {MatmulPrecision::working, MatmulPrecision::tf32, MatmulPrecision::bf16})
    if (text == to_string(p)) return p;
  throw InputError(fmt::format("matmul precision '{}': expected working, tf32 or bf16", text));
}

std::string_view to_string(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::working: return "working";
    case MatmulPrecision::tf32: return "tf32";
    case MatmulPrecision::bf16: return "bf16";
  }
  return "?";
}

}  // namespace attn

// core/dtype.hpp: rounding from double to f16 and bf16 (to nearest, ties to even, once),
// bit encodings, ulp spacing and distance, and the poison NaN. Every expected value here is
// worked out by hand from the formats (f16: 11 significand bits, min normal 2^-14, min
// subnormal 2^-24, max 65504; bf16: 8 significand bits, min normal 2^-126, min subnormal
// 2^-133, max 0x1.fep127), not taken from the code under test.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace attn {
namespace {

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double nan = std::numeric_limits<double>::quiet_NaN();
constexpr std::uint64_t saturated = std::numeric_limits<std::uint64_t>::max();

bool is_f16_nan_bits(std::uint16_t b) { return (b & 0x7C00) == 0x7C00 && (b & 0x03FF) != 0; }
bool is_bf16_nan_bits(std::uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x007F) != 0; }

// EXPECT_EQ on doubles compares with ==, which cannot tell +0 from -0; this can.
void expect_same_double(double expected, double actual) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << std::hexfloat << actual;
    return;
  }
  EXPECT_EQ(expected, actual) << std::hexfloat << "expected " << expected << ", got " << actual;
  EXPECT_EQ(std::signbit(expected), std::signbit(actual)) << std::hexfloat << expected << " vs " << actual;
}

// ---------------------------------------------------------------------------------------
// Format constants.

TEST(DTypeFormat, ConstantsMatchTheFormats) {
  EXPECT_EQ(significand_bits(DType::f64), 53);
  EXPECT_EQ(significand_bits(DType::f32), 24);
  EXPECT_EQ(significand_bits(DType::f16), 11);
  EXPECT_EQ(significand_bits(DType::bf16), 8);
  EXPECT_EQ(bytes_per_element(DType::f64), 8);
  EXPECT_EQ(bytes_per_element(DType::f32), 4);
  EXPECT_EQ(bytes_per_element(DType::f16), 2);
  EXPECT_EQ(bytes_per_element(DType::bf16), 2);
  EXPECT_EQ(max_finite(DType::f16), 65504.0);
  EXPECT_EQ(max_finite(DType::bf16), 0x1.fep127);
  EXPECT_EQ(max_finite(DType::f32), 0x1.fffffep127);
  EXPECT_EQ(max_finite(DType::f64), std::numeric_limits<double>::max());
  EXPECT_EQ(min_normal(DType::f16), 0x1p-14);
  EXPECT_EQ(min_normal(DType::bf16), 0x1p-126);
  EXPECT_EQ(min_normal(DType::f32), 0x1p-126);
  EXPECT_EQ(min_normal(DType::f64), 0x1p-1022);
}

TEST(DTypeFormat, NamesRoundTripAndUnknownNamesThrow) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) EXPECT_EQ(parse_dtype(to_string(d)), d);
  EXPECT_THROW(parse_dtype("f8"), InputError);
  EXPECT_THROW(parse_dtype(""), InputError);
  EXPECT_THROW(parse_dtype("F16"), InputError);  // names are case-sensitive, as printed
}

// ---------------------------------------------------------------------------------------
// f16 rounding.

TEST(F16Rounding, ExactValuesAreUnchangedAndEncodeToKnownBits) {
  struct Case { double value; std::uint16_t bits; };
  const Case cases[] = {
      {0.0, 0x0000},          {1.0, 0x3C00},           {-2.0, 0xC000},       {0.5, 0x3800},
      {1.0 + 0x1p-10, 0x3C01}, {0x1p-14, 0x0400},      {0x1p-24, 0x0001},    {0x3FFp-24, 0x03FF},
      {65504.0, 0x7BFF},      {-65504.0, 0xFBFF},      {2048.0, 0x6800},     {0.333251953125, 0x3555},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::Message() << std::hexfloat << c.value);
    expect_same_double(c.value, round_to(DType::f16, c.value));
    EXPECT_EQ(f16_bits_from_double(c.value), c.bits);
    expect_same_double(c.value, f16_bits_to_double(c.bits));
  }
}

// Halfway cases go to the neighbour with an even last significand bit, never always-up.
TEST(F16Rounding, TiesGoToEven) {
  EXPECT_EQ(round_to(DType::f16, 1.0 + 0x1p-11), 1.0);                 // 1 (even) vs 1+2^-10 (odd)
  EXPECT_EQ(round_to(DType::f16, 1.0 + 3 * 0x1p-11), 1.0 + 0x1p-9);    // 1+2^-10 (odd) vs 1+2^-9 (even)
  EXPECT_EQ(round_to(DType::f16, -(1.0 + 0x1p-11)), -1.0);             // symmetric for negatives
  EXPECT_EQ(round_to(DType::f16, -(1.0 + 3 * 0x1p-11)), -(1.0 + 0x1p-9));
  EXPECT_EQ(round_to(DType::f16, 2049.0), 2048.0);                     // spacing 2 above 2048
  EXPECT_EQ(round_to(DType::f16, 2051.0), 2052.0);
  EXPECT_EQ(round_to(DType::f16, 2.0 - 0x1p-11), 2.0);                 // tie rounds up into the next binade
  EXPECT_EQ(f16_bits_from_double(1.0 + 0x1p-11), 0x3C00);
  EXPECT_EQ(f16_bits_from_double(1.0 + 3 * 0x1p-11), 0x3C02);
}

// Just off a tie the nearer neighbour wins, however small the offset.
TEST(F16Rounding, ValuesJustAboveAndBelowATie) {
  const double tie = 1.0 + 0x1p-11;
  EXPECT_EQ(round_to(DType::f16, tie + 0x1p-52), 1.0 + 0x1p-10);
  EXPECT_EQ(round_to(DType::f16, tie - 0x1p-52), 1.0);
  const double odd_tie = 1.0 + 3 * 0x1p-11;
  EXPECT_EQ(round_to(DType::f16, odd_tie + 0x1p-40), 1.0 + 0x1p-9);
  EXPECT_EQ(round_to(DType::f16, odd_tie - 0x1p-40), 1.0 + 0x1p-10);
  EXPECT_EQ(round_to(DType::f16, std::nextafter(tie, 2.0)), 1.0 + 0x1p-10);
  EXPECT_EQ(round_to(DType::f16, std::nextafter(tie, 0.0)), 1.0);
}

// double -> float -> half rounds twice: tie + 2^-40 first becomes the tie itself in float (2^-40
// is below float's precision at 1), then ties to even give 1. Rounding once must give 1 + 2^-10.
TEST(F16Rounding, RoundsOnceNotViaFloat) {
  const double x = 1.0 + 0x1p-11 + 0x1p-40;
  ASSERT_EQ(static_cast<double>(static_cast<float>(x)), 1.0 + 0x1p-11);  // the trap is real
  EXPECT_EQ(round_to(DType::f16, x), 1.0 + 0x1p-10);
  EXPECT_EQ(f16_bits_from_double(x), 0x3C01);
  EXPECT_EQ(round_to(DType::f16, -x), -(1.0 + 0x1p-10));
}

TEST(F16Rounding, SubnormalsUnderflowGradually) {
  EXPECT_EQ(round_to(DType::f16, 0x1p-24), 0x1p-24);             // smallest subnormal is exact
  EXPECT_EQ(round_to(DType::f16, 0.75 * 0x1p-24), 0x1p-24);      // above half of it: rounds up
  EXPECT_EQ(round_to(DType::f16, 0.25 * 0x1p-24), 0.0);
  expect_same_double(0.0, round_to(DType::f16, 0x1p-25));        // half of it is a tie: to 0 (even)
  EXPECT_EQ(round_to(DType::f16, 0x1p-25 + 0x1p-60), 0x1p-24);   // just above that tie
  EXPECT_EQ(round_to(DType::f16, 3 * 0x1p-25), 0x1p-23);         // 1 (odd) vs 2 (even) quanta
  EXPECT_EQ(round_to(DType::f16, 5 * 0x1p-25), 0x1p-23);         // 2 (even) vs 3 (odd) quanta
  EXPECT_EQ(round_to(DType::f16, 1023.5 * 0x1p-24), 0x1p-14);    // largest subnormal + half: to min normal
  EXPECT_EQ(round_to(DType::f16, 1022.5 * 0x1p-24), 1022 * 0x1p-24);
  EXPECT_EQ(round_to(DType::f16, 3.3 * 0x1p-24), 3 * 0x1p-24);   // subnormal spacing is 2^-24 (fixed)
  EXPECT_EQ(f16_bits_from_double(0.75 * 0x1p-24), 0x0001);
  EXPECT_EQ(f16_bits_from_double(1023.0 * 0x1p-24), 0x03FF);
  EXPECT_EQ(f16_bits_from_double(-3 * 0x1p-25), 0x8002);
}

TEST(F16Rounding, OverflowsToInfinityPastTheLastTie) {
  EXPECT_EQ(round_to(DType::f16, 65504.0), 65504.0);
  EXPECT_EQ(round_to(DType::f16, 65519.99), 65504.0);   // below the tie 65520 with 65536
  EXPECT_EQ(round_to(DType::f16, 65520.0), inf);        // the tie goes to "even" 2^16, which overflows
  EXPECT_EQ(round_to(DType::f16, -65520.0), -inf);
  EXPECT_EQ(round_to(DType::f16, 1e300), inf);
  EXPECT_EQ(round_to(DType::f16, inf), inf);
  EXPECT_EQ(round_to(DType::f16, -inf), -inf);
  EXPECT_EQ(f16_bits_from_double(65519.99), 0x7BFF);
  EXPECT_EQ(f16_bits_from_double(65520.0), 0x7C00);
  EXPECT_EQ(f16_bits_from_double(-1e300), 0xFC00);
  EXPECT_EQ(f16_bits_to_double(0x7C00), inf);
  EXPECT_EQ(f16_bits_to_double(0xFC00), -inf);
}

TEST(F16Rounding, NegativeZeroAndNaN) {
  expect_same_double(-0.0, round_to(DType::f16, -0.0));
  expect_same_double(-0.0, round_to(DType::f16, -0x1p-30));  // underflow keeps the sign
  EXPECT_EQ(f16_bits_from_double(-0.0), 0x8000);
  EXPECT_EQ(f16_bits_from_double(0.0), 0x0000);
  EXPECT_EQ(f16_bits_from_double(-0x1p-30), 0x8000);
  expect_same_double(-0.0, f16_bits_to_double(0x8000));
  EXPECT_TRUE(std::isnan(round_to(DType::f16, nan)));
  EXPECT_TRUE(is_f16_nan_bits(f16_bits_from_double(nan)));
  EXPECT_TRUE(is_f16_nan_bits(f16_bits_from_double(-nan)));
  EXPECT_TRUE(f16_bits_from_double(-nan) & 0x8000);
  EXPECT_TRUE(std::isnan(f16_bits_to_double(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_bits_to_double(0x7C01)));  // signalling pattern decodes to NaN too
  EXPECT_TRUE(std::isnan(f16_bits_to_double(0xFFFF)));
}

// ---------------------------------------------------------------------------------------
// bf16 rounding: the same cases one format over (8 significand bits).

TEST(BF16Rounding, ExactValuesAreUnchangedAndEncodeToKnownBits) {
  struct Case { double value; std::uint16_t bits; };
  const Case cases[] = {
      {0.0, 0x0000},           {1.0, 0x3F80},        {-2.0, 0xC000},        {1.0 + 0x1p-7, 0x3F81},
      {0x1p-126, 0x0080},      {0x1p-133, 0x0001},   {0x7Fp-133, 0x007F},   {0x1.fep127, 0x7F7F},
      {-0x1.fep127, 0xFF7F},   {3.0, 0x4040},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::Message() << std::hexfloat << c.value);
    expect_same_double(c.value, round_to(DType::bf16, c.value));
    EXPECT_EQ(bf16_bits_from_double(c.value), c.bits);
    expect_same_double(c.value, bf16_bits_to_double(c.bits));
  }
}

TEST(BF16Rounding, TiesGoToEvenAndNeighboursOfTiesGoToTheNearer) {
  EXPECT_EQ(round_to(DType::bf16, 1.0 + 0x1p-8), 1.0);
  EXPECT_EQ(round_to(DType::bf16, 1.0 + 3 * 0x1p-8), 1.0 + 0x1p-6);
  EXPECT_EQ(round_to(DType::bf16, -(1.0 + 0x1p-8)), -1.0);
  EXPECT_EQ(round_to(DType::bf16, 1.0 + 0x1p-8 + 0x1p-52), 1.0 + 0x1p-7);
  EXPECT_EQ(round_to(DType::bf16, 1.0 + 0x1p-8 - 0x1p-52), 1.0);
  EXPECT_EQ(round_to(DType::bf16, 1.0 + 3 * 0x1p-8 - 0x1p-40), 1.0 + 0x1p-7);
  EXPECT_EQ(round_to(DType::bf16, 257.0), 256.0);  // spacing 2 above 256: tie to even
  EXPECT_EQ(round_to(DType::bf16, 259.0), 260.0);
  EXPECT_EQ(bf16_bits_from_double(1.0 + 3 * 0x1p-8), 0x3F82);
}

// Same double-rounding trap as for f16: via float, tie + 2^-40 becomes the tie and then 1.
TEST(BF16Rounding, RoundsOnceNotViaFloat) {
  const double x = 1.0 + 0x1p-8 + 0x1p-40;
  ASSERT_EQ(static_cast<double>(static_cast<float>(x)), 1.0 + 0x1p-8);
  EXPECT_EQ(round_to(DType::bf16, x), 1.0 + 0x1p-7);
  EXPECT_EQ(bf16_bits_from_double(x), 0x3F81);
}

TEST(BF16Rounding, SubnormalsUnderflowGradually) {
  EXPECT_EQ(round_to(DType::bf16, 0x1p-133), 0x1p-133);
  EXPECT_EQ(round_to(DType::bf16, 0.75 * 0x1p-133), 0x1p-133);
  expect_same_double(0.0, round_to(DType::bf16, 0x1p-134));      // tie: to 0
  EXPECT_EQ(round_to(DType::bf16, 3 * 0x1p-134), 0x1p-132);      // tie: to 2 quanta (even)
  EXPECT_EQ(round_to(DType::bf16, 127.5 * 0x1p-133), 0x1p-126);  // largest subnormal + half: min normal
  EXPECT_EQ(bf16_bits_from_double(0.75 * 0x1p-133), 0x0001);
  expect_same_double(-0.0, round_to(DType::bf16, -0x1p-140));
  EXPECT_EQ(bf16_bits_from_double(-0x1p-140), 0x8000);
}

TEST(BF16Rounding, OverflowsToInfinityPastTheLastTie) {
  EXPECT_EQ(round_to(DType::bf16, 0x1.fep127), 0x1.fep127);
  EXPECT_EQ(round_to(DType::bf16, 0x1.feffffffffp127), 0x1.fep127);  // just below the tie
  EXPECT_EQ(round_to(DType::bf16, 0x1.ffp127), inf);                 // the tie: "even" is 2^128
  EXPECT_EQ(round_to(DType::bf16, 0x1.fffffep127), inf);             // FLT_MAX is not a bf16 value
  EXPECT_EQ(round_to(DType::bf16, -0x1.ffp127), -inf);
  EXPECT_EQ(round_to(DType::bf16, 1e300), inf);
  EXPECT_EQ(bf16_bits_from_double(0x1.ffp127), 0x7F80);
  EXPECT_EQ(bf16_bits_from_double(-1e300), 0xFF80);
  EXPECT_EQ(bf16_bits_to_double(0x7F80), inf);
}

TEST(BF16Rounding, NegativeZeroAndNaN) {
  EXPECT_EQ(bf16_bits_from_double(-0.0), 0x8000);
  expect_same_double(-0.0, bf16_bits_to_double(0x8000));
  EXPECT_TRUE(is_bf16_nan_bits(bf16_bits_from_double(nan)));
  EXPECT_TRUE(is_bf16_nan_bits(bf16_bits_from_double(-nan)));
  EXPECT_TRUE(bf16_bits_from_double(-nan) & 0x8000);
  EXPECT_TRUE(std::isnan(bf16_bits_to_double(0x7FC0)));
  EXPECT_TRUE(std::isnan(bf16_bits_to_double(0x7F81)));
}

// ---------------------------------------------------------------------------------------
// f32 and f64: round_to(f32) must agree with the hardware's (correctly rounded) conversion;
// f64 is the identity.

TEST(F32Rounding, AgreesWithTheHardwareConversion) {
  EXPECT_EQ(round_to(DType::f32, 1.0 + 0x1p-24), 1.0);  // tie to even
  EXPECT_EQ(round_to(DType::f32, 1.0 + 3 * 0x1p-24), 1.0 + 0x1p-22);
  EXPECT_EQ(round_to(DType::f32, 0x1p-150), 0.0);       // half the smallest subnormal
  EXPECT_EQ(round_to(DType::f32, 0x1.8p-150), 0x1p-149);
  EXPECT_EQ(round_to(DType::f32, 0x1.ffffffp127), inf);  // the overflow tie
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> mantissa(-2.0, 2.0);
  std::uniform_int_distribution<int> exponent(-155, 125);
  for (int n = 0; n < 20000; ++n) {
    const double x = std::ldexp(mantissa(gen), exponent(gen));
    ASSERT_EQ(round_to(DType::f32, x), static_cast<double>(static_cast<float>(x))) << std::hexfloat << x;
  }
}

TEST(F64Rounding, IsTheIdentity) {
  for (double x : {0.1, -1.0 / 3.0, 0x1p-1074, 1e308}) EXPECT_EQ(round_to(DType::f64, x), x);
  expect_same_double(-0.0, round_to(DType::f64, -0.0));
}

// ---------------------------------------------------------------------------------------
// Bit round trips.

// Every one of the 65536 f16 patterns: decode, then encode, gives the pattern back (NaNs stay
// NaN with their sign), and decoded values increase strictly with the positive patterns.
TEST(F16Bits, ExhaustiveDecodeEncodeRoundTrip) {
  double previous = -inf;
  for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const double x = f16_bits_to_double(bits);
    if (is_f16_nan_bits(bits)) {
      ASSERT_TRUE(std::isnan(x)) << std::hex << b;
      const std::uint16_t back = f16_bits_from_double(x);
      ASSERT_TRUE(is_f16_nan_bits(back)) << std::hex << b;
      ASSERT_EQ(back & 0x8000, bits & 0x8000) << std::hex << b;
      continue;
    }
    ASSERT_EQ(f16_bits_from_double(x), bits) << std::hex << b;
    ASSERT_EQ(bits_of(DType::f16, x), bits) << std::hex << b;
    ASSERT_EQ(round_to(DType::f16, x), x) << std::hex << b;
    ASSERT_EQ(std::signbit(x), (bits & 0x8000) != 0) << std::hex << b;
    if (b <= 0x7C00) {
      ASSERT_GT(x, previous) << std::hex << b;
      previous = x;
    }
  }
  EXPECT_EQ(previous, inf);
}

TEST(BF16Bits, ExhaustiveDecodeEncodeRoundTrip) {
  double previous = -inf;
  for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const double x = bf16_bits_to_double(bits);
    if (is_bf16_nan_bits(bits)) {
      ASSERT_TRUE(std::isnan(x)) << std::hex << b;
      const std::uint16_t back = bf16_bits_from_double(x);
      ASSERT_TRUE(is_bf16_nan_bits(back)) << std::hex << b;
      ASSERT_EQ(back & 0x8000, bits & 0x8000) << std::hex << b;
      continue;
    }
    ASSERT_EQ(bf16_bits_from_double(x), bits) << std::hex << b;
    ASSERT_EQ(bits_of(DType::bf16, x), bits) << std::hex << b;
    ASSERT_EQ(round_to(DType::bf16, x), x) << std::hex << b;
    ASSERT_EQ(std::signbit(x), (bits & 0x8000) != 0) << std::hex << b;
    if (b <= 0x7F80) {
      ASSERT_GT(x, previous) << std::hex << b;
      previous = x;
    }
  }
  EXPECT_EQ(previous, inf);
}

// Random doubles over the whole range of each format (subnormal to overflow): the encoded bits
// decode to round_to's value, and that value is the nearest representable one, checked against
// the two neighbouring patterns (an oracle independent of round_to's own arithmetic).
template <class Encode, class Decode>
void check_random_rounding(DType dtype, Encode encode, Decode decode, int min_exp, int max_exp) {
  std::mt19937_64 gen(12345);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(min_exp, max_exp);
  for (int n = 0; n < 200000; ++n) {
    const double x = std::ldexp(mantissa(gen), exponent(gen)) * ((n & 1) ? -1.0 : 1.0);
    const double y = round_to(dtype, x);
    const std::uint16_t bits = encode(x);
    ASSERT_EQ(decode(bits), y) << std::hexfloat << x;
    if (std::isinf(y)) {
      ASSERT_GE(std::fabs(x), max_finite(dtype) + ulp_at(dtype, max_finite(dtype)) / 2) << std::hexfloat << x;
      continue;
    }
    const std::uint16_t magnitude = bits & 0x7FFF;
    const double err = std::fabs(x - y);
    // The pattern one step further from zero is always a value (or Inf); one step nearer exists
    // unless y is zero.
    const double up = decode(static_cast<std::uint16_t>(bits + 1));
    if (!std::isinf(up)) {
      ASSERT_LE(err, std::fabs(x - up)) << std::hexfloat << x;
      if (err == std::fabs(x - up)) {
        ASSERT_EQ(bits & 1, 0) << "tie not to even at " << std::hexfloat << x;
      }
    }
    if (magnitude != 0) {
      const double down = decode(static_cast<std::uint16_t>(bits - 1));
      ASSERT_LE(err, std::fabs(x - down)) << std::hexfloat << x;
      if (err == std::fabs(x - down)) {
        ASSERT_EQ(bits & 1, 0) << "tie not to even at " << std::hexfloat << x;
      }
    }
  }
}

TEST(F16Bits, RandomDoublesRoundToTheNearestPattern) {
  check_random_rounding(DType::f16, f16_bits_from_double, f16_bits_to_double, -27, 16);
}

TEST(BF16Bits, RandomDoublesRoundToTheNearestPattern) {
  check_random_rounding(DType::bf16, bf16_bits_from_double, bf16_bits_to_double, -136, 128);
}

// Ties sampled on purpose (random doubles almost never hit one): midpoints of every pair of
// adjacent finite positive patterns must round to the even one of the pair.
TEST(F16Bits, EveryMidpointRoundsToEven) {
  for (std::uint16_t b = 0; b < 0x7BFF; ++b) {
    const double lo = f16_bits_to_double(b), hi = f16_bits_to_double(static_cast<std::uint16_t>(b + 1));
    const double mid = (lo + hi) / 2;  // exact in double
    const std::uint16_t expected = (b & 1) ? static_cast<std::uint16_t>(b + 1) : b;
    ASSERT_EQ(f16_bits_from_double(mid), expected) << std::hex << b;
    ASSERT_EQ(f16_bits_from_double(-mid), expected | 0x8000) << std::hex << b;
  }
}

TEST(BF16Bits, EveryMidpointRoundsToEven) {
  for (std::uint16_t b = 0; b < 0x7F7F; ++b) {
    const double lo = bf16_bits_to_double(b), hi = bf16_bits_to_double(static_cast<std::uint16_t>(b + 1));
    const double mid = (lo + hi) / 2;
    const std::uint16_t expected = (b & 1) ? static_cast<std::uint16_t>(b + 1) : b;
    ASSERT_EQ(bf16_bits_from_double(mid), expected) << std::hex << b;
  }
}

TEST(DTypeBits, BitsOfAndFromBitsRoundTripInEveryDType) {
  const double values[] = {0.0, -0.0, 1.0, -1.5, 0x1p-24, 65504.0, 3.140625, inf, -inf};
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    for (double v : values) {
      const double x = round_to(d, v);
      SCOPED_TRACE(testing::Message() << to_string(d) << " " << std::hexfloat << x);
      expect_same_double(x, from_bits(d, bits_of(d, x)));
      if (d != DType::f64) {
        EXPECT_EQ(bits_of(d, x) >> (8 * bytes_per_element(d)), 0u);  // no stray high bits
      }
    }
  }
  EXPECT_EQ(bits_of(DType::f32, 1.0), 0x3F800000u);
  EXPECT_EQ(bits_of(DType::f64, 1.0), 0x3FF0000000000000ull);
  EXPECT_EQ(bits_of(DType::f16, -0.0), 0x8000u);
}

// ---------------------------------------------------------------------------------------
// ulp_at and ulp_distance.

TEST(DTypeUlp, SpacingAtHandPickedMagnitudes) {
  EXPECT_EQ(ulp_at(DType::f16, 1.0), 0x1p-10);
  EXPECT_EQ(ulp_at(DType::f16, 1.999), 0x1p-10);
  EXPECT_EQ(ulp_at(DType::f16, 0.75), 0x1p-11);     // one binade lower
  EXPECT_EQ(ulp_at(DType::f16, -1.0), 0x1p-10);     // by magnitude
  EXPECT_EQ(ulp_at(DType::f16, 65504.0), 32.0);
  EXPECT_EQ(ulp_at(DType::f16, 0x1p-14), 0x1p-24);  // min normal
  EXPECT_EQ(ulp_at(DType::f16, 0x1p-20), 0x1p-24);  // subnormal spacing is fixed
  EXPECT_EQ(ulp_at(DType::f16, 0.0), 0x1p-24);
  EXPECT_EQ(ulp_at(DType::bf16, 1.0), 0x1p-7);
  EXPECT_EQ(ulp_at(DType::bf16, 0.0), 0x1p-133);
  EXPECT_EQ(ulp_at(DType::bf16, 0x1.fep127), 0x1p120);
  EXPECT_EQ(ulp_at(DType::f32, 1.0), 0x1p-23);
  EXPECT_EQ(ulp_at(DType::f32, 0.0), 0x1p-149);
  EXPECT_EQ(ulp_at(DType::f64, 1.0), 0x1p-52);
  EXPECT_EQ(ulp_at(DType::f64, 0.0), 0x1p-1074);
  EXPECT_EQ(ulp_at(DType::f16, inf), inf);
}

TEST(DTypeUlp, SpacingMatchesTheGapToTheNextPattern) {
  for (std::uint16_t b = 0; b < 0x7BFF; b += 7) {
    const double x = f16_bits_to_double(b);
    EXPECT_EQ(ulp_at(DType::f16, x), f16_bits_to_double(static_cast<std::uint16_t>(b + 1)) - x) << std::hex << b;
  }
  for (std::uint16_t b = 0; b < 0x7F7F; b += 7) {
    const double x = bf16_bits_to_double(b);
    EXPECT_EQ(ulp_at(DType::bf16, x), bf16_bits_to_double(static_cast<std::uint16_t>(b + 1)) - x) << std::hex << b;
  }
}

TEST(DTypeUlp, DistanceCountsRepresentableSteps) {
  EXPECT_EQ(ulp_distance(DType::f16, 1.0, 1.0), 0u);
  EXPECT_EQ(ulp_distance(DType::f16, 1.0, 1.0 + 0x1p-10), 1u);  // adjacent
  EXPECT_EQ(ulp_distance(DType::f16, 1.0 + 0x1p-10, 1.0), 1u);  // symmetric
  EXPECT_EQ(ulp_distance(DType::f16, 1.0 - 0x1p-11, 1.0), 1u);  // adjacent across a binade edge
  EXPECT_EQ(ulp_distance(DType::f16, 1.0, 2.0), 1024u);
  EXPECT_EQ(ulp_distance(DType::f16, 0.0, -0.0), 0u);           // ±0 are equal
  EXPECT_EQ(ulp_distance(DType::f16, 0x1p-24, -0x1p-24), 2u);   // across zero: -s, ±0, +s
  EXPECT_EQ(ulp_distance(DType::f16, -0.0, 0x1p-24), 1u);
  EXPECT_EQ(ulp_distance(DType::f16, -1.0, 1.0), 2u * 0x3C00);
  EXPECT_EQ(ulp_distance(DType::f16, 65504.0, inf), 1u);
  EXPECT_EQ(ulp_distance(DType::bf16, 1.0, 1.0 + 0x1p-7), 1u);
  EXPECT_EQ(ulp_distance(DType::bf16, -0x1p-133, 0x1p-133), 2u);
  EXPECT_EQ(ulp_distance(DType::f32, 1.0, 1.0 + 0x1p-23), 1u);
  EXPECT_EQ(ulp_distance(DType::f32, -0x1p-149, 0x1p-149), 2u);
  EXPECT_EQ(ulp_distance(DType::f64, 1.0, std::nextafter(1.0, 2.0)), 1u);
  EXPECT_EQ(ulp_distance(DType::f64, -0x1p-1074, 0x1p-1074), 2u);
  // The widest f64 span still fits: 2 * 0x7FEFFFFFFFFFFFFF steps.
  EXPECT_EQ(ulp_distance(DType::f64, -std::numeric_limits<double>::max(), std::numeric_limits<double>::max()),
            2 * 0x7FEFFFFFFFFFFFFFull);
}

TEST(DTypeUlp, NaNGivesTheSaturatedDistance) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    EXPECT_EQ(ulp_distance(d, nan, 1.0), saturated) << to_string(d);
    EXPECT_EQ(ulp_distance(d, 1.0, nan), saturated) << to_string(d);
    EXPECT_EQ(ulp_distance(d, nan, nan), saturated) << to_string(d);  // not 0: NaN never matches
  }
}

// ---------------------------------------------------------------------------------------
// The poison pattern.

TEST(DTypePoison, IsANaNInEveryDTypeThatNoConversionProduces) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(to_string(d));
    const std::uint64_t p = poison_bits(d);
    EXPECT_TRUE(std::isnan(from_bits(d, p)));
    if (d != DType::f64) {
      EXPECT_EQ(p >> (8 * bytes_per_element(d)), 0u);  // fits the element width
    }
    EXPECT_NE(p, bits_of(d, nan));   // an arithmetic NaN is distinguishable from "never written"
    EXPECT_NE(p, bits_of(d, -nan));
  }
  EXPECT_TRUE(is_f16_nan_bits(static_cast<std::uint16_t>(poison_bits(DType::f16))));
  EXPECT_TRUE(is_bf16_nan_bits(static_cast<std::uint16_t>(poison_bits(DType::bf16))));
}

}  // namespace
}  // namespace attn

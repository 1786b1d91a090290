// Tests for tensor/half.h: bf16 and f16 conversion, checked bit for bit
// against a double-precision reference (round to nearest, ties to even),
// including subnormals, overflow, infinities and NaN.
#include "tensor/half.h"

#include <cfenv>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// The correctly rounded f16 bits of a non-NaN float, computed in double.
uint16_t reference_half(float f) {
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;  // 65520 is halfway to 2^16 and rounds (to even) up to inf
  if (a < std::ldexp(1.0, -14)) {
    // Subnormal: units of 2^-24. A result of 1024 is the smallest normal, 0x0400.
    return sign | static_cast<uint16_t>(std::nearbyint(a / std::ldexp(1.0, -24)));
  }
  int e = static_cast<int>(std::floor(std::log2(a)));
  double frac = a / std::ldexp(1.0, e) - 1.0;  // [0, 1)
  double q = std::nearbyint(frac * 1024.0);
  if (q == 1024.0) {
    q = 0;
    ++e;
  }
  if (e > 15) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(((e + 15) << 10) | static_cast<int>(q));
}

// The correctly rounded bf16 bits of a non-NaN float, computed in double.
uint16_t reference_bf16(float f) {
  uint32_t u = to_bits(f);
  uint16_t sign = (u >> 31) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return sign | 0x7f80;
  // bf16 keeps f32's exponent: the unit in the last place is 2^(e - 7), or 2^-133 below normal.
  int e = a == 0 ? -126 : std::max(static_cast<int>(std::floor(std::log2(a))), -126);
  double ulp = std::ldexp(1.0, e - 7);
  double r = std::nearbyint(a / ulp) * ulp;
  if (r >= std::ldexp(1.0, 128)) return sign | 0x7f80;
  return sign | static_cast<uint16_t>(to_bits(static_cast<float>(r)) >> 16);
}

TEST(BFloat16, ExactValuesAndRoundTrip) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(BFloat16(-2.0f).bits, 0xc000);
  EXPECT_EQ(BFloat16(0.0f).bits, 0x0000);
  EXPECT_EQ(BFloat16(-0.0f).bits, 0x8000);
  EXPECT_EQ(static_cast<float>(BFloat16(3.0f)), 3.0f);
  // Every non-NaN bf16 converts to f32 and back unchanged.
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    BFloat16 h;
    h.bits = static_cast<uint16_t>(b);
    float f = h;
    if (std::isnan(f)) continue;
    ASSERT_EQ(BFloat16(f).bits, b) << std::hex << b;
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(BFloat16(from_bits(0x3f808000)).bits, 0x3f80);  // halfway, even below
  EXPECT_EQ(BFloat16(from_bits(0x3f818000)).bits, 0x3f82);  // halfway, even above
  EXPECT_EQ(BFloat16(from_bits(0x3f808001)).bits, 0x3f81);  // just above halfway
  EXPECT_EQ(BFloat16(from_bits(0x3f807fff)).bits, 0x3f80);  // just below halfway
  EXPECT_EQ(BFloat16(from_bits(0x3f80ffff)).bits, 0x3f81);
  EXPECT_EQ(BFloat16(1.0f / 3.0f).bits, 0x3eab);
}

TEST(BFloat16, SubnormalsInfinitiesAndNaN) {
  // f32 subnormals keep their top bits (bf16 shares f32's exponent).
  EXPECT_EQ(BFloat16(from_bits(0x00010000)).bits, 0x0001);
  EXPECT_EQ(BFloat16(from_bits(0x00018000)).bits, 0x0002);  // halfway, to even
  EXPECT_EQ(BFloat16(from_bits(0x00008000)).bits, 0x0000);  // halfway to zero, even
  EXPECT_EQ(static_cast<float>(BFloat16(from_bits(0x00010000))), from_bits(0x00010000));
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(BFloat16(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  // The largest float rounds up past bf16's largest finite value: inf.
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::max()).bits, 0x7f80);
  EXPECT_EQ(BFloat16(from_bits(0x7f7f7fff)).bits, 0x7f7f);
  // NaN stays NaN (quiet), including a signalling NaN whose payload sits in the low bits.
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(from_bits(0x7f800001)))));
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(from_bits(0xff800001)))));
}

TEST(BFloat16, MatchesDoubleReference) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    float f = from_bits(bits(rng));
    if (std::isnan(f)) continue;
    ASSERT_EQ(BFloat16(f).bits, reference_bf16(f)) << std::hexfloat << f;
  }
}

TEST(Half, ExactValuesAndRoundTrip) {
  EXPECT_EQ(Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(Half(-2.0f).bits, 0xc000);
  EXPECT_EQ(Half(65504.0f).bits, 0x7bff);  // largest finite
  EXPECT_EQ(Half(0.5f).bits, 0x3800);
  EXPECT_EQ(Half(-0.0f).bits, 0x8000);
  EXPECT_EQ(Half::to_float(0x7bff), 65504.0f);
  EXPECT_EQ(Half::to_float(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(Half::to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(Half::to_float(0x03ff), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(Half::to_float(0x8001), -std::ldexp(1.0f, -24));
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    float f = Half::to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(Half(f).bits, b) << std::hex << b;
  }
}

TEST(Half, RoundsToNearestEven) {
  const float ulp1 = std::ldexp(1.0f, -10);           // spacing just above 1
  EXPECT_EQ(Half(1.0f + ulp1 / 2).bits, 0x3c00);      // halfway, even below
  EXPECT_EQ(Half(1.0f + 3 * ulp1 / 2).bits, 0x3c02);  // halfway, even above
  EXPECT_EQ(Half(std::nextafter(1.0f + ulp1 / 2, 2.0f)).bits, 0x3c01);
  EXPECT_EQ(Half(std::nextafter(1.0f + ulp1 / 2, 0.0f)).bits, 0x3c00);
  EXPECT_EQ(Half(2047.5f).bits, Half(2048.0f).bits);  // 2047.5: spacing 1 there, halfway, to even
  EXPECT_EQ(Half(0.1f).bits, 0x2e66);
}

TEST(Half, SubnormalsOverflowInfinitiesAndNaN) {
  const float unit = std::ldexp(1.0f, -24);
  EXPECT_EQ(Half(unit).bits, 0x0001);
  EXPECT_EQ(Half(unit / 2).bits, 0x0000);                        // halfway to zero: even
  EXPECT_EQ(Half(std::nextafter(unit / 2, 1.0f)).bits, 0x0001);  // above halfway
  EXPECT_EQ(Half(3 * unit / 2).bits, 0x0002);                    // halfway: even
  EXPECT_EQ(Half(5 * unit / 2).bits, 0x0002);                    // halfway: even
  EXPECT_EQ(Half(-unit).bits, 0x8001);
  EXPECT_EQ(Half(unit / 4).bits, 0x0000);
  EXPECT_EQ(Half(-unit / 4).bits, 0x8000);                         // keeps the sign
  EXPECT_EQ(Half(std::ldexp(1.0f, -14) - unit / 2).bits, 0x0400);  // rounds up into the normals
  EXPECT_EQ(Half(1023.5f * unit).bits, 0x0400);
  EXPECT_EQ(Half(1022.5f * unit).bits, 0x03fe);
  EXPECT_EQ(Half(65519.0f).bits, 0x7bff);
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00);  // halfway to 2^16: to even, inf
  EXPECT_EQ(Half(1e6f).bits, 0x7c00);
  EXPECT_EQ(Half(-1e6f).bits, 0xfc00);
  EXPECT_EQ(Half(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_TRUE(std::isinf(Half::to_float(0xfc00)));
  EXPECT_TRUE(std::isnan(Half::to_float(Half(std::nanf("")).bits)));
  EXPECT_TRUE(std::isnan(Half::to_float(Half(from_bits(0xff800001)).bits)));
  EXPECT_TRUE(std::isnan(Half::to_float(0x7c01)));
}

TEST(Half, MatchesDoubleReference) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  // Random bit patterns are mostly far outside f16's range; also sweep its own range densely.
  std::uniform_real_distribution<float> in_range(-70000.0f, 70000.0f);
  std::uniform_int_distribution<int> exponent(-26, 16);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int i = 0; i < 300000; ++i) {
    float f;
    switch (i % 3) {
      case 0: f = from_bits(bits(rng)); break;
      case 1: f = in_range(rng); break;
      default: f = std::ldexp(mantissa(rng), exponent(rng)); break;
    }
    if (std::isnan(f)) continue;
    ASSERT_EQ(Half(f).bits, reference_half(f)) << std::hexfloat << f;
  }
}

TEST(HalfTensors, ConversionsThroughTensors) {
  const float unit = std::ldexp(1.0f, -24);
  Tensor f = from_vector<float>(
      {1.0f, unit, unit / 2, 65520.0f, -std::numeric_limits<float>::infinity(), std::nanf(""), 1.0f / 3.0f});
  Tensor h = f.to(DType::kF16);
  const Half* ph = h.data<Half>();
  EXPECT_EQ(ph[0].bits, 0x3c00);
  EXPECT_EQ(ph[1].bits, 0x0001);
  EXPECT_EQ(ph[2].bits, 0x0000);
  EXPECT_EQ(ph[3].bits, 0x7c00);
  EXPECT_EQ(ph[4].bits, 0xfc00);
  EXPECT_TRUE(std::isnan(static_cast<float>(ph[5])));
  EXPECT_EQ(ph[6].bits, Half(1.0f / 3.0f).bits);
  Tensor b = f.to(DType::kBF16);
  const BFloat16* pb = b.data<BFloat16>();
  EXPECT_EQ(pb[0].bits, 0x3f80);
  EXPECT_EQ(pb[6].bits, 0x3eab);
  EXPECT_TRUE(std::isnan(static_cast<float>(pb[5])));
  // Back to f32 exactly.
  std::vector<double> back = h.to(DType::kF32).to_vector<double>();
  EXPECT_EQ(back[1], static_cast<double>(unit));
  EXPECT_TRUE(std::isinf(back[3]));
  // bf16 <-> f16 goes through f32.
  EXPECT_EQ(b.to(DType::kF16).data<Half>()[0].bits, 0x3c00);
}

}  // namespace
}  // namespace coppice

// scalar_math.h's f32 gelu and gelu_grad (no erf: Phi's lower tail as
// exp(-x^2/2) times a fitted ratio) over every finite bf16 input, against
// the exact values (f64, through erfc): within 2.5e-7 of |x|, Phi's lower
// tail kept for x < 0 (where 1 + erff(x / sqrt 2) cancels), at most as many
// bf16 roundings off the correctly rounded ones as the bounds quoted in
// scalar_math.h, and the special values as the erf form gives them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "tensor/half.h"
#include "tensor/scalar_math.h"

namespace coppice {
namespace {

namespace sm = scalar_math;

float bf16_value(uint16_t bits) {
  BFloat16 b;
  b.bits = bits;
  return b;
}

// f rounded to bf16 (to nearest, ties to even), as a float.
float to_bf16(float f) { return BFloat16(f); }

// The bf16 nearest to d (ties to even): of the bf16 that d's float rounds
// to and its neighbour on d's side, the nearer.
float round_to_bf16(double d) {
  const BFloat16 nearest_float(static_cast<float>(d));
  const float b = nearest_float;
  const bool away = (static_cast<double>(b) < d) == (d >= 0);  // the neighbour away from zero
  uint16_t n_bits = away ? nearest_float.bits + 1 : nearest_float.bits - 1;
  if ((nearest_float.bits & 0x7fffu) == 0) n_bits = (d < 0 ? 0x8000u : 0u) | 1u;
  const float n = bf16_value(n_bits);
  const double db = std::fabs(b - d), dn = std::fabs(n - d);
  if (db != dn) return db < dn ? b : n;
  return nearest_float.bits % 2 == 0 ? b : n;
}

double exact_gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double exact_factor(double x) {  // Phi(x) + x phi(x)
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

TEST(GeluMathTest, EveryBf16InputWithinItsBounds) {
  int64_t inputs = 0, gelu_off = 0, grad_off = 0;
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float x = bf16_value(static_cast<uint16_t>(bits));
    if (!std::isfinite(x)) continue;
    ++inputs;
    const double want = exact_gelu(x);
    const float got = sm::gelu(x);
    ASSERT_LE(std::fabs(got - want), 2.5e-7 * std::fabs(x) + 1e-37) << "gelu(" << x << ")";
    if (x < -1.0f && x > -9.0f) {  // the lower tail: relative to itself, where erff's form cancels
      ASSERT_LE(std::fabs(got - want), 1.5e-4 * std::fabs(want)) << "gelu(" << x << ")";
    }
    gelu_off += to_bf16(got) != round_to_bf16(want);
    const double factor = exact_factor(x);
    ASSERT_LE(std::fabs(sm::gelu_grad(1.0f, x) - factor), 2.5e-7) << "gelu_grad(1, " << x << ")";
    for (int k = 0; k < 4; ++k) {
      const float g = bf16_value(static_cast<uint16_t>(0x3f80 + 37 * k));
      grad_off += to_bf16(sm::gelu_grad(g, x)) != round_to_bf16(static_cast<double>(g) * factor);
    }
  }
  EXPECT_EQ(inputs, 65280);
  EXPECT_LE(gelu_off, 76);
  EXPECT_LE(grad_off, 2);
}

TEST(GeluMathTest, SpecialValuesAsTheErfForm) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sm::gelu(inf), inf);
  EXPECT_TRUE(std::isnan(sm::gelu(-inf)));  // -inf * 0, as 0.5 x (1 + erf(x / sqrt 2))
  EXPECT_TRUE(std::isnan(sm::gelu(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::signbit(sm::gelu(-0.0f)) && sm::gelu(-0.0f) == 0.0f);
  EXPECT_TRUE(std::signbit(sm::gelu(-20.0f)) && sm::gelu(-20.0f) == 0.0f);
  EXPECT_EQ(sm::gelu(20.0f), 20.0f);
  EXPECT_NEAR(sm::gelu_grad(3.0f, 0.0f), 1.5f, 3e-7);
  EXPECT_EQ(sm::gelu_grad(1.0f, 30.0f), 1.0f);
  EXPECT_EQ(sm::gelu_grad(1.0f, -30.0f), 0.0f);
  EXPECT_TRUE(std::isnan(sm::gelu_grad(1.0f, inf)));  // inf * phi(inf), as the erf form
  // f64 keeps erf.
  EXPECT_EQ(sm::gelu(1.0), 0.5 * (1.0 + std::erf(0.70710678118654752440)));
}

}  // namespace
}  // namespace coppice

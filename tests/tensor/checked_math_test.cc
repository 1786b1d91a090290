// Tests for tensor/checked_math.h: overflow is detected on the exact result,
// whatever the operands' types, and the throwing forms name what overflowed.
#include "tensor/checked_math.h"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(CheckedMath, DetectsOverflowOfTheExactResult) {
  int64_t out = 0;
  EXPECT_FALSE(mul_overflows(int64_t{3}, int64_t{7}, &out));
  EXPECT_EQ(out, 21);
  EXPECT_TRUE(mul_overflows(int64_t{2147483648}, int64_t{2147483648} * 2, &out));  // 2^63
  EXPECT_FALSE(mul_overflows(int64_t{2147483648}, int64_t{2147483648}, &out));     // 2^62
  EXPECT_TRUE(mul_overflows(kMin, int64_t{-1}, &out));
  EXPECT_FALSE(add_overflows(kMax - 1, int64_t{1}, &out));
  EXPECT_EQ(out, kMax);
  EXPECT_TRUE(add_overflows(kMax, int64_t{1}, &out));
  EXPECT_TRUE(add_overflows(kMin, int64_t{-1}, &out));
  // Mixed signedness is exact: a negative result does not fit an unsigned type,
  // and a product past 2^63 fits uint64 but not int64.
  size_t bytes = 0;
  EXPECT_TRUE(mul_overflows(int64_t{-1}, size_t{4}, &bytes));
  EXPECT_FALSE(mul_overflows(uint64_t{1} << 62, 2, &bytes));
  EXPECT_TRUE(mul_overflows(uint64_t{1} << 62, 2, &out));
  // A narrower result type.
  int32_t small = 0;
  EXPECT_TRUE(mul_overflows(int64_t{65536}, int64_t{65536}, &small));
}

TEST(CheckedMath, ThrowingFormsNameTheValues) {
  EXPECT_EQ(checked_mul(int64_t{6}, int64_t{7}, "answer"), 42);
  EXPECT_EQ(checked_add(int64_t{40}, int64_t{2}, "answer"), 42);
  EXPECT_EQ(checked_mul<size_t>(int64_t{6}, 8, "bytes"), size_t{48});
  EXPECT_ERROR_NAMING(checked_mul(int64_t{4611686018427387904}, int64_t{4}, "empty: bytes of [2^62] f32"),
                      "empty: bytes of [2^62] f32: 4611686018427387904 * 4 overflows a 64-bit integer (max "
                      "9223372036854775807)");
  EXPECT_ERROR_NAMING(checked_add(kMax, int64_t{1}, "steps"), "steps: 9223372036854775807 + 1 overflows");
  EXPECT_ERROR_NAMING(checked_mul<size_t>(int64_t{-2}, 4, "bytes"),
                      "bytes: -2 * 4 overflows a 64-bit unsigned integer");
  // A callable `what` is only called on overflow.
  int calls = 0;
  auto what = [&] {
    ++calls;
    return std::string("lazy");
  };
  EXPECT_EQ(checked_mul(int64_t{2}, int64_t{3}, what), 6);
  EXPECT_EQ(calls, 0);
  EXPECT_ERROR_NAMING(checked_mul(kMax, int64_t{2}, what), "lazy: 9223372036854775807 * 2 overflows");
  EXPECT_EQ(calls, 1);
}

TEST(CheckedMath, CeilDivAndFitsIn) {
  EXPECT_EQ(ceil_div(0, 3), 0);
  EXPECT_EQ(ceil_div(7, 3), 3);
  EXPECT_EQ(ceil_div(9, 3), 3);
  EXPECT_EQ(ceil_div(kMax, 2), int64_t{1} << 62);  // (a + b - 1) / b would overflow
  EXPECT_TRUE(fits_in<int64_t>(-9223372036854775808.0));
  EXPECT_FALSE(fits_in<int64_t>(9223372036854775808.0));  // 2^63
  EXPECT_TRUE(fits_in<int64_t>(9223372036854774784.0));   // the largest double below 2^63
  EXPECT_FALSE(fits_in<int64_t>(1e300));
  EXPECT_FALSE(fits_in<int64_t>(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_TRUE(fits_in<uint64_t>(18446744073709549568.0));
  EXPECT_FALSE(fits_in<uint64_t>(18446744073709551616.0));  // 2^64
  EXPECT_FALSE(fits_in<uint64_t>(-1.0));
  EXPECT_TRUE(fits_in<int32_t>(2147483647.0));
  EXPECT_FALSE(fits_in<int32_t>(2147483648.0));
}

}  // namespace
}  // namespace coppice

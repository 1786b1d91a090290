// reduce_sum, reduce_max, reduce_min over [outer, r].
#include <cmath>

#include "tests/tensor/cpu/test_util.h"

namespace coppice {
namespace {

using testing::call1;
using testing::expect_error;
using testing::expect_values;
using testing::iota;
using testing::kInf;
using testing::kNaN;
using testing::make;
using testing::noise;
using testing::values;

TEST(ReduceSumTest, FloatingDtypes) {
  for (DType t : {DType::kF64, DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t r : {1, 7, 5000, 10000}) {
      const int64_t outer = 3;
      Tensor x = make({outer, r}, noise(outer * r, r), t);
      std::vector<double> xv = values(x), want(outer, 0.0);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < r; ++i) want[o] += xv[o * r + i];
      Tensor s = call1("reduce_sum", {x});
      EXPECT_EQ(s.dtype(), t);
      EXPECT_EQ(s.shape(), (Shape{outer}));
      double tol = t == DType::kF64 ? 1e-12 : t == DType::kF32 ? 1e-3 : 0.05 * std::sqrt(static_cast<double>(r));
      expect_values(s, want, 1e-2 * (t == DType::kBF16 || t == DType::kF16), tol, str_cat(dtype_name(t), " r=", r));
    }
  }
}

TEST(ReduceSumTest, IntegersSumIntoI64) {
  for (DType t : {DType::kI32, DType::kI64, DType::kU8, DType::kBool}) {
    Tensor x = make({2, 3}, {1, 1, 0, 1, 0, 0}, t);
    Tensor s = call1("reduce_sum", {x});
    EXPECT_EQ(s.dtype(), DType::kI64) << dtype_name(t);
    expect_values(s, {2, 1});
  }
  Tensor big = make({1, 3}, {2147483647, 2147483647, 2}, DType::kI32);
  EXPECT_EQ(call1("reduce_sum", {big}).data<int64_t>()[0], 4294967296LL);  // no i32 overflow
  Tensor u = make({1, 4}, {255, 255, 255, 255}, DType::kU8);
  expect_values(call1("reduce_sum", {u}), {1020});
}

TEST(ReduceSumTest, ParallelLongRowIsDeterministic) {
  const int64_t r = 1 << 20;
  Tensor x = make({2, r}, noise(2 * r, 9), DType::kF32);
  Tensor a = call1("reduce_sum", {x});
  Tensor b = call1("reduce_sum", {x});
  EXPECT_EQ(values(a), values(b));
  std::vector<double> xv = values(x);
  double s0 = 0;
  for (int64_t i = 0; i < r; ++i) s0 += xv[i];
  EXPECT_NEAR(values(a)[0], s0, 1e-2);
}

TEST(ReduceSumTest, EmptyShapesAndNonContiguous) {
  expect_values(call1("reduce_sum", {Tensor::empty({3, 0})}), {0, 0, 0});
  EXPECT_EQ(call1("reduce_sum", {Tensor::empty({0, 4})}).numel(), 0);
  Tensor x = iota({3, 2}, DType::kF64).t();  // [2, 3] transposed: rows {0, 2, 4} and {1, 3, 5}
  expect_values(call1("reduce_sum", {x}), {6, 9});
}

TEST(ReduceExtremeTest, ValuesAndFirstIndexOnTies) {
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8}) {
    Tensor x = make({3, 5}, {3, 9, 1, 9, 0, 4, 4, 4, 4, 4, 0, 7, 0, 2, 7}, t);
    std::vector<Tensor> mx = dispatch("reduce_max", {x});
    ASSERT_EQ(mx.size(), 2u);
    EXPECT_EQ(mx[0].dtype(), t);
    EXPECT_EQ(mx[1].dtype(), DType::kI64);
    expect_values(mx[0], {9, 4, 7});
    expect_values(mx[1], {1, 0, 1});
    std::vector<Tensor> mn = dispatch("reduce_min", {x});
    expect_values(mn[0], {0, 4, 0});
    expect_values(mn[1], {4, 0, 0});
  }
  Tensor b = make({2, 3}, {0, 1, 1, 0, 0, 0}, DType::kBool);
  expect_values(dispatch("reduce_max", {b})[1], {1, 0});
  expect_values(dispatch("reduce_min", {b})[1], {0, 0});
}

TEST(ReduceExtremeTest, NaNAndInfinities) {
  Tensor x = make({3, 4}, {1, kNaN, 5, kNaN, -kInf, -kInf, -kInf, -kInf, 2, kInf, 3, kInf});
  std::vector<Tensor> mx = dispatch("reduce_max", {x});
  expect_values(mx[0], {kNaN, -kInf, kInf});
  expect_values(mx[1], {1, 0, 1});
  std::vector<Tensor> mn = dispatch("reduce_min", {x});
  expect_values(mn[0], {kNaN, -kInf, 2});
  expect_values(mn[1], {1, 0, 0});
}

TEST(ReduceExtremeTest, LargeMatchesReference) {
  const int64_t outer = 257, r = 1031;
  Tensor x = make({outer, r}, noise(outer * r, 11, -100, 100), DType::kF32);
  std::vector<Tensor> mx = dispatch("reduce_max", {x});
  const float* p = x.data<float>();
  for (int64_t o = 0; o < outer; ++o) {
    int64_t at = 0;
    for (int64_t i = 1; i < r; ++i)
      if (p[o * r + i] > p[o * r + at]) at = i;
    ASSERT_EQ(mx[1].data<int64_t>()[o], at);
    ASSERT_EQ(mx[0].data<float>()[o], p[o * r + at]);
  }
}

TEST(ReduceExtremeTest, EmptyDimensionThrows) {
  expect_error([] { dispatch("reduce_max", {Tensor::empty({2, 0})}); }, "reduce_max");
  expect_error([] { dispatch("reduce_min", {Tensor::empty({2, 0})}); }, "reduce_min");
  expect_error([] { dispatch("reduce_sum", {Tensor::empty({2, 3, 4})}); }, "reduce_sum");
  EXPECT_EQ(dispatch("reduce_max", {Tensor::empty({0, 3})})[0].numel(), 0);
}

}  // namespace
}  // namespace coppice

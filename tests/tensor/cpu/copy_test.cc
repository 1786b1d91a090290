// fill_ and copy_ through the dispatcher.
#include <cstring>

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
using testing::values;

const DType kAllTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                           DType::kI32, DType::kI64, DType::kU8,   DType::kBool};

Tensor fill(Tensor t, double v) {
  Attrs a;
  a.set("value", v);
  return call1("fill_", {t}, a);
}

TEST(FillTest, EveryDtype) {
  for (DType t : kAllTypes) {
    Tensor x = Tensor::empty({3, 5}, t);
    Tensor r = fill(x, 3.0);
    EXPECT_TRUE(r.is_same(x));
    expect_values(x, std::vector<double>(15, t == DType::kBool ? 1.0 : 3.0), 0, 0, std::string(dtype_name(t)));
  }
  Tensor h = Tensor::empty({4}, DType::kBF16);
  fill(h, 0.1);
  expect_values(h, std::vector<double>(4, static_cast<float>(BFloat16(0.1f))));
}

TEST(FillTest, StridedViewOnly) {
  Tensor x = make({3, 4}, std::vector<double>(12, 0.0));
  fill(x.slice(1, 1, 4, 2), 7.0);  // columns 1 and 3
  expect_values(x, {0, 7, 0, 7, 0, 7, 0, 7, 0, 7, 0, 7});
  fill(x.t().select(0, 0), -1.0);  // column 0, via a transposed view
  expect_values(x, {-1, 7, 0, 7, -1, 7, 0, 7, -1, 7, 0, 7});
}

TEST(FillTest, ZeroElementsAndScalar) {
  Tensor e = Tensor::empty({0, 3});
  fill(e, 1.0);
  Tensor s = Tensor::empty({});
  fill(s, kInf);
  expect_values(s, {kInf});
}

TEST(FillTest, LargeParallel) {
  Tensor x = Tensor::empty({1000, 1001}, DType::kI32);
  fill(x, -5);
  const int32_t* p = x.data<int32_t>();
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(p[i], -5);
}

TEST(CopyTest, SameDtypeContiguous) {
  Tensor src = iota({2, 3});
  Tensor dst = Tensor::empty({2, 3});
  Tensor r = call1("copy_", {dst, src});
  EXPECT_TRUE(r.is_same(dst));
  expect_values(dst, {0, 1, 2, 3, 4, 5});
}

TEST(CopyTest, EveryDtypePair) {
  const std::vector<double> v = {0, 1, 2, 3, 100, 7};
  for (DType from : kAllTypes) {
    for (DType to : kAllTypes) {
      Tensor src = make({2, 3}, from == DType::kBool ? std::vector<double>{0, 1, 1, 0, 1, 1} : v, from);
      Tensor dst = Tensor::empty({3, 2}, to).t();  // a transposed destination
      call1("copy_", {dst, src});
      std::vector<double> want = values(src);
      if (to == DType::kBool) {
        for (double& x : want) x = x != 0;
      }
      expect_values(dst, want, 0, 0, str_cat(dtype_name(from), "->", dtype_name(to)));
    }
  }
}

TEST(CopyTest, Conversions) {
  Tensor src = make({6}, {1.7, -1.7, 2.5, -0.0, 0.5, 255}, DType::kF64);
  Tensor i = Tensor::empty({6}, DType::kI32);
  call1("copy_", {i, src});
  expect_values(i, {1, -1, 2, 0, 0, 255});  // truncation toward zero
  Tensor b = Tensor::empty({6}, DType::kBool);
  call1("copy_", {b, src});
  expect_values(b, {1, 1, 1, 0, 1, 1});
  Tensor h = Tensor::empty({6}, DType::kF16);
  call1("copy_", {h, src});
  expect_values(h, {1.7001953125, -1.7001953125, 2.5, 0, 0.5, 255});
  Tensor bf = Tensor::empty({6}, DType::kBF16);
  call1("copy_", {bf, h});
  expect_values(bf, {1.703125, -1.703125, 2.5, 0, 0.5, 255});
  Tensor f = Tensor::empty({3});
  call1("copy_", {f, make({3}, {kNaN, kInf, -kInf}, DType::kBF16)});
  expect_values(f, {kNaN, kInf, -kInf});
}

TEST(CopyTest, BroadcastSource) {
  Tensor dst = Tensor::empty({2, 3, 4}, DType::kF64);
  call1("copy_", {dst, make({3, 1}, {1, 2, 3}, DType::kF32)});
  std::vector<double> want;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) want.push_back(b + 1);
  expect_values(dst, want);
  call1("copy_", {dst, make({}, {9})});  // a 0-dimensional source
  expect_values(dst, std::vector<double>(24, 9));
  Tensor row = iota({4}, DType::kI64);
  call1("copy_", {dst, row.expand({3, 4})});  // an expanded (stride-0) source
  for (size_t i = 0; i < 24; ++i) EXPECT_EQ(values(dst)[i], static_cast<double>(i % 4));
}

TEST(CopyTest, StridedBothSides) {
  Tensor big = iota({4, 6});
  Tensor src = big.slice(0, 0, 4, 2).slice(1, 1, 6, 2);  // rows 0,2; cols 1,3,5
  Tensor dst_store = make({3, 4}, std::vector<double>(12, -1));
  Tensor dst = dst_store.t().slice(0, 0, 3).slice(1, 1, 3);  // [3, 2] view, transposed
  call1("copy_", {dst, src.t()});
  // dst[i][j] = src[j][i]; dst = dst_store.t()[0:3, 1:3] so dst_store[j+1][i] = src[j][i].
  expect_values(dst_store, {-1, -1, -1, -1, 1, 3, 5, -1, 13, 15, 17, -1});
}

TEST(CopyTest, PermutedLarge) {
  Tensor src = iota({37, 53, 11}, DType::kF32);
  Tensor dst = Tensor::empty({11, 37, 53}, DType::kF64);
  call1("copy_", {dst, src.permute({2, 0, 1})});
  const double* p = dst.data<double>();
  for (int64_t k = 0; k < 11; ++k)
    for (int64_t i = 0; i < 37; ++i)
      for (int64_t j = 0; j < 53; ++j) ASSERT_EQ(p[(k * 37 + i) * 53 + j], (i * 53 + j) * 11 + k);
}

TEST(CopyTest, OverlappingViews) {
  Tensor x = iota({5});
  call1("copy_", {x.slice(0, 1, 5), x.slice(0, 0, 4)});  // shift right by one
  expect_values(x, {0, 0, 1, 2, 3});
  Tensor m = iota({3, 3});
  call1("copy_", {m, m.t()});  // in-place transpose
  expect_values(m, {0, 3, 6, 1, 4, 7, 2, 5, 8});
  call1("copy_", {m, m});  // the same view: nothing to do
  expect_values(m, {0, 3, 6, 1, 4, 7, 2, 5, 8});
}

TEST(CopyTest, ZeroElements) {
  Tensor dst = Tensor::empty({0, 4});
  call1("copy_", {dst, Tensor::empty({0, 4}, DType::kI64)});
  call1("copy_", {dst, Tensor::empty({4}, DType::kI64)});
  EXPECT_EQ(dst.numel(), 0);
}

TEST(CopyTest, BadBroadcastThrows) {
  Tensor dst = Tensor::empty({2, 3});
  expect_error([&] { dispatch("copy_", {dst, Tensor::empty({3, 3})}); }, "copy_");
  expect_error([&] { dispatch("copy_", {Tensor::empty({3}), Tensor::empty({2, 3})}); }, "copy_");
}

TEST(CopyTest, TensorMethodsUseTheKernels) {
  Tensor x = iota({2, 3}, DType::kF64);
  Tensor c = x.t().contiguous();
  EXPECT_TRUE(c.is_contiguous());
  expect_values(c, {0, 3, 1, 4, 2, 5});
  EXPECT_EQ(x.select(0, 1).select(0, 2).item(), 5.0);
  EXPECT_EQ(x.to(DType::kI32).to_vector<int>(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace coppice

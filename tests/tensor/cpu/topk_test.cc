// topk: sorted, ties by lower index first.
#include <algorithm>
#include <numeric>

#include "tests/tensor/cpu/test_util.h"

namespace coppice {
namespace {

using testing::expect_error;
using testing::expect_values;
using testing::kInf;
using testing::kNaN;
using testing::make;
using testing::noise;

Attrs topk_attrs(int64_t k, bool largest) {
  Attrs a;
  a.set("k", k);
  a.set("largest", largest);
  return a;
}

TEST(TopkTest, TiesGoToTheLowerIndex) {
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8}) {
    Tensor x = make({2, 6}, {3, 5, 3, 5, 1, 5, 2, 2, 2, 2, 2, 2}, t);
    std::vector<Tensor> big = dispatch("topk", {x}, topk_attrs(4, true));
    ASSERT_EQ(big.size(), 2u);
    EXPECT_EQ(big[0].shape(), (Shape{2, 4}));
    EXPECT_EQ(big[0].dtype(), t);
    EXPECT_EQ(big[1].dtype(), DType::kI64);
    expect_values(big[0], {5, 5, 5, 3, 2, 2, 2, 2});
    expect_values(big[1], {1, 3, 5, 0, 0, 1, 2, 3});
    std::vector<Tensor> small = dispatch("topk", {x}, topk_attrs(3, false));
    expect_values(small[0], {1, 3, 3, 2, 2, 2});
    expect_values(small[1], {4, 0, 2, 0, 1, 2});
  }
}

TEST(TopkTest, MatchesStableSortReference) {
  const int64_t outer = 37, r = 523;
  std::vector<double> v = noise(outer * r, 71, -20, 20);
  for (double& x : v) x = std::round(x);  // many ties
  Tensor x = make({outer, r}, v, DType::kF32);
  for (bool largest : {true, false}) {
    for (int64_t k : std::vector<int64_t>{0, 1, 17, 300, r}) {
      std::vector<Tensor> out = dispatch("topk", {x}, topk_attrs(k, largest));
      std::vector<double> want_v, want_i;
      for (int64_t o = 0; o < outer; ++o) {
        std::vector<int64_t> order(r);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          return largest ? v[o * r + a] > v[o * r + b] : v[o * r + a] < v[o * r + b];
        });
        for (int64_t j = 0; j < k; ++j) {
          want_v.push_back(v[o * r + order[j]]);
          want_i.push_back(static_cast<double>(order[j]));
        }
      }
      expect_values(out[0], want_v);
      expect_values(out[1], want_i, 0, 0, str_cat("k=", k, " largest=", largest));
    }
  }
}

TEST(TopkTest, NaNIsLargest) {
  Tensor x = make({1, 5}, {1, kNaN, kInf, kNaN, -kInf});
  std::vector<Tensor> big = dispatch("topk", {x}, topk_attrs(5, true));
  expect_values(big[0], {kNaN, kNaN, kInf, 1, -kInf});
  expect_values(big[1], {1, 3, 2, 0, 4});
  std::vector<Tensor> small = dispatch("topk", {x}, topk_attrs(5, false));
  expect_values(small[0], {-kInf, 1, kInf, kNaN, kNaN});
  expect_values(small[1], {4, 0, 2, 1, 3});
}

TEST(TopkTest, NonContiguousAndEmpty) {
  Tensor x = make({3, 2}, {1, 6, 5, 2, 3, 4}).t();  // rows {1, 5, 3} and {6, 2, 4}
  std::vector<Tensor> out = dispatch("topk", {x}, topk_attrs(2, true));
  expect_values(out[0], {5, 3, 6, 4});
  expect_values(out[1], {1, 2, 0, 2});
  std::vector<Tensor> e = dispatch("topk", {Tensor::empty({0, 5})}, topk_attrs(2, true));
  EXPECT_EQ(e[0].shape(), (Shape{0, 2}));
}

TEST(TopkTest, BadKThrows) {
  expect_error([] { dispatch("topk", {Tensor::empty({2, 3})}, topk_attrs(4, true)); }, "topk");
  expect_error([] { dispatch("topk", {Tensor::empty({2, 3})}, topk_attrs(-1, true)); }, "topk");
  expect_error([] { dispatch("topk", {Tensor::empty({3})}, topk_attrs(1, true)); }, "topk");
}

}  // namespace
}  // namespace coppice

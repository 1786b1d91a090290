// index_select, gather and scatter_add, including out-of-range indices.
#include "tests/tensor/cpu/test_util.h"

namespace coppice {
namespace {

using testing::call1;
using testing::expect_error;
using testing::expect_values;
using testing::iota;
using testing::make;
using testing::noise;
using testing::values;

Attrs dim_attr(int64_t d) {
  Attrs a;
  a.set("dim", d);
  return a;
}

Tensor idx(const Shape& shape, const std::vector<double>& v) { return make(shape, v, DType::kI64); }

TEST(IndexSelectTest, EveryDimAndDtype) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kI32, DType::kU8, DType::kBool}) {
    Tensor x = make({2, 3, 4}, values(iota({2, 3, 4}, DType::kF64)), t);
    if (t == DType::kBool) x = make({2, 3, 4}, std::vector<double>(24, 1), t);
    std::vector<double> xv = values(x);
    for (int64_t d : {0, 1, 2, -1}) {
      int64_t dd = d < 0 ? d + 3 : d;
      Tensor index = dd == 0 ? idx({3}, {1, 0, 1}) : idx({3}, {2, 0, 2});
      Tensor out = call1("index_select", {x, index}, dim_attr(d));
      Shape shape = x.shape();
      shape[dd] = 3;
      EXPECT_EQ(out.shape(), shape);
      EXPECT_EQ(out.dtype(), t);
      std::vector<double> iv = values(index), want;
      for (int64_t a = 0; a < shape[0]; ++a)
        for (int64_t b = 0; b < shape[1]; ++b)
          for (int64_t c = 0; c < shape[2]; ++c) {
            int64_t co[3] = {a, b, c};
            co[dd] = static_cast<int64_t>(iv[co[dd]]);
            want.push_back(xv[(co[0] * 3 + co[1]) * 4 + co[2]]);
          }
      expect_values(out, want, 0, 0, str_cat(dtype_name(t), " dim ", d));
    }
  }
}

TEST(IndexSelectTest, NonContiguousAndEmpty) {
  Tensor x = iota({4, 3}).t();  // [3, 4]: x[i][j] = 3j + i
  expect_values(call1("index_select", {x, idx({2}, {2, 0})}, dim_attr(0)), {2, 5, 8, 11, 0, 3, 6, 9});
  Tensor e = call1("index_select", {x, Tensor::empty({0}, DType::kI64)}, dim_attr(1));
  EXPECT_EQ(e.shape(), (Shape{3, 0}));
}

TEST(IndexSelectTest, OutOfRangeThrows) {
  Tensor x = iota({3, 2});
  expect_error([&] { dispatch("index_select", {x, idx({2}, {0, 3})}, dim_attr(0)); }, "index_select");
  expect_error([&] { dispatch("index_select", {x, idx({1}, {-1})}, dim_attr(0)); }, "index_select");
  expect_error([&] { dispatch("index_select", {x, make({1}, {0}, DType::kI32)}, dim_attr(0)); }, "index_select");
  expect_error([&] { dispatch("index_select", {x, idx({1, 1}, {0})}, dim_attr(0)); }, "index_select");
  expect_error([&] { dispatch("index_select", {x, idx({1}, {0})}, dim_attr(2)); }, "index_select");
}

TEST(GatherTest, BothDimsWithSmallerIndex) {
  Tensor x = iota({3, 4}, DType::kF64);  // x[i][j] = 4i + j
  // dim 1, index [2, 3]: out[i][j] = x[i][index[i][j]]
  Tensor out = call1("gather", {x, idx({2, 3}, {3, 0, 3, 1, 1, 2})}, dim_attr(1));
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  expect_values(out, {3, 0, 3, 5, 5, 6});
  // dim 0, index [2, 2]: out[i][j] = x[index[i][j]][j]
  expect_values(call1("gather", {x, idx({2, 2}, {2, 0, 1, 2})}, dim_attr(0)), {8, 1, 4, 9});
}

TEST(GatherTest, ThreeDimsAgainstReference) {
  const Shape xs = {4, 5, 6}, is = {3, 7, 5};  // dim 1 may be longer than x's
  Tensor x = make(xs, noise(120, 51), DType::kF32);
  std::vector<double> iv = noise(shape_numel(is), 52, 0, 5);
  for (double& v : iv) v = std::floor(v);
  Tensor index = idx(is, iv);
  Tensor out = call1("gather", {x, index}, dim_attr(1));
  std::vector<double> xv = values(x), want;
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t b = 0; b < 7; ++b)
      for (int64_t c = 0; c < 5; ++c) {
        int64_t k = static_cast<int64_t>(iv[(a * 7 + b) * 5 + c]);
        want.push_back(xv[(a * 5 + k) * 6 + c]);
      }
  expect_values(out, want);
}

TEST(GatherTest, IntegerDtypeAndZeroDim) {
  Tensor x = make({4}, {10, 20, 30, 40}, DType::kI64);
  expect_values(call1("gather", {x, idx({3}, {3, 3, 0})}, dim_attr(0)), {40, 40, 10});
  Tensor s = call1("gather", {make({}, {5}), idx({}, {0})}, dim_attr(0));
  EXPECT_EQ(s.dim(), 0);
  expect_values(s, {5});
}

TEST(GatherTest, BadInputsThrow) {
  Tensor x = iota({3, 4});
  expect_error([&] { dispatch("gather", {x, idx({1, 2}, {0, 4})}, dim_attr(1)); }, "gather");
  expect_error([&] { dispatch("gather", {x, idx({1, 2}, {0, -1})}, dim_attr(1)); }, "gather");
  expect_error([&] { dispatch("gather", {x, idx({4, 1}, {0, 0, 0, 0})}, dim_attr(1)); }, "gather");
  expect_error([&] { dispatch("gather", {x, idx({2}, {0, 0})}, dim_attr(1)); }, "gather");
}

TEST(ScatterAddTest, DuplicatesAccumulate) {
  Tensor x = make({2, 4}, {1, 1, 1, 1, 2, 2, 2, 2});
  Tensor index = idx({2, 3}, {0, 0, 3, 1, 1, 1});
  Tensor src = make({2, 3}, {10, 20, 30, 1, 2, 3});
  Tensor out = call1("scatter_add", {x, index, src}, dim_attr(1));
  expect_values(out, {31, 1, 1, 31, 2, 8, 2, 2});
  expect_values(x, {1, 1, 1, 1, 2, 2, 2, 2});  // x is left alone
  // dim 0: out[index[i][j]][j] += src[i][j]
  Tensor o0 = call1("scatter_add", {x, idx({2, 2}, {1, 0, 1, 1}), make({2, 2}, {5, 6, 7, 8})}, dim_attr(0));
  expect_values(o0, {1, 7, 1, 1, 14, 10, 2, 2});
}

TEST(ScatterAddTest, ThreeDimsAgainstReferenceAndDtypes) {
  for (DType t : {DType::kF64, DType::kF32, DType::kBF16, DType::kI32, DType::kI64}) {
    const Shape xs = {3, 4, 5}, is = {3, 6, 5};
    Tensor x = make(xs, std::vector<double>(60, 1), t);
    std::vector<double> iv = noise(shape_numel(is), 61, 0, 4);
    for (double& v : iv) v = std::floor(v);
    std::vector<double> sv = noise(shape_numel(is), 62, -8, 8);
    for (double& v : sv) v = std::round(v);
    Tensor out = call1("scatter_add", {x, idx(is, iv), make(is, sv, t)}, dim_attr(1));
    std::vector<double> want(60, 1.0);
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t b = 0; b < 6; ++b)
        for (int64_t c = 0; c < 5; ++c) {
          int64_t p = (a * 6 + b) * 5 + c;
          want[(a * 4 + static_cast<int64_t>(iv[p])) * 5 + c] += sv[p];
        }
    EXPECT_EQ(out.dtype(), t);
    expect_values(out, want, 0, 0, std::string(dtype_name(t)));
  }
}

TEST(ScatterAddTest, LargeParallelIsExact) {
  const int64_t rows = 64, cols = 5000, n = 50;
  Tensor x = make({n, cols}, std::vector<double>(n * cols, 0), DType::kI64);
  std::vector<double> iv(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) iv[i] = static_cast<double>((i * 7) % n);
  Tensor src = make({rows, cols}, std::vector<double>(rows * cols, 1), DType::kI64);
  Tensor out = call1("scatter_add", {x, idx({rows, cols}, iv), src}, dim_attr(0));
  std::vector<double> want(n * cols, 0);
  for (int64_t i = 0; i < rows * cols; ++i) want[static_cast<int64_t>(iv[i]) * cols + i % cols] += 1;
  expect_values(out, want);
}

TEST(ScatterAddTest, BadInputsThrow) {
  Tensor x = iota({2, 3});
  expect_error([&] { dispatch("scatter_add", {x, idx({1, 1}, {3}), make({1, 1}, {1})}, dim_attr(1)); }, "scatter_add");
  expect_error([&] { dispatch("scatter_add", {x, idx({1, 1}, {-1}), make({1, 1}, {1})}, dim_attr(1)); }, "scatter_add");
  expect_error(
      [&] {
        dispatch("scatter_add", {x, idx({1, 1}, {0}), make({1, 1}, {1}, DType::kF64)}, dim_attr(1));
      },
      "scatter_add");
  expect_error(
      [&] {
        dispatch("scatter_add", {x, idx({1, 2}, {0, 0}), make({1, 1}, {1})}, dim_attr(1));
      },
      "scatter_add");
  expect_values(x, {0, 1, 2, 3, 4, 5});
}

}  // namespace
}  // namespace coppice

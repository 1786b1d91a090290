// The binary elementwise kernels and where.
#include <cmath>

#include "tensor/binary_ops.h"
#include "tensor/kernels.h"
#include "tests/tensor/cpu/test_util.h"

namespace coppice {
namespace {

using testing::call1;
using testing::expect_error;
using testing::expect_values;
using testing::kInf;
using testing::kNaN;
using testing::make;
using testing::noise;
using testing::values;

double reference(std::string_view op, double a, double b) {
  if (op == "add") return a + b;
  if (op == "sub") return a - b;
  if (op == "mul") return a * b;
  if (op == "div") return a / b;
  if (op == "pow") return std::pow(a, b);
  if (op == "maximum") return std::max(a, b);
  if (op == "minimum") return std::min(a, b);
  if (op == "eq") return a == b;
  if (op == "ne") return a != b;
  if (op == "relu_backward") return b > 0 ? a : 0;
  if (op == "gelu_backward")
    return a * (0.5 * (1 + std::erf(b / std::sqrt(2.0))) + b * std::exp(-0.5 * b * b) / std::sqrt(2 * M_PI));
  if (op == "gelu_tanh_backward") {  // d/db of b/2 (1 + tanh(u(b))), times a
    const double u = std::sqrt(2 / M_PI) * (b + 0.044715 * b * b * b);
    const double du = std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * b * b);
    return a * (0.5 * (1 + std::tanh(u)) + 0.5 * b * du / (std::cosh(u) * std::cosh(u)));
  }
  if (op == "lt") return a < b;
  if (op == "le") return a <= b;
  if (op == "gt") return a > b;
  if (op == "ge") return a >= b;
  ADD_FAILURE() << op;
  return 0;
}

TEST(BinaryTest, EveryOpEveryFloatingDtypeWithBroadcast) {
  for (DType t : {DType::kF64, DType::kF32, DType::kBF16, DType::kF16}) {
    for (std::string_view op : binary_ops::names()) {
      // a [3, 1, 4] and b [5, 1] broadcast to [3, 5, 4]; pow takes a positive base.
      std::vector<double> av = noise(12, 4, op == "pow" ? 0.1 : -2, 2);
      std::vector<double> bv = noise(5, 5, -2, 2);
      bv[1] = av[1];  // some equal pairs for the comparisons
      Tensor a = make({3, 1, 4}, av, t);
      Tensor b = make({5, 1}, bv, t);
      Tensor out = call1(op, {a, b});
      const bool cmp = op == "eq" || op == "ne" || op == "lt" || op == "le" || op == "gt" || op == "ge";
      EXPECT_EQ(out.dtype(), cmp ? DType::kBool : t);
      EXPECT_EQ(out.shape(), (Shape{3, 5, 4}));
      std::vector<double> ar = values(a), br = values(b), want;
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 5; ++j)
          for (int k = 0; k < 4; ++k) want.push_back(reference(op, ar[i * 4 + k], br[j]));
      double tol = cmp ? 0 : t == DType::kF64 ? 1e-14 : t == DType::kF32 ? 2e-6 : t == DType::kBF16 ? 8e-3 : 1e-3;
      expect_values(out, want, tol, tol, str_cat(op, " ", dtype_name(t)));
    }
  }
}

TEST(BinaryTest, NonContiguousOperands) {
  Tensor base = make({6, 4}, noise(24, 6), DType::kF64);
  Tensor a = base.t();                    // [4, 6], transposed
  Tensor b = base.slice(0, 0, 6, 1).t();  // same values, another view
  Tensor c = make({4}, {1, 2, 3, 4}, DType::kF64).unsqueeze(1).expand({4, 6});
  Tensor out = call1("sub", {call1("add", {a, c}), b});
  std::vector<double> want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) want.push_back(i + 1);
  expect_values(out, want, 1e-14, 1e-14);
  Tensor prod = call1("mul", {base.slice(1, 0, 4, 2), base.slice(1, 1, 4, 2)});  // columns 0,2 times 1,3
  std::vector<double> bv = values(base);
  std::vector<double> pw;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 2; ++j) pw.push_back(bv[i * 4 + 2 * j] * bv[i * 4 + 2 * j + 1]);
  expect_values(prod, pw, 1e-15);
}

TEST(BinaryTest, IntegerAndBool) {
  for (DType t : {DType::kI32, DType::kI64, DType::kU8}) {
    Tensor a = make({4}, {1, 7, 20, 3}, t);
    Tensor b = make({4}, {4, 7, 6, 3}, t);
    expect_values(call1("add", {a, b}), {5, 14, 26, 6});
    expect_values(call1("mul", {a, b}), {4, 49, 120, 9});
    expect_values(call1("maximum", {a, b}), {4, 7, 20, 3});
    expect_values(call1("minimum", {a, b}), {1, 7, 6, 3});
    expect_values(call1("lt", {a, b}), {1, 0, 0, 0});
    expect_values(call1("eq", {a, b}), {0, 1, 0, 1});
    expect_values(call1("ge", {a, b}), {0, 1, 1, 1});
    expect_values(call1("sub", {a, b}),
                  t == DType::kU8 ? std::vector<double>{253, 0, 14, 0} : std::vector<double>{-3, 0, 14, 0});
    EXPECT_EQ(call1("add", {a, b}).dtype(), t);
  }
  Tensor big = make({1}, {2147483647}, DType::kI32);
  expect_values(call1("add", {big, make({1}, {1}, DType::kI32)}), {-2147483648.0});  // wraps
  Tensor p = make({4}, {0, 0, 1, 1}, DType::kBool);
  Tensor q = make({4}, {0, 1, 0, 1}, DType::kBool);
  expect_values(call1("add", {p, q}), {0, 1, 1, 1});
  expect_values(call1("mul", {p, q}), {0, 0, 0, 1});
  expect_values(call1("maximum", {p, q}), {0, 1, 1, 1});
  expect_values(call1("minimum", {p, q}), {0, 0, 0, 1});
  expect_values(call1("ne", {p, q}), {0, 1, 1, 0});
  expect_values(call1("lt", {p, q}), {0, 1, 0, 0});
}

TEST(BinaryTest, NaNPropagatesThroughMaximumMinimum) {
  Tensor a = make({3}, {kNaN, 1, kNaN});
  Tensor b = make({3}, {1, kNaN, kNaN});
  expect_values(call1("maximum", {a, b}), {kNaN, kNaN, kNaN});
  expect_values(call1("minimum", {a, b}), {kNaN, kNaN, kNaN});
  expect_values(call1("eq", {a, b}), {0, 0, 0});
  expect_values(call1("ne", {a, b}), {1, 1, 1});
  expect_values(call1("div", {make({3}, {1, -1, 0}), make({3}, {0, 0, 0})}), {kInf, -kInf, kNaN});
}

TEST(BinaryTest, ScalarAndZeroElementShapes) {
  expect_values(call1("mul", {make({}, {3}), make({2}, {2, 5})}), {6, 15});
  Tensor z = call1("add", {Tensor::empty({0, 3}), Tensor::empty({1, 3})});
  EXPECT_EQ(z.shape(), (Shape{0, 3}));
  Tensor s = call1("add", {make({}, {1}), make({}, {2})});
  EXPECT_EQ(s.dim(), 0);
  expect_values(s, {3});
}

TEST(BinaryTest, LargeParallelWithBroadcastRow) {
  const int64_t rows = 513, cols = 1001;
  Tensor a = make({rows, cols}, noise(rows * cols, 7), DType::kF32);
  Tensor b = make({cols}, noise(cols, 8), DType::kF32);
  Tensor out = call1("add", {a.t().contiguous().t(), b});  // a column-major a
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const float* po = out.data<float>();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) ASSERT_EQ(po[i * cols + j], pa[i * cols + j] + pb[j]);
}

TEST(BinaryTest, BadInputsThrowNamingTheOp) {
  expect_error([] { dispatch("add", {make({2}, {1, 2}), make({2}, {1, 2}, DType::kF64)}); }, "add");
  expect_error([] { dispatch("mul", {make({2}, {1, 2}), make({3}, {1, 2, 3})}); }, "mul");
  expect_error([] { dispatch("div", {make({2}, {1, 2}, DType::kI32), make({2}, {1, 2}, DType::kI32)}); }, "div");
  expect_error([] { dispatch("sub", {make({1}, {1}, DType::kBool), make({1}, {1}, DType::kBool)}); }, "sub");
}

TEST(WhereTest, BroadcastEveryOperand) {
  Tensor cond = make({2, 1}, {1, 0}, DType::kBool);
  Tensor a = make({3}, {1, 2, 3}, DType::kF64);
  Tensor b = make({}, {-1}, DType::kF64);
  Tensor out = call1("where", {cond, a, b});
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  expect_values(out, {1, 2, 3, -1, -1, -1});
}

TEST(WhereTest, AnyDtypeAndStrides) {
  for (DType t : {DType::kBF16, DType::kI64, DType::kU8, DType::kBool}) {
    Tensor cond = make({3, 2}, {1, 0, 0, 1, 1, 1}, DType::kBool).t();  // [2, 3]
    Tensor a = make({2, 3}, {1, 1, 1, 1, 1, 1}, t);
    Tensor b = make({3, 2}, {0, 0, 0, 0, 0, 0}, t).t();
    Tensor out = call1("where", {cond, a, b});
    EXPECT_EQ(out.dtype(), t);
    expect_values(out, {1, 0, 1, 0, 1, 1});
  }
}

TEST(WhereTest, BadInputsThrow) {
  expect_error([] { dispatch("where", {make({2}, {1, 0}), make({2}, {1, 2}), make({2}, {3, 4})}); }, "where");
  expect_error(
      [] {
        dispatch("where", {make({2}, {1, 0}, DType::kBool), make({2}, {1, 2}), make({2}, {3, 4}, DType::kF64)});
      },
      "where");
}

}  // namespace
}  // namespace coppice

// The unary elementwise kernels against double-precision references.
#include <cmath>
#include <functional>

#include "tensor/kernels.h"
#include "tensor/unary_ops.h"
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

double reference(std::string_view op, double x) {
  if (op == "neg") return -x;
  if (op == "abs") return std::abs(x);
  if (op == "sign") return x > 0 ? 1 : (x < 0 ? -1 : x);
  if (op == "exp") return std::exp(x);
  if (op == "log") return std::log(x);
  if (op == "sqrt") return std::sqrt(x);
  if (op == "rsqrt") return 1 / std::sqrt(x);
  if (op == "relu") return x > 0 ? x : 0;
  if (op == "gelu") return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  if (op == "gelu_tanh") return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  if (op == "sigmoid") return 1 / (1 + std::exp(-x));
  if (op == "tanh") return std::tanh(x);
  if (op == "erf") return std::erf(x);
  if (op == "softplus") return x > 20 ? x : std::log1p(std::exp(x));
  if (op == "clamp") return std::min(std::max(x, -0.5), 0.75);
  ADD_FAILURE() << op;
  return 0;
}

Attrs clamp_attrs(double lo, double hi) {
  Attrs a;
  a.set("min", lo);
  a.set("max", hi);
  return a;
}

TEST(UnaryTest, EveryOpEveryFloatingDtype) {
  for (DType t : {DType::kF64, DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<std::string_view> ops = unary_ops::names();
    ops.push_back("clamp");
    for (std::string_view op : ops) {
      const bool positive = op == "log" || op == "sqrt" || op == "rsqrt";
      std::vector<double> v = noise(257, 1, positive ? 0.05 : -3, 3);
      Tensor x = make({257}, v, t);
      std::vector<double> xv = values(x);  // as rounded to t
      std::vector<double> want(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) want[i] = reference(op, xv[i]);
      Tensor y = call1(op, {x}, op == "clamp" ? clamp_attrs(-0.5, 0.75) : Attrs());
      EXPECT_EQ(y.dtype(), t);
      EXPECT_EQ(y.shape(), x.shape());
      double tol = t == DType::kF64 ? 1e-14 : t == DType::kF32 ? 2e-6 : t == DType::kBF16 ? 8e-3 : 1e-3;
      expect_values(y, want, tol, tol, str_cat(op, " ", dtype_name(t)));
    }
  }
}

TEST(UnaryTest, NonContiguousInputGivesContiguousOutput) {
  Tensor base = make({4, 6}, noise(24, 2, -2, 2), DType::kF64);
  for (Tensor x : {base.t(), base.slice(1, 0, 6, 3), base.select(1, 2).unsqueeze(1).expand({4, 5})}) {
    Tensor y = call1("exp", {x});
    EXPECT_TRUE(y.is_contiguous());
    EXPECT_EQ(y.shape(), x.shape());
    std::vector<double> want = values(x);
    for (double& w : want) w = std::exp(w);
    expect_values(y, want, 1e-15);
  }
}

TEST(UnaryTest, SpecialValues) {
  Tensor x = make({5}, {kNaN, kInf, -kInf, 0.0, -0.0}, DType::kF32);
  expect_values(call1("relu", {x}), {kNaN, kInf, 0, 0, 0});
  expect_values(call1("sign", {x}), {kNaN, 1, -1, 0, 0});
  expect_values(call1("sigmoid", {x}), {kNaN, 1, 0, 0.5, 0.5});
  expect_values(call1("tanh", {x}), {kNaN, 1, -1, 0, 0});
  expect_values(call1("exp", {x}), {kNaN, kInf, 0, 1, 1});
  expect_values(call1("gelu", {make({3}, {-20, 20, 1}, DType::kF32)}), {0, 20, 0.8413447460685429}, 1e-6);
  expect_values(call1("log", {make({2}, {0, -1})}), {-kInf, kNaN});
  expect_values(call1("clamp", {x}, clamp_attrs(-1, 2)), {kNaN, 2, -1, 0, 0});
}

TEST(UnaryTest, ClampOneSidedAndInverted) {
  Tensor x = make({5}, {-3, -1, 0, 1, 3}, DType::kF64);
  expect_values(call1("clamp", {x}, clamp_attrs(-kInf, 0.5)), {-3, -1, 0, 0.5, 0.5});
  expect_values(call1("clamp", {x}, clamp_attrs(-1.5, kInf)), {-1.5, -1, 0, 1, 3});
  expect_values(call1("clamp", {x}, clamp_attrs(-kInf, kInf)), {-3, -1, 0, 1, 3});
  expect_values(call1("clamp", {x}, clamp_attrs(2, 1)), {1, 1, 1, 1, 1});  // min > max gives max
}

TEST(UnaryTest, IntegerOps) {
  for (DType t : {DType::kI32, DType::kI64}) {
    Tensor x = make({5}, {-7, -1, 0, 2, 9}, t);
    expect_values(call1("neg", {x}), {7, 1, 0, -2, -9});
    expect_values(call1("abs", {x}), {7, 1, 0, 2, 9});
    expect_values(call1("sign", {x}), {-1, -1, 0, 1, 1});
    expect_values(call1("relu", {x}), {0, 0, 0, 2, 9});
    expect_values(call1("clamp", {x}, clamp_attrs(-1.5, 2.5)), {-1, -1, 0, 2, 2});
    expect_values(call1("clamp", {x}, clamp_attrs(-1e30, 1e30)), {-7, -1, 0, 2, 9});
    expect_values(call1("clamp", {x}, clamp_attrs(1e30, kInf)),
                  {t == DType::kI32 ? 2147483647.0 : 9.223372036854775807e18,
                   t == DType::kI32 ? 2147483647.0 : 9.223372036854775807e18,
                   t == DType::kI32 ? 2147483647.0 : 9.223372036854775807e18,
                   t == DType::kI32 ? 2147483647.0 : 9.223372036854775807e18,
                   t == DType::kI32 ? 2147483647.0 : 9.223372036854775807e18});
    EXPECT_EQ(call1("neg", {x}).dtype(), t);
  }
  Tensor u = make({3}, {0, 5, 255}, DType::kU8);
  expect_values(call1("neg", {u}), {0, 251, 1});  // wraps
  expect_values(call1("abs", {u}), {0, 5, 255});
  expect_values(call1("sign", {u}), {0, 1, 1});
  expect_values(call1("clamp", {u}, clamp_attrs(3, 200)), {3, 5, 200});
  Tensor b = make({2}, {0, 1}, DType::kBool);
  expect_values(call1("abs", {b}), {0, 1});
  expect_values(call1("relu", {b}), {0, 1});
  expect_values(call1("clamp", {b}, clamp_attrs(0.5, kInf)), {1, 1});
  int32_t min32 = std::numeric_limits<int32_t>::min();
  Tensor m = make({1}, {static_cast<double>(min32)}, DType::kI32);
  EXPECT_EQ(call1("abs", {m}).data<int32_t>()[0], min32);  // wraps like two's complement
}

TEST(UnaryTest, BadDtypesThrowNamingTheOp) {
  expect_error([] { dispatch("exp", {make({2}, {1, 2}, DType::kI64)}); }, "exp");
  expect_error([] { dispatch("sqrt", {make({2}, {1, 2}, DType::kBool)}); }, "sqrt");
  expect_error([] { dispatch("neg", {make({2}, {1, 0}, DType::kBool)}); }, "neg");
}

TEST(UnaryTest, ZeroElementsAndScalar) {
  Tensor e = call1("tanh", {Tensor::empty({3, 0})});
  EXPECT_EQ(e.shape(), (Shape{3, 0}));
  Tensor s = call1("sqrt", {make({}, {4})});
  EXPECT_EQ(s.dim(), 0);
  expect_values(s, {2});
}

TEST(UnaryTest, LargeParallelMatchesSerialReference) {
  const int64_t n = 300007;
  std::vector<double> v = noise(n, 3, -4, 4);
  Tensor x = make({n}, v, DType::kF32);
  Tensor y = call1("sigmoid", {x});
  const float* px = x.data<float>();
  const float* py = y.data<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(py[i], 1.0f / (1.0f + std::exp(-px[i]))) << i;
}

}  // namespace
}  // namespace coppice

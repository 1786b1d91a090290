#include "autograd/functions/elementwise.h"

#include <gtest/gtest.h>

#include "tests/autograd/test_util.h"

namespace coppice {
namespace {

using testing::constant;
using testing::param;
using testing::randn64;
using testing::randn_away;
using testing::uniform64;
using V = std::vector<Variable>;

struct BinaryShapes {
  Shape a, b;
};
// Same shapes, trailing broadcast, both sides broadcasting, and a scalar.
const std::vector<BinaryShapes> kShapes = {{{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{2, 1}, {1, 3}}, {{}, {2, 2}}};

TEST(ElementwiseTest, AddSubMulBroadcast) {
  for (const auto& s : kShapes) {
    SCOPED_TRACE(shape_to_string(s.a) + " with " + shape_to_string(s.b));
    Variable a = param(randn64(s.a), "a"), b = param(randn64(s.b), "b");
    EXPECT_GRADCHECK([](const V& v) { return add(v[0], v[1]); }, {a, b});
    EXPECT_GRADCHECK([](const V& v) { return sub(v[0], v[1]); }, {a, b});
    EXPECT_GRADCHECK([](const V& v) { return mul(v[0], v[1]); }, {a, b});
  }
}

TEST(ElementwiseTest, DivBroadcast) {
  for (const auto& s : kShapes) {
    SCOPED_TRACE(shape_to_string(s.a) + " with " + shape_to_string(s.b));
    Variable a = param(randn64(s.a)), b = param(randn_away(s.b, 0.0, 0.5));
    EXPECT_GRADCHECK([](const V& v) { return div(v[0], v[1]); }, {a, b});
  }
}

TEST(ElementwiseTest, PowTensorExponent) {
  Variable a = param(uniform64({2, 3}, 0.5, 2.0)), b = param(randn64({3}));
  EXPECT_GRADCHECK([](const V& v) { return pow(v[0], v[1]); }, {a, b});
}

TEST(ElementwiseTest, MaximumMinimumBroadcast) {
  for (const auto& s : kShapes) {
    SCOPED_TRACE(shape_to_string(s.a) + " with " + shape_to_string(s.b));
    Variable a = param(randn64(s.a)), b = param(randn64(s.b));
    EXPECT_GRADCHECK([](const V& v) { return maximum(v[0], v[1]); }, {a, b});
    EXPECT_GRADCHECK([](const V& v) { return minimum(v[0], v[1]); }, {a, b});
  }
}

TEST(ElementwiseTest, MaximumSplitsTies) {
  Variable a = param(from_vector<double>({1.0, 2.0})), b = param(from_vector<double>({1.0, 0.0}));
  sum(maximum(a, b)).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0.5, 1.0}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{0.5, 0.0}));
}

TEST(ElementwiseTest, OnlyOneSideRequiresGrad) {
  Variable a = param(randn64({2, 3})), b = constant(randn64({3}));
  EXPECT_GRADCHECK([](const V& v) { return mul(v[0], v[1]); }, {a, b});
  EXPECT_GRADCHECK([](const V& v) { return div(v[1], add(mul(v[0], v[0]), 1.0)); }, {a, b});
}

TEST(ElementwiseTest, ScalarOverloads) {
  Variable x = param(randn_away({2, 3}, 0.0, 0.3));
  EXPECT_GRADCHECK([](const V& v) { return add(v[0], 2.5); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return sub(v[0], 2.5); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return mul(v[0], -1.5); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return div(v[0], 4.0); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return pow(v[0], 2.0); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return pow(v[0], 3.0); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return pow(v[0], 1.0); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return pow(v[0], 0.0); }, {x});
  Variable positive = param(uniform64({2, 3}, 0.5, 2.0));
  EXPECT_GRADCHECK([](const V& v) { return pow(v[0], -1.5); }, {positive});
  EXPECT_GRADCHECK([](const V& v) { return pow(v[0], 0.5); }, {positive});
}

TEST(ElementwiseTest, Operators) {
  Variable a = param(randn_away({2, 3}, 0.0, 0.3)), b = param(randn_away({3}, 0.0, 0.3));
  EXPECT_GRADCHECK([](const V& v) { return v[0] + v[1]; }, {a, b});
  EXPECT_GRADCHECK([](const V& v) { return v[0] - v[1]; }, {a, b});
  EXPECT_GRADCHECK([](const V& v) { return v[0] * v[1]; }, {a, b});
  EXPECT_GRADCHECK([](const V& v) { return v[0] / v[1]; }, {a, b});
  EXPECT_GRADCHECK([](const V& v) { return -v[0]; }, {a});
  EXPECT_GRADCHECK([](const V& v) { return (v[0] + 1.0) * 2.0 - v[0] / 3.0; }, {a});
  EXPECT_GRADCHECK([](const V& v) { return 1.0 + v[0]; }, {a});
  EXPECT_GRADCHECK([](const V& v) { return 1.0 - v[0]; }, {a});
  EXPECT_GRADCHECK([](const V& v) { return 3.0 * v[0]; }, {a});
  EXPECT_GRADCHECK([](const V& v) { return 2.0 / v[0]; }, {a});
}

TEST(ElementwiseTest, ComparisonsArePlainBoolTensors) {
  Variable a = param(from_vector<double>({1.0, 2.0, 3.0})), b = param(from_vector<double>({2.0, 2.0, 2.0}));
  Tensor lt_ab = lt(a, b);
  EXPECT_EQ(lt_ab.dtype(), DType::kBool);
  EXPECT_EQ(lt_ab.to_vector<double>(), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(eq(a, b).to_vector<double>(), (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(ne(a, b).to_vector<double>(), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(le(a, b).to_vector<double>(), (std::vector<double>{1, 1, 0}));
  EXPECT_EQ(gt(a, 2.0).to_vector<double>(), (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(ge(a, 2.0).to_vector<double>(), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(eq(a, 3.0).to_vector<double>(), (std::vector<double>{0, 0, 1}));
}

TEST(ElementwiseTest, UnaryEverywhereSmooth) {
  Variable x = param(randn64({3, 4}), "x");
  EXPECT_GRADCHECK([](const V& v) { return neg(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return exp(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return gelu(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return sigmoid(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return tanh(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return erf(v[0]); }, {x});
}

TEST(ElementwiseTest, UnaryOnPositives) {
  Variable x = param(uniform64({3, 4}, 0.3, 3.0));
  EXPECT_GRADCHECK([](const V& v) { return log(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return sqrt(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return rsqrt(v[0]); }, {x});
}

TEST(ElementwiseTest, UnaryWithKinkAtZero) {
  Variable x = param(randn_away({3, 4}, 0.0));
  EXPECT_GRADCHECK([](const V& v) { return abs(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return relu(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return sign(v[0]); }, {x});
}

TEST(ElementwiseTest, Clamp) {
  // Values away from both bounds, on both sides of each.
  Variable x = param(from_vector<double>({-2.0, -0.7, -0.3, 0.0, 0.2, 0.45, 0.6, 1.5}, {2, 4}));
  EXPECT_GRADCHECK([](const V& v) { return clamp(v[0], -0.5, 0.5); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return clamp(v[0], -0.5, std::nullopt); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return clamp(v[0], std::nullopt, 0.5); }, {x});
  sum(clamp(x, -0.5, 0.5)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0, 1, 1, 1, 1, 0, 0}));
}

TEST(ElementwiseTest, WhereBroadcast) {
  Tensor cond = gt(randn64({2, 3}), 0.0);
  Variable a = param(randn64({2, 3})), b = param(randn64({3}));
  EXPECT_GRADCHECK([cond](const V& v) { return where(cond, v[0], v[1]); }, {a, b});
  Variable s = param(randn64({}));
  EXPECT_GRADCHECK([cond](const V& v) { return where(cond, v[0], v[1]); }, {s, b});
}

TEST(ElementwiseTest, MixedPrecisionGradientsKeepInputDtype) {
  Variable a = param(randn({2, 3}, DType::kF32)), b = param(randn64({3}));
  Variable y = mul(a, b);
  EXPECT_EQ(y.dtype(), DType::kF64);
  sum(y).backward();
  EXPECT_EQ(a.grad().dtype(), DType::kF32);
  EXPECT_EQ(b.grad().dtype(), DType::kF64);
  EXPECT_LT(max_abs_diff(a.grad(), b.value().expand({2, 3})), 1e-6);
}

TEST(ElementwiseTest, IntegerInputsAreNotTracked) {
  Variable i = constant(from_vector<int64_t>({1, 2, 3}));
  EXPECT_THROW(Variable(from_vector<int64_t>({1}), true), Error);
  Variable x = param(randn64({3}));
  Variable y = mul(i, x);
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 2, 3}));
  Variable ii = add(i, i);
  EXPECT_FALSE(ii.requires_grad());
}

}  // namespace
}  // namespace coppice

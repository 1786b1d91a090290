#include "autograd/gradcheck.h"

#include <gtest/gtest.h>

#include "tests/autograd/test_util.h"

namespace coppice {
namespace {

using testing::constant;
using testing::param;
using testing::randn64;
using V = std::vector<Variable>;

// x * y with a backward that is wrong for y at one element.
Variable buggy_mul(const Variable& x, const Variable& y) {
  Tensor xv = x.value(), yv = y.value();
  return record(mul(xv, yv), "BuggyMulBackward", {x, y}, [xv, yv](const Tensor& g, const GradNeeds&) {
    Tensor gy = mul(g, xv).clone();
    gy.data<double>()[4] += 1.0;
    return std::vector<Tensor>{mul(g, yv), gy};
  });
}

TEST(GradcheckTest, PassesForACorrectGradient) {
  Variable x = param(randn64({2, 3}), "x"), y = param(randn64({2, 3}), "y");
  GradcheckResult r = gradcheck([](const V& v) { return mul(v[0], v[1]); }, {x, y});
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_LT(r.max_abs_error, 1e-6);
  // The caller's inputs are untouched and get no gradient.
  EXPECT_FALSE(x.grad().defined());
}

TEST(GradcheckTest, ReportsTheWorstElement) {
  Variable x = param(randn64({2, 3}), "x"), y = param(randn64({2, 3}), "y");
  GradcheckResult r = gradcheck([](const V& v) { return buggy_mul(v[0], v[1]); }, {x, y});
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("input 1 ('y') index [1, 1]"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("analytic"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("numeric"), std::string::npos) << r.message;
}

TEST(GradcheckTest, SkipsInputsThatDoNotRequireGrad) {
  Variable x = param(randn64({2, 3}), "x"), y = constant(randn64({2, 3}));
  GradcheckResult r = gradcheck([](const V& v) { return buggy_mul(v[0], v[1]); }, {x, y});
  EXPECT_TRUE(r.passed) << r.message;
}

TEST(GradcheckTest, ConvertsF32InputsToF64) {
  Variable x = param(randn({3}, DType::kF32));
  GradcheckResult r = gradcheck([](const V& v) { return exp(v[0]); }, {x});
  EXPECT_TRUE(r.passed) << r.message;
}

}  // namespace
}  // namespace coppice

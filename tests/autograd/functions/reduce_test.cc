#include "autograd/functions/reduce.h"

#include <gtest/gtest.h>

#include <limits>

#include "tests/autograd/test_util.h"

namespace coppice {
namespace {

using testing::param;
using testing::randn64;
using V = std::vector<Variable>;

TEST(ReduceTest, SumAll) {
  Variable x = param(randn64({2, 3, 4}));
  EXPECT_GRADCHECK([](const V& v) { return sum(v[0]); }, {x});
  Variable s = param(randn64({}));
  EXPECT_GRADCHECK([](const V& v) { return sum(v[0]); }, {s});
}

TEST(ReduceTest, SumDims) {
  Variable x = param(randn64({2, 3, 4}));
  for (bool keepdim : {false, true}) {
    SCOPED_TRACE(keepdim ? "keepdim" : "no keepdim");
    EXPECT_GRADCHECK([keepdim](const V& v) { return sum(v[0], {1}, keepdim); }, {x});
    EXPECT_GRADCHECK([keepdim](const V& v) { return sum(v[0], {-1, 0}, keepdim); }, {x});
    EXPECT_GRADCHECK([keepdim](const V& v) { return sum(v[0], {0, 1, 2}, keepdim); }, {x});
  }
}

TEST(ReduceTest, MeanAllAndDims) {
  Variable x = param(randn64({2, 3, 4}));
  EXPECT_GRADCHECK([](const V& v) { return mean(v[0]); }, {x});
  for (bool keepdim : {false, true}) {
    EXPECT_GRADCHECK([keepdim](const V& v) { return mean(v[0], {2}, keepdim); }, {x});
    EXPECT_GRADCHECK([keepdim](const V& v) { return mean(v[0], {0, 2}, keepdim); }, {x});
  }
}

TEST(ReduceTest, MaxMinAll) {
  Variable x = param(randn64({3, 4}));
  EXPECT_GRADCHECK([](const V& v) { return max(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return min(v[0]); }, {x});
}

TEST(ReduceTest, MaxMinAllSendTheGradientToOneIndex) {
  Variable x = param(from_vector<double>({1.0, 5.0, 5.0, -2.0}));
  max(x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, 0, 0}));
  x.set_grad(Tensor());
  min(x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0, 0, 1}));
}

TEST(ReduceTest, MaxMinAlongDim) {
  Variable x = param(randn64({3, 4, 2}));
  for (bool keepdim : {false, true}) {
    for (int64_t dim : {0, 1, -1}) {
      SCOPED_TRACE(str_cat("dim ", dim, keepdim ? " keepdim" : ""));
      EXPECT_GRADCHECK([dim, keepdim](const V& v) { return max(v[0], dim, keepdim).values; }, {x});
      EXPECT_GRADCHECK([dim, keepdim](const V& v) { return min(v[0], dim, keepdim).values; }, {x});
    }
  }
  VariableIndices m = max(x, 1);
  EXPECT_EQ(m.indices.dtype(), DType::kI64);
  EXPECT_TRUE(allclose(m.indices, argmax(x, 1)));
  EXPECT_TRUE(allclose(min(x, 1).indices, argmin(x, 1)));
}

TEST(ReduceTest, NormAll) {
  Variable x = param(testing::randn_away({3, 4}, 0.0));
  for (double p : {2.0, 1.0, 3.0, 1.5, std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE(str_cat("p = ", p));
    EXPECT_GRADCHECK([p](const V& v) { return norm(v[0], p); }, {x});
  }
}

TEST(ReduceTest, NormDims) {
  Variable x = param(testing::randn_away({3, 4, 2}, 0.0));
  for (bool keepdim : {false, true}) {
    for (double p : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
      SCOPED_TRACE(str_cat("p = ", p, keepdim ? " keepdim" : ""));
      EXPECT_GRADCHECK([p, keepdim](const V& v) { return norm(v[0], p, {1}, keepdim); }, {x});
      EXPECT_GRADCHECK([p, keepdim](const V& v) { return norm(v[0], p, {0, 2}, keepdim); }, {x});
    }
  }
}

TEST(ReduceTest, NormOfZeroHasZeroGradient) {
  Variable x = param(zeros({3}, DType::kF64));
  norm(x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0, 0}));
}

TEST(ReduceTest, Topk) {
  Variable x = param(randn64({3, 5}));
  EXPECT_GRADCHECK([](const V& v) { return topk(v[0], 2).values; }, {x});
  EXPECT_GRADCHECK([](const V& v) { return topk(v[0], 3, 1, /*largest=*/false).values; }, {x});
  EXPECT_GRADCHECK([](const V& v) { return topk(v[0], 2, 0).values; }, {x});
  VariableIndices t = topk(x, 2);
  EXPECT_EQ(t.values.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.indices.dtype(), DType::kI64);
}

}  // namespace
}  // namespace coppice

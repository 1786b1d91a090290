// Tests for tensor/ops_compare.cc: allclose and max_abs_diff.
#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

TEST(Allclose, TolerancesShapesAndSpecialValues) {
  Tensor a = from_vector<double>({1.0, 100.0, -3.0});
  EXPECT_TRUE(allclose(a, a));
  EXPECT_TRUE(allclose(a, from_vector<double>({1.0 + 1e-9, 100.0 + 1e-4, -3.0})));  // within rtol * |b|
  EXPECT_FALSE(allclose(a, from_vector<double>({1.0 + 1e-4, 100.0, -3.0})));
  EXPECT_TRUE(allclose(a, from_vector<double>({1.1, 100.0, -3.0}), 0.0, 0.11));  // atol
  EXPECT_FALSE(allclose(a, from_vector<double>({1.1, 100.0, -3.0}), 0.0, 0.09));
  // rtol scales with b, not a.
  EXPECT_TRUE(allclose(from_vector<double>({2.0}, {1}), from_vector<double>({1.0}, {1}), 1.0, 0.0));
  EXPECT_FALSE(allclose(from_vector<double>({1.0}, {1}), from_vector<double>({2.0}, {1}), 0.4, 0.0));
  // Shapes must match (no broadcasting).
  EXPECT_FALSE(allclose(zeros({3}), zeros({1, 3})));
  EXPECT_FALSE(allclose(zeros({3}), zeros({1})));
  // NaN never matches, equal infinities do.
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(allclose(from_vector<double>({NAN}, {1}), from_vector<double>({NAN}, {1})));
  EXPECT_TRUE(allclose(from_vector<double>({inf, -inf}), from_vector<double>({inf, -inf})));
  EXPECT_FALSE(allclose(from_vector<double>({inf}, {1}), from_vector<double>({-inf}, {1})));
  // Different dtypes and layouts compare by value.
  Tensor f = from_vector<float>({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(allclose(f.t(), from_vector<double>({1, 3, 2, 4}, {2, 2})));
  EXPECT_TRUE(allclose(f.to(DType::kBF16), f));
  EXPECT_TRUE(allclose(zeros({0}), zeros({0})));
  EXPECT_THROW(allclose(Tensor(), f), Error);
}

TEST(MaxAbsDiff, BroadcastsAndReportsNaN) {
  Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(max_abs_diff(a, a), 0.0);
  EXPECT_EQ(max_abs_diff(a, from_vector<double>({1, 2}, {1, 2})), 2.0);  // broadcast over rows
  EXPECT_EQ(max_abs_diff(a, scalar_tensor(0)), 4.0);
  EXPECT_EQ(max_abs_diff(a.t(), a), 1.0);
  EXPECT_TRUE(std::isnan(max_abs_diff(from_vector<float>({1, NAN}), zeros({2}))));
  EXPECT_EQ(max_abs_diff(from_vector<float>({INFINITY}, {1}), from_vector<float>({INFINITY}, {1})), 0.0);
  EXPECT_EQ(max_abs_diff(zeros({0}), zeros({0})), 0.0);
  try {
    max_abs_diff(zeros({2}), zeros({3}));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_abs_diff: shapes [2] and [3] do not broadcast"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace coppice

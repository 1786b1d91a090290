// Tests for sparse/masked.h: nnz as the mask's count, to_dense zeroing
// unmasked values, the factory's checks, with_values.
#include "sparse/masked.h"

#include "gtest/gtest.h"
#include "tests/sparse/test_util.h"

namespace coppice {
namespace {

using testing::exact_equal;
using testing::f32;

Tensor example_mask() { return from_vector(std::vector<bool>{true, false, false, true, true, false}, {2, 3}); }

TEST(MaskedTest, CountsAndZeroesUnmasked) {
  Tensor v = f32({1, 2, 3, 4, 0, 6}, {2, 3});
  Tensor a = sparse_masked(v, example_mask());
  EXPECT_EQ(a.format(), "masked");
  EXPECT_EQ(nnz(a), 3);  // the explicit zero under the mask counts
  EXPECT_DOUBLE_EQ(density(a), 0.5);
  EXPECT_TRUE(masked_impl(a, "test").values().is_same(v));
  EXPECT_TRUE(exact_equal(to_dense(a), f32({1, 0, 0, 4, 0, 0}, {2, 3})));
}

TEST(MaskedTest, AnyShapeAndDtype) {
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    Tensor v = testing::random_sparse({2, 3, 4}, 1.0, 2).to(t);
    Tensor m = gt(testing::random_sparse({2, 3, 4}, 1.0, 3), 0.0);
    Tensor a = sparse_masked(v, m);
    EXPECT_EQ(a.dtype(), t);
    EXPECT_TRUE(exact_equal(to_dense(a), where(m, v, zeros({}, t))));
  }
  Tensor s = sparse_masked(scalar_tensor(2.0), scalar_tensor(1.0, DType::kBool));
  EXPECT_EQ(nnz(s), 1);
}

TEST(MaskedTest, RejectsBadParts) {
  Tensor v = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_ERROR_NAMING(sparse_masked(v, ones({2, 3})), "sparse_masked: mask must be bool, got f32");
  EXPECT_ERROR_NAMING(sparse_masked(v, ones({3, 2}, DType::kBool)),
                      "sparse_masked: mask of shape [3, 2] for values of shape [2, 3]");
  EXPECT_ERROR_NAMING(sparse_masked(ones({2, 3}, DType::kI32), example_mask()), "values must be floating point");
}

TEST(MaskedTest, WithValuesKeepsVersion) {
  Tensor a = sparse_masked(f32({1, 2, 3, 4, 5, 6}, {2, 3}), example_mask());
  Tensor b = with_values(a, full({2, 3}, 7.0));
  EXPECT_EQ(pattern_version(a), pattern_version(b));
  EXPECT_EQ(nnz(b), 3);
  EXPECT_TRUE(exact_equal(to_dense(b), f32({7, 0, 0, 7, 7, 0}, {2, 3})));
  EXPECT_ERROR_NAMING(with_values(a, ones({6})), "masked.with_values: values of shape [6], expected [2, 3]");
}

TEST(MaskedTest, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  const Device gpu = Device::cuda();
  Tensor v = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor a = sparse_masked(v.to(gpu), example_mask().to(gpu));
  EXPECT_EQ(nnz(a), 3);
  EXPECT_TRUE(exact_equal(to_dense(a).to(Device::cpu()), f32({1, 0, 0, 4, 5, 0}, {2, 3})));
  EXPECT_ERROR_NAMING(sparse_masked(v.to(gpu), example_mask()), "sparse_masked: operands are on different devices");
}

}  // namespace
}  // namespace coppice

// Tests for sparse/nm.h: compress by magnitude (ties, NaN) and from a mask,
// decompress, the factory's checks, other n:m and dtypes.
#include "sparse/nm.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "tests/sparse/test_util.h"

namespace coppice {
namespace {

using testing::exact_equal;
using testing::f32;

TEST(NmTest, CompressKeepsLargestMagnitudes) {
  // Two rows, two groups of 4 each.
  Tensor x = f32({1, -5, 3, 2, /**/ 0, 0, 7, 0,  //
                  4, 4, 4, 4, /**/ -1, 2, -3, 0.5f},
                 {2, 8});
  Tensor a = nm_compress(x, 2, 4);
  const NmImpl& s = nm_impl(a, "test");
  EXPECT_EQ(a.format(), "nm");
  EXPECT_EQ(s.n(), 2);
  EXPECT_EQ(s.m(), 4);
  EXPECT_EQ(s.values().shape(), (Shape{2, 4}));
  EXPECT_EQ(s.indices().dtype(), DType::kU8);
  EXPECT_EQ(s.indices().to_vector<int>(), (std::vector<int>{1, 2, 0, 2, 0, 1, 1, 2}));
  EXPECT_EQ(s.values().to_vector<float>(), (std::vector<float>{-5, 3, 0, 7, 4, 4, 2, -3}));
  EXPECT_EQ(nnz(a), 8);
  EXPECT_DOUBLE_EQ(density(a), 0.5);
  Tensor expected = f32({0, -5, 3, 0, 0, 0, 7, 0, 4, 4, 0, 0, 0, 2, -3, 0}, {2, 8});
  EXPECT_TRUE(exact_equal(nm_decompress(a), expected));
  EXPECT_TRUE(exact_equal(to_dense(a), expected));
}

TEST(NmTest, NanCountsAsLargest) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = nm_compress(f32({1, nan, 9, 2}, {1, 4}), 1, 4);
  EXPECT_EQ(nm_impl(a, "test").indices().to_vector<int>(), (std::vector<int>{1}));
}

TEST(NmTest, OtherRatiosShapesAndDtypes) {
  Tensor x = testing::random_sparse({3, 2, 16}, 0.8, 11);
  for (auto [n, m] : std::vector<std::pair<int64_t, int64_t>>{{1, 4}, {2, 4}, {3, 8}, {4, 4}, {1, 1}, {5, 16}}) {
    Tensor a = nm_compress(x, n, m);
    EXPECT_EQ(nm_impl(a, "test").values().shape(), (Shape{3, 2, 16 / m * n}));
    // Compressing the decompressed tensor again from its own pattern is exact.
    Tensor d = nm_decompress(a);
    EXPECT_TRUE(exact_equal(nm_decompress(nm_compress(d, ne(d, 0.0), n, m)), d)) << n << ":" << m;
    EXPECT_TRUE(exact_equal(nm_decompress(nm_compress(d, n, m)), d)) << n << ":" << m;
  }
  Tensor full = nm_compress(x, 4, 4);
  EXPECT_TRUE(exact_equal(to_dense(full), x));
  for (DType t : {DType::kF64, DType::kBF16, DType::kF16}) {
    Tensor y = x.to(t);
    Tensor a = nm_compress(y, 2, 4);
    EXPECT_EQ(a.dtype(), t);
    EXPECT_TRUE(exact_equal(to_dense(a), nm_decompress(nm_compress(x, 2, 4)).to(t)));
  }
}

TEST(NmTest, CompressFromMask) {
  Tensor x = f32({1, 2, 3, 4, 5, 6, 7, 8}, {1, 8});
  Tensor mask = from_vector(std::vector<bool>{false, false, true, false, true, false, false, true}, {1, 8});
  Tensor a = nm_compress(x, mask, 2, 4);
  // Group 0 keeps position 2 and fills with an explicit zero at position 0.
  EXPECT_EQ(nm_impl(a, "test").indices().to_vector<int>(), (std::vector<int>{0, 2, 0, 3}));
  EXPECT_EQ(nm_impl(a, "test").values().to_vector<float>(), (std::vector<float>{0, 3, 5, 8}));
  EXPECT_TRUE(exact_equal(to_dense(a), f32({0, 0, 3, 0, 5, 0, 0, 8}, {1, 8})));
  Tensor too_many = from_vector(std::vector<bool>{true, false, false, false, true, true, true, false}, {1, 8});
  EXPECT_ERROR_NAMING(nm_compress(x, too_many, 2, 4),
                      "nm_compress: group 1 of row 0 (last-dim positions 4..7) has 3 non-zeros, more than n = 2");
  EXPECT_ERROR_NAMING(nm_compress(x, ones({1, 8}), 2, 4), "nm_compress: mask must be bool, got f32");
  EXPECT_ERROR_NAMING(nm_compress(x, ones({1, 4}, DType::kBool), 2, 4), "nm_compress: mask of shape [1, 4]");
}

TEST(NmTest, RejectsBadParts) {
  Tensor v = f32({1, 2, 3, 4}, {2, 2});
  auto u8 = [](std::vector<int64_t> p) { return from_vector(p, {2, 2}, TensorOptions(DType::kU8)); };
  EXPECT_TRUE(
      exact_equal(to_dense(sparse_nm(v, u8({0, 3, 1, 2}), {2, 4}, 2, 4)), f32({1, 0, 0, 2, 0, 3, 4, 0}, {2, 4})));
  EXPECT_ERROR_NAMING(sparse_nm(v, u8({0, 4, 1, 2}), {2, 4}, 2, 4),
                      "sparse_nm: indices[row 0, 1] = 4 is out of range [0, m = 4)");
  EXPECT_ERROR_NAMING(sparse_nm(v, u8({0, 3, 2, 1}), {2, 4}, 2, 4),
                      "sparse_nm: indices[row 1, 1] = 1 is smaller than the index before it in group 0");
  EXPECT_ERROR_NAMING(sparse_nm(v, u8({3, 3, 1, 2}), {2, 4}, 2, 4),
                      "sparse_nm: indices[row 0, 1] = 3 duplicates the index before it in group 0");
  EXPECT_ERROR_NAMING(sparse_nm(v, u8({0, 3, 1, 2}), {2, 6}, 2, 4),
                      "sparse_nm: m = 4 does not divide the last dim of shape [2, 6]");
  EXPECT_ERROR_NAMING(sparse_nm(v, u8({0, 3, 1, 2}), {2, 4}, 5, 4), "sparse_nm: needs 1 <= n <= m <= 256");
  EXPECT_ERROR_NAMING(sparse_nm(v, u8({0, 3, 1, 2}), {2, 8}, 2, 4),
                      "sparse_nm: values and indices have shapes [2, 2] and [2, 2], expected [2, 4]");
  EXPECT_ERROR_NAMING(sparse_nm(v, v, {2, 4}, 2, 4), "sparse_nm: indices must be u8 or i32 or i64, got f32");
  EXPECT_ERROR_NAMING(nm_compress(zeros({2, 6}), 2, 4), "nm_compress: m = 4 does not divide the last dim");
  EXPECT_ERROR_NAMING(nm_compress(zeros({2, 8}), 0, 4), "nm_compress: needs 1 <= n <= m <= 256, got n = 0");
  EXPECT_ERROR_NAMING(nm_decompress(zeros({2, 8})), "nm_decompress: expected an n:m tensor, got format 'dense'");
}

TEST(NmTest, WithValuesKeepsVersion) {
  Tensor a = nm_compress(testing::random_sparse({4, 8}, 0.9, 5), 2, 4);
  Tensor b = with_values(a, ones({4, 4}));
  EXPECT_EQ(pattern_version(a), pattern_version(b));
  EXPECT_TRUE(exact_equal(to_dense(b), ne(to_dense(a), 0.0).to(DType::kF32)));
  EXPECT_NE(pattern_version(nm_compress(to_dense(a), 2, 4)), pattern_version(a));
  EXPECT_ERROR_NAMING(with_values(a, ones({4, 8})), "nm.with_values: values of shape [4, 8], expected [4, 4]");
}

TEST(NmTest, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  Tensor x = testing::random_sparse({8, 32}, 0.7, 9);
  for (auto [n, m] : std::vector<std::pair<int64_t, int64_t>>{{2, 4}, {1, 4}, {3, 8}}) {
    Tensor cpu = nm_compress(x, n, m);
    Tensor gpu = nm_compress(x.to(Device::cuda()), n, m);
    EXPECT_EQ(gpu.device(), Device::cuda());
    EXPECT_TRUE(testing::same_parts(to_device(gpu, Device::cpu()), cpu));
    EXPECT_TRUE(exact_equal(nm_decompress(gpu).to(Device::cpu()), nm_decompress(cpu)));
  }
}

}  // namespace
}  // namespace coppice

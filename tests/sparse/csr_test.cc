// Tests for sparse/csr.h: the CSR and CSC factories (every bad-input case
// named by position), to_dense, with_values, the free transpose, moves.
#include "sparse/csr.h"

#include "gtest/gtest.h"
#include "tests/sparse/test_util.h"

namespace coppice {
namespace {

using testing::exact_equal;
using testing::f32;
using testing::i32;
using testing::i64;

// [[1, 0, 2, 0],
//  [0, 0, 0, 0],
//  [0, 3, 0, 4]]
Tensor example_dense() { return f32({1, 0, 2, 0, 0, 0, 0, 0, 0, 3, 0, 4}, {3, 4}); }
Tensor example_csr() { return sparse_csr(i32({0, 2, 2, 4}), i32({0, 2, 1, 3}), f32({1, 2, 3, 4}), {3, 4}); }

TEST(CsrTest, BuildsAndConvertsToDense) {
  Tensor a = example_csr();
  EXPECT_EQ(a.format(), "csr");
  EXPECT_EQ(a.layout(), Layout::kCsr);
  EXPECT_EQ(a.shape(), (Shape{3, 4}));
  EXPECT_EQ(nnz(a), 4);
  EXPECT_DOUBLE_EQ(density(a), 4.0 / 12.0);
  const CompressedImpl& c = csr_impl(a, "test");
  EXPECT_EQ(c.pointers().dtype(), DType::kI32);
  EXPECT_EQ(c.indices().dtype(), DType::kI32);
  EXPECT_EQ(c.compressed_size(), 3);
  EXPECT_EQ(c.uncompressed_size(), 4);
  EXPECT_TRUE(exact_equal(to_dense(a), example_dense()));
  SparseParts parts = c.parts();
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].first, "crow_indices");
  EXPECT_EQ(parts[1].first, "col_indices");
  EXPECT_EQ(parts[2].first, "values");
}

TEST(CsrTest, AcceptsI64IndicesAndStoresI32) {
  Tensor a = sparse_csr(i64({0, 2, 2, 4}), i64({0, 2, 1, 3}), f32({1, 2, 3, 4}), {3, 4});
  EXPECT_EQ(csr_impl(a, "test").pointers().dtype(), DType::kI32);
  EXPECT_TRUE(exact_equal(to_dense(a), example_dense()));
}

TEST(CsrTest, CscHoldsColumns) {
  // The same matrix by columns: col 0: row 0 (1); col 1: row 2 (3); col 2: row 0 (2); col 3: row 2 (4).
  Tensor a = sparse_csc(i32({0, 1, 2, 3, 4}), i32({0, 2, 0, 2}), f32({1, 3, 2, 4}), {3, 4});
  EXPECT_EQ(a.format(), "csc");
  EXPECT_EQ(csr_impl(a, "test").parts()[0].first, "ccol_indices");
  EXPECT_TRUE(exact_equal(to_dense(a), example_dense()));
}

TEST(CsrTest, OtherValueTypes) {
  for (DType t : {DType::kF64, DType::kBF16, DType::kF16}) {
    Tensor a = sparse_csr(i32({0, 2, 2, 4}), i32({0, 2, 1, 3}), f32({1, 2, 3, 4}).to(t), {3, 4});
    EXPECT_EQ(a.dtype(), t);
    EXPECT_TRUE(exact_equal(to_dense(a), example_dense().to(t)));
  }
}

TEST(CsrTest, EmptyAndAllEmptyRows) {
  Tensor a = sparse_csr(i32({0, 0, 0}), i32({}), f32({}), {2, 5});
  EXPECT_EQ(nnz(a), 0);
  EXPECT_TRUE(exact_equal(to_dense(a), zeros({2, 5})));
  Tensor b = sparse_csr(i32({0}), i32({}), f32({}), {0, 3});
  EXPECT_EQ(to_dense(b).shape(), (Shape{0, 3}));
}

TEST(CsrTest, RejectsBadParts) {
  Tensor v = f32({1, 2, 3, 4});
  EXPECT_ERROR_NAMING(sparse_csr(i32({0, 2, 4}), i32({0, 2, 1, 3}), v, {3, 4}),
                      "sparse_csr: crow_indices has 3 entries, expected 4");
  EXPECT_ERROR_NAMING(sparse_csr(i32({1, 2, 2, 4}), i32({0, 2, 1, 3}), v, {3, 4}),
                      "sparse_csr: crow_indices[0] is 1, expected 0");
  EXPECT_ERROR_NAMING(sparse_csr(i32({0, 2, 2, 3}), i32({0, 2, 1, 3}), v, {3, 4}),
                      "sparse_csr: crow_indices[3] is 3, expected nnz = 4");
  EXPECT_ERROR_NAMING(sparse_csr(i32({0, 2, 2, 5}), i32({0, 2, 1, 3}), v, {3, 4}),
                      "crow_indices[3] is 5, beyond the 4 entries of col_indices");
  EXPECT_ERROR_NAMING(sparse_csr(i32({0, 2, 1, 4}), i32({0, 2, 1, 3}), v, {3, 4}),
                      "crow_indices decreases at position 2 (2 then 1)");
  EXPECT_ERROR_NAMING(sparse_csr(i32({0, 2, 2, 4}), i32({0, 2, 1, 4}), v, {3, 4}),
                      "sparse_csr: col_indices[3] = 4 is out of range [0, 4)");
  EXPECT_ERROR_NAMING(sparse_csr(i32({0, 2, 2, 4}), i32({0, 2, -1, 3}), v, {3, 4}),
                      "col_indices[2] = -1 is out of range [0, 4)");
  EXPECT_ERROR_NAMING(sparse_csr(i32({0, 2, 2, 4}), i32({2, 0, 1, 3}), v, {3, 4}),
                      "col_indices[1] = 0 is smaller than the entry before it in row 0");
  EXPECT_ERROR_NAMING(sparse_csr(i32({0, 2, 2, 4}), i32({0, 2, 3, 3}), v, {3, 4}),
                      "col_indices[3] = 3 duplicates the entry before it in row 2");
  EXPECT_ERROR_NAMING(sparse_csr(i32({0, 2, 2, 4}), i32({0, 2, 1, 3}), f32({1, 2, 3}), {3, 4}),
                      "sparse_csr: values has shape [3], expected [4]");
  EXPECT_ERROR_NAMING(sparse_csr(i32({0, 2, 2, 4}), i32({0, 2, 1, 3}), i32({1, 2, 3, 4}), {3, 4}),
                      "sparse_csr: values must be floating point");
  EXPECT_ERROR_NAMING(sparse_csr(f32({0, 2, 2, 4}), i32({0, 2, 1, 3}), v, {3, 4}),
                      "sparse_csr: crow_indices must be i32 or i64, got f32");
  EXPECT_ERROR_NAMING(sparse_csr(i32({0, 2, 2, 4}), i32({0, 2, 1, 3}), v, {3, 4, 1}), "sparse_csr: shape must be 2-D");
  EXPECT_ERROR_NAMING(sparse_csc(i32({0, 1, 2, 3, 4}), i32({0, 2, 2, 3}), v, {3, 4}),
                      "sparse_csc: row_indices[3] = 3 is out of range [0, 3)");
  EXPECT_ERROR_NAMING(sparse_csc(i32({0, 2, 2, 3, 4}), i32({2, 0, 0, 2}), v, {3, 4}),
                      "row_indices[1] = 0 is smaller than the entry before it in column 0");
}

TEST(CsrTest, WithValuesKeepsThePatternVersion) {
  Tensor a = example_csr();
  Tensor b = with_values(a, f32({10, 20, 30, 40}));
  EXPECT_EQ(pattern_version(b), pattern_version(a));
  EXPECT_NE(pattern_version(example_csr()), pattern_version(a));  // fresh parts, fresh version
  EXPECT_TRUE(exact_equal(to_dense(b), example_dense() * 10.0));
  EXPECT_ERROR_NAMING(with_values(a, f32({1, 2, 3})), "csr.with_values: values of shape [3]");
  EXPECT_ERROR_NAMING(with_values(a, i32({1, 2, 3, 4})), "values must be floating point");
}

TEST(CsrTest, FreeTransposeSharesArrays) {
  Tensor a = example_csr();
  Tensor t = transpose_compressed(a);
  EXPECT_EQ(t.format(), "csc");
  EXPECT_EQ(t.shape(), (Shape{4, 3}));
  EXPECT_EQ(pattern_version(t), pattern_version(a));
  EXPECT_TRUE(csr_impl(t, "test").values().is_same(csr_impl(a, "test").values()));
  EXPECT_TRUE(csr_impl(t, "test").pointers().is_same(csr_impl(a, "test").pointers()));
  EXPECT_TRUE(exact_equal(to_dense(t), example_dense().t().contiguous()));
  EXPECT_TRUE(exact_equal(to_dense(transpose_compressed(t)), example_dense()));
  EXPECT_ERROR_NAMING(transpose_compressed(example_dense()), "transpose_compressed: expected a CSR or CSC tensor");
}

TEST(CsrTest, ToKeepsVersionAndConvertsValues) {
  Tensor a = example_csr();
  Tensor b = to_dtype(a, DType::kF64);
  EXPECT_EQ(b.dtype(), DType::kF64);
  EXPECT_EQ(pattern_version(b), pattern_version(a));
  EXPECT_TRUE(exact_equal(to_dense(b), example_dense().to(DType::kF64)));
}

TEST(CsrTest, CudaPartsValidateAndConvert) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  const Device gpu = Device::cuda();
  Tensor a = sparse_csr(i32({0, 2, 2, 4}).to(gpu), i32({0, 2, 1, 3}).to(gpu), f32({1, 2, 3, 4}).to(gpu), {3, 4});
  EXPECT_EQ(a.device(), gpu);
  EXPECT_TRUE(exact_equal(to_dense(a).to(Device::cpu()), example_dense()));
  EXPECT_ERROR_NAMING(
      sparse_csr(i32({0, 2, 2, 4}).to(gpu), i32({0, 2, 3, 3}).to(gpu), f32({1, 2, 3, 4}).to(gpu), {3, 4}),
      "col_indices[3] = 3 duplicates the entry before it in row 2");
  EXPECT_ERROR_NAMING(sparse_csr(i32({0, 2, 2, 4}), i32({0, 2, 1, 3}), f32({1, 2, 3, 4}).to(gpu), {3, 4}),
                      "sparse_csr: operands are on different devices");
  Tensor moved = to_device(example_csr(), gpu);
  EXPECT_EQ(moved.device(), gpu);
  EXPECT_EQ(csr_impl(moved, "test").pointers().device(), gpu);
  EXPECT_TRUE(exact_equal(to_dense(moved).to(Device::cpu()), example_dense()));
}

}  // namespace
}  // namespace coppice

// Tests for sparse/bsr.h: the factory (block shapes that divide, the
// compressed pattern of block rows), to_dense with square and non-square
// blocks, with_values.
#include "sparse/bsr.h"

#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "tests/sparse/test_util.h"

namespace coppice {
namespace {

using testing::exact_equal;
using testing::f32;
using testing::i32;

// A [4, 6] matrix of 2x3 blocks: block (0, 1) and block (1, 0).
Tensor example_bsr() {
  return sparse_bsr(i32({0, 1, 2}), i32({1, 0}), arange(1.0, 13.0, 1.0, DType::kF32).view({2, 2, 3}), {4, 6});
}
Tensor example_dense() {
  return f32({0,  0,  0,  1, 2, 3,  //
              0,  0,  0,  4, 5, 6,  //
              7,  8,  9,  0, 0, 0,  //
              10, 11, 12, 0, 0, 0},
             {4, 6});
}

TEST(BsrTest, BuildsAndConvertsToDense) {
  Tensor a = example_bsr();
  EXPECT_EQ(a.format(), "bsr");
  const BsrImpl& b = bsr_impl(a, "test");
  EXPECT_EQ(b.block_rows(), 2);
  EXPECT_EQ(b.block_cols(), 3);
  EXPECT_EQ(b.nblocks(), 2);
  EXPECT_EQ(b.block_row_count(), 2);
  EXPECT_EQ(b.block_col_count(), 2);
  EXPECT_EQ(nnz(a), 12);
  EXPECT_TRUE(exact_equal(to_dense(a), example_dense()));
  EXPECT_TRUE(exact_equal(bsr_to_dense(a), example_dense()));
  EXPECT_EQ(b.attributes().at("block"), "2x3");
}

TEST(BsrTest, DenseRoundTripForManyBlockShapes) {
  Tensor x = testing::random_sparse({12, 12}, 0.2, 7, DType::kF32, {0, 5});
  for (auto [bh, bw] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 2}, {3, 4}, {4, 3}, {12, 1}, {6, 12}}) {
    Tensor b = dense_to_bsr(x, bh, bw);
    EXPECT_EQ(bsr_impl(b, "test").block_rows(), bh);
    EXPECT_TRUE(exact_equal(to_dense(b), x)) << bh << "x" << bw;
  }
}

TEST(BsrTest, RejectsBadParts) {
  Tensor v = zeros({2, 2, 3});
  EXPECT_ERROR_NAMING(sparse_bsr(i32({0, 1, 2}), i32({1, 0}), v, {4, 7}),
                      "sparse_bsr: block shape [2, 3] does not divide the shape [4, 7]");
  EXPECT_ERROR_NAMING(sparse_bsr(i32({0, 1, 2}), i32({1, 0}), zeros({2, 6}), {4, 6}),
                      "sparse_bsr: values must be 3-D [nblocks, bh, bw]");
  EXPECT_ERROR_NAMING(sparse_bsr(i32({0, 1, 2}), i32({1, 0}), zeros({2, 0, 3}), {4, 6}),
                      "block shape [0, 3] must be positive");
  EXPECT_ERROR_NAMING(sparse_bsr(i32({0, 2}), i32({1, 0}), v, {4, 6}),
                      "sparse_bsr: crow_indices has 2 entries, expected 3 (one per block row, plus one)");
  EXPECT_ERROR_NAMING(sparse_bsr(i32({0, 1, 2}), i32({2, 0}), v, {4, 6}),
                      "sparse_bsr: col_indices[0] = 2 is out of range [0, 2)");
  EXPECT_ERROR_NAMING(sparse_bsr(i32({0, 2, 2}), i32({1, 0}), v, {4, 6}),
                      "col_indices[1] = 0 is smaller than the entry before it in block row 0");
  EXPECT_ERROR_NAMING(sparse_bsr(i32({0, 2, 2}), i32({1, 1}), v, {4, 6}),
                      "col_indices[1] = 1 duplicates the entry before it in block row 0");
  EXPECT_ERROR_NAMING(sparse_bsr(i32({0, 1, 1}), i32({1}), v, {4, 6}),
                      "sparse_bsr: values holds 2 blocks but col_indices has 1 entries");
  EXPECT_ERROR_NAMING(sparse_bsr(i32({0, 1, 3}), i32({1, 0}), v, {4, 6}),
                      "crow_indices[2] is 3, beyond the 2 entries of col_indices");
  EXPECT_ERROR_NAMING(dense_to_bsr(zeros({4, 6}), 4, 4), "dense_to_bsr: block shape [4, 4] does not divide");
}

TEST(BsrTest, WithValuesKeepsVersion) {
  Tensor a = example_bsr();
  Tensor b = with_values(a, ones({2, 2, 3}));
  EXPECT_EQ(pattern_version(a), pattern_version(b));
  EXPECT_TRUE(exact_equal(to_dense(b), ne(example_dense(), 0.0).to(DType::kF32)));
  EXPECT_ERROR_NAMING(with_values(a, ones({2, 3, 2})),
                      "bsr.with_values: values of shape [2, 3, 2], expected [2, 2, 3]");
}

TEST(BsrTest, EmptyMatrixAndNoBlocks) {
  Tensor a = sparse_bsr(i32({0, 0, 0}), i32({}), zeros({0, 2, 2}), {4, 4});
  EXPECT_EQ(nnz(a), 0);
  EXPECT_TRUE(exact_equal(to_dense(a), zeros({4, 4})));
  Tensor z = dense_to_bsr(zeros({0, 4}), 2, 2);
  EXPECT_EQ(to_dense(z).shape(), (Shape{0, 4}));
}

TEST(BsrTest, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  Tensor x = testing::random_sparse({12, 12}, 0.2, 7);
  Tensor cpu = dense_to_bsr(x, 3, 4);
  Tensor gpu = dense_to_bsr(x.to(Device::cuda()), 3, 4);
  EXPECT_TRUE(testing::same_parts(to_device(gpu, Device::cpu()), cpu));
  EXPECT_TRUE(exact_equal(to_dense(gpu).to(Device::cpu()), x));
}

}  // namespace
}  // namespace coppice

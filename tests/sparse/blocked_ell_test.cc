// Tests for sparse/blocked_ell.h: the factory (padding, ranges, order,
// shapes), to_dense, nnz without padding, the direct BSR paths.
#include "sparse/blocked_ell.h"

#include "gtest/gtest.h"
#include "sparse/bsr.h"
#include "sparse/convert.h"
#include "tests/sparse/test_util.h"

namespace coppice {
namespace {

using testing::exact_equal;
using testing::f32;
using testing::i32;

// [4, 6] with 2x2 blocks: block row 0 holds block columns 0 and 2, block row 1 holds column 1 (then padding).
Tensor example_values() {
  return f32({1, 2, 3, 4,   //
              5, 6, 7, 8,   //
              9, 10, 0, 0,  //
              11, 12, 0, 0},
             {4, 4});
}
Tensor example_dense() {
  return f32({1, 2, 0,  0,  3, 4,  //
              5, 6, 0,  0,  7, 8,  //
              0, 0, 9,  10, 0, 0,  //
              0, 0, 11, 12, 0, 0},
             {4, 6});
}
Tensor example_ell() { return sparse_blocked_ell(i32({0, 2, 1, -1}, {2, 2}), example_values(), {4, 6}, 2); }

TEST(BlockedEllTest, BuildsAndConvertsToDense) {
  Tensor a = example_ell();
  EXPECT_EQ(a.format(), "blocked_ell");
  const BlockedEllImpl& e = blocked_ell_impl(a, "test");
  EXPECT_EQ(e.block_size(), 2);
  EXPECT_EQ(e.ell_cols(), 2);
  EXPECT_EQ(e.nblocks(), 3);
  EXPECT_EQ(nnz(a), 12);  // padding is not stored
  EXPECT_EQ(e.ell_col_indices().dtype(), DType::kI32);
  EXPECT_TRUE(exact_equal(to_dense(a), example_dense()));
}

TEST(BlockedEllTest, PaddingValuesAreIgnored) {
  Tensor v = example_values().clone();
  v.narrow(0, 2, 2).narrow(1, 2, 2).fill_(99.0);
  Tensor a = sparse_blocked_ell(i32({0, 2, 1, -1}, {2, 2}), v, {4, 6}, 2);
  EXPECT_TRUE(exact_equal(to_dense(a), example_dense()));
}

TEST(BlockedEllTest, BsrRoundTrip) {
  Tensor a = example_ell();
  Tensor b = blocked_ell_to_bsr(a);
  EXPECT_EQ(bsr_impl(b, "test").nblocks(), 3);
  EXPECT_TRUE(exact_equal(to_dense(b), example_dense()));
  Tensor back = bsr_to_blocked_ell(b);
  EXPECT_TRUE(testing::same_parts(back, a));
  EXPECT_ERROR_NAMING(bsr_to_blocked_ell(dense_to_bsr(example_dense(), 2, 3)),
                      "bsr_to_blocked_ell: Blocked-ELL needs square blocks, got 2x3");
}

TEST(BlockedEllTest, EmptyRowsAndNoBlocks) {
  Tensor a = sparse_blocked_ell(i32({}, {2, 0}), zeros({4, 0}), {4, 6}, 2);
  EXPECT_EQ(nnz(a), 0);
  EXPECT_TRUE(exact_equal(to_dense(a), zeros({4, 6})));
  Tensor b = sparse_blocked_ell(i32({-1, -1}, {2, 1}), zeros({4, 2}), {4, 6}, 2);
  EXPECT_EQ(nnz(b), 0);
  EXPECT_TRUE(exact_equal(to_dense(b), zeros({4, 6})));
}

TEST(BlockedEllTest, RejectsBadParts) {
  Tensor v = example_values();
  EXPECT_ERROR_NAMING(sparse_blocked_ell(i32({0, 2, 1, -1}, {2, 2}), v, {4, 6}, 4),
                      "sparse_blocked_ell: block size 4 does not divide the shape [4, 6]");
  EXPECT_ERROR_NAMING(sparse_blocked_ell(i32({0, 3, 1, -1}, {2, 2}), v, {4, 6}, 2),
                      "sparse_blocked_ell: ell_col_indices[0, 1] = 3 is out of range [-1, 3)");
  EXPECT_ERROR_NAMING(sparse_blocked_ell(i32({0, 2, 1, -2}, {2, 2}), v, {4, 6}, 2),
                      "ell_col_indices[1, 1] = -2 is out of range [-1, 3)");
  EXPECT_ERROR_NAMING(sparse_blocked_ell(i32({2, 0, 1, -1}, {2, 2}), v, {4, 6}, 2),
                      "ell_col_indices[0, 1] = 0 is smaller than the entry before it in block row 0");
  EXPECT_ERROR_NAMING(sparse_blocked_ell(i32({0, 2, 1, 1}, {2, 2}), v, {4, 6}, 2),
                      "ell_col_indices[1, 1] = 1 duplicates the entry before it in block row 1");
  EXPECT_ERROR_NAMING(sparse_blocked_ell(i32({-1, 2, 1, -1}, {2, 2}), v, {4, 6}, 2),
                      "ell_col_indices[0, 1] = 2 follows padding (-1) in block row 0; padding must come last");
  EXPECT_ERROR_NAMING(sparse_blocked_ell(i32({0, 2, 1, -1}, {1, 4}), v, {4, 6}, 2),
                      "ell_col_indices has shape [1, 4], expected [2, ell_cols]");
  EXPECT_ERROR_NAMING(sparse_blocked_ell(i32({0, 2, 1, -1}, {2, 2}), zeros({4, 6}), {4, 6}, 2),
                      "sparse_blocked_ell: values has shape [4, 6], expected [4, 4] (rows, ell_cols * b)");
  EXPECT_ERROR_NAMING(sparse_blocked_ell(f32({0, 2, 1, -1}, {2, 2}), v, {4, 6}, 2),
                      "ell_col_indices must be i32 or i64, got f32");
}

TEST(BlockedEllTest, WithValuesKeepsVersion) {
  Tensor a = example_ell();
  Tensor b = with_values(a, example_values() * 2.0);
  EXPECT_EQ(pattern_version(a), pattern_version(b));
  EXPECT_TRUE(exact_equal(to_dense(b), example_dense() * 2.0));
  EXPECT_ERROR_NAMING(with_values(a, zeros({4, 6})), "blocked_ell.with_values: values of shape [4, 6]");
}

TEST(BlockedEllTest, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  Tensor x = testing::random_sparse({16, 24}, 0.1, 3, DType::kF32, {0, 1, 2, 3});
  Tensor cpu = to_format(x, "blocked_ell", FormatOptions::block(4));
  Tensor gpu = to_format(x.to(Device::cuda()), "blocked_ell", FormatOptions::block(4));
  EXPECT_TRUE(testing::same_parts(to_device(gpu, Device::cpu()), cpu));
  EXPECT_TRUE(exact_equal(to_dense(gpu).to(Device::cpu()), x));
}

}  // namespace
}  // namespace coppice

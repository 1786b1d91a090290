// Tests for sparse/coo.h: the factory (range, shape, dtype checks; the
// coalesced flag computed and asserted), coalesce, n-dimensional to_dense.
#include "sparse/coo.h"

#include "gtest/gtest.h"
#include "tests/sparse/test_util.h"

namespace coppice {
namespace {

using testing::exact_equal;
using testing::f32;
using testing::i32;
using testing::i64;

TEST(CooTest, BuildsTwoDimensional) {
  Tensor a = sparse_coo(i64({0, 0, 2, 1, 3, 0}, {2, 3}), f32({1, 2, 3}), {3, 4});
  EXPECT_EQ(a.format(), "coo");
  EXPECT_EQ(nnz(a), 3);
  const CooImpl& c = coo_impl(a, "test");
  EXPECT_TRUE(c.is_coalesced());
  EXPECT_EQ(c.indices().dtype(), DType::kI64);
  EXPECT_TRUE(exact_equal(to_dense(a), f32({0, 1, 0, 2, 0, 0, 0, 0, 3, 0, 0, 0}, {3, 4})));
}

TEST(CooTest, NDimensionalAndI32Indices) {
  // Entries at (1, 0, 2) and (0, 1, 1) of a [2, 2, 3] tensor: out of order.
  Tensor a = sparse_coo(i32({1, 0, 0, 1, 2, 1}, {3, 2}), f32({5, 6}), {2, 2, 3});
  EXPECT_FALSE(coo_impl(a, "test").is_coalesced());
  EXPECT_EQ(coo_impl(a, "test").indices().dtype(), DType::kI64);
  Tensor expected = zeros({2, 2, 3});
  std::vector<float> v(12, 0.0f);
  v[1 * 6 + 0 * 3 + 2] = 5;
  v[0 * 6 + 1 * 3 + 1] = 6;
  EXPECT_TRUE(exact_equal(to_dense(a), f32(v, {2, 2, 3})));
  Tensor one_d = sparse_coo(i64({4, 1}, {1, 2}), f32({7, 8}), {6});
  EXPECT_TRUE(exact_equal(to_dense(one_d), f32({0, 8, 0, 0, 7, 0})));
}

TEST(CooTest, DuplicatesAddInToDenseAndCoalesce) {
  // (1, 2) three times, (0, 0) once, unsorted.
  Tensor a = sparse_coo(i64({1, 0, 1, 1, 2, 0, 2, 2}, {2, 4}), f32({1, 10, 100, 1000}), {2, 3});
  EXPECT_FALSE(coo_impl(a, "test").is_coalesced());
  Tensor expected = f32({10, 0, 0, 0, 0, 1101}, {2, 3});
  EXPECT_TRUE(exact_equal(to_dense(a), expected));
  Tensor c = coalesce(a);
  EXPECT_TRUE(coo_impl(c, "test").is_coalesced());
  EXPECT_EQ(nnz(c), 2);
  EXPECT_EQ(coo_impl(c, "test").indices().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 2}));
  EXPECT_EQ(coo_impl(c, "test").values().to_vector<float>(), (std::vector<float>{10, 1101}));
  EXPECT_NE(pattern_version(c), pattern_version(a));
  EXPECT_TRUE(exact_equal(to_dense(c), expected));
  EXPECT_TRUE(coalesce(c).is_same(c));  // already coalesced: itself
}

TEST(CooTest, EmptyAndOtherDtypes) {
  Tensor e = sparse_coo(Tensor::empty({2, 0}, DType::kI64), f32({}), {3, 4}, true);
  EXPECT_EQ(nnz(e), 0);
  EXPECT_TRUE(coo_impl(e, "test").is_coalesced());
  EXPECT_TRUE(exact_equal(to_dense(e), zeros({3, 4})));
  EXPECT_EQ(nnz(coalesce(e)), 0);
  for (DType t : {DType::kF64, DType::kBF16, DType::kF16}) {
    Tensor a = sparse_coo(i64({0, 0, 1, 1}, {2, 2}), f32({1.5f, 1.5f}).to(t), {2, 2});
    EXPECT_EQ(a.dtype(), t);
    Tensor c = coalesce(a);
    EXPECT_TRUE(exact_equal(to_dense(c), f32({0, 3, 0, 0}, {2, 2}).to(t)));
  }
}

TEST(CooTest, RejectsBadParts) {
  EXPECT_ERROR_NAMING(sparse_coo(i64({0, 3, 1, 1}, {2, 2}), f32({1, 2}), {3, 4}),
                      "sparse_coo: indices[0, 1] = 3 is out of range [0, 3) for dim 0");
  EXPECT_ERROR_NAMING(sparse_coo(i64({0, 1, 1, -1}, {2, 2}), f32({1, 2}), {3, 4}),
                      "sparse_coo: indices[1, 1] = -1 is out of range [0, 4) for dim 1");
  EXPECT_ERROR_NAMING(sparse_coo(i64({0, 1, 1, 2, 2, 2}, {3, 2}), f32({1, 2}), {3, 4}),
                      "sparse_coo: indices has shape [3, 2], expected [2, 2] (ndim, nnz)");
  EXPECT_ERROR_NAMING(sparse_coo(i64({0, 1, 1, 2}, {2, 2}), f32({1, 2, 3}), {3, 4}),
                      "indices has shape [2, 2], expected [2, 3]");
  EXPECT_ERROR_NAMING(sparse_coo(i64({0, 1, 1, 2}, {2, 2}), f32({1, 2}, {1, 2}), {3, 4}),
                      "sparse_coo: values must be 1-D [nnz]");
  EXPECT_ERROR_NAMING(sparse_coo(f32({0, 1, 1, 2}, {2, 2}), f32({1, 2}), {3, 4}),
                      "sparse_coo: indices must be i32 or i64, got f32");
  EXPECT_ERROR_NAMING(sparse_coo(i64({0, 1, 1, 2}, {2, 2}), i64({1, 2}), {3, 4}), "values must be floating point");
  EXPECT_ERROR_NAMING(sparse_coo(i64({}, {0, 0}), f32({}), {}), "sparse_coo: shape must have at least one dimension");
  EXPECT_ERROR_NAMING(sparse_coo(i64({0, 1}, {2, 1}), f32({1}), {3, -4}), "sparse_coo: negative size");
}

TEST(CooTest, DeclaredCoalescedIsChecked) {
  EXPECT_ERROR_NAMING(sparse_coo(i64({1, 0, 0, 0}, {2, 2}), f32({1, 2}), {2, 2}, true),
                      "sparse_coo: entry 1 at [0, 0] comes before the entry before it, but the indices were declared "
                      "coalesced");
  EXPECT_ERROR_NAMING(sparse_coo(i64({0, 1, 1, 1, 2, 2}, {2, 3}), f32({1, 2, 3}), {2, 3}, true),
                      "sparse_coo: entry 2 at [1, 2] duplicates the entry before it");
  // Not declared: accepted, and the flag says what is true.
  EXPECT_FALSE(coo_impl(sparse_coo(i64({1, 0, 0, 0}, {2, 2}), f32({1, 2}), {2, 2}), "test").is_coalesced());
}

TEST(CooTest, WithValuesAndTo) {
  Tensor a = sparse_coo(i64({0, 1, 1, 0}, {2, 2}), f32({1, 2}), {2, 2});
  Tensor b = with_values(a, f32({3, 4}));
  EXPECT_EQ(pattern_version(b), pattern_version(a));
  EXPECT_TRUE(coo_impl(b, "test").indices().is_same(coo_impl(a, "test").indices()));
  EXPECT_TRUE(exact_equal(to_dense(b), f32({0, 3, 4, 0}, {2, 2})));
  EXPECT_ERROR_NAMING(with_values(a, f32({1})), "coo.with_values: values of shape [1] for a pattern of 2 entries");
  Tensor c = to_dtype(a, DType::kBF16);
  EXPECT_EQ(pattern_version(c), pattern_version(a));
  EXPECT_EQ(c.dtype(), DType::kBF16);
  EXPECT_ERROR_NAMING(coo_impl(to_dense(a), "my_op"), "my_op: expected a COO tensor, got format 'dense'");
}

TEST(CooTest, CudaCoalesceMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  const Device gpu = Device::cuda();
  Tensor idx = i64({1, 0, 1, 1, 2, 0, 2, 2}, {2, 4});
  Tensor val = f32({1, 10, 100, 1000});
  Tensor cpu = coalesce(sparse_coo(idx, val, {2, 3}));
  Tensor gpu_t = coalesce(sparse_coo(idx.to(gpu), val.to(gpu), {2, 3}));
  EXPECT_EQ(gpu_t.device(), gpu);
  EXPECT_TRUE(testing::same_parts(to_device(gpu_t, Device::cpu()), cpu));
  EXPECT_TRUE(exact_equal(to_dense(gpu_t).to(Device::cpu()), to_dense(cpu)));
  EXPECT_ERROR_NAMING(sparse_coo(i64({0, 3, 1, 1}, {2, 2}).to(gpu), f32({1, 2}).to(gpu), {3, 4}),
                      "sparse_coo: indices[0, 1] = 3 is out of range [0, 3) for dim 0");
}

}  // namespace
}  // namespace coppice

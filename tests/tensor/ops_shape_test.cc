// Tests for tensor/ops_shape.cc: cat, stack, index_select, gather,
// scatter_add and index_copy_, against reference loops, with the errors for misuse.
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

Tensor iota(const Shape& shape, double base = 0, DType dtype = DType::kF32) {
  return add(arange(0.0, static_cast<double>(shape_numel(shape)), 1.0, dtype), base).reshape(shape);
}

TEST(Cat, AlongEachDim) {
  Tensor a = iota({2, 3}), b = iota({2, 3}, 100), c = iota({1, 3}, 200);
  Tensor r = cat({a, c, b}, 0);
  EXPECT_EQ(r.shape(), (Shape{5, 3}));
  EXPECT_EQ(vals(r), (std::vector<double>{0, 1, 2, 3, 4, 5, 200, 201, 202, 100, 101, 102, 103, 104, 105}));
  Tensor cols = cat({a, iota({2, 1}, 50)}, -1);
  EXPECT_EQ(cols.shape(), (Shape{2, 4}));
  EXPECT_EQ(vals(cols), (std::vector<double>{0, 1, 2, 50, 3, 4, 5, 51}));
  // Non-contiguous inputs, an empty piece, and a single tensor.
  Tensor t = cat({a.t(), zeros({0, 2}), b.t()}, 0);
  EXPECT_EQ(t.shape(), (Shape{6, 2}));
  EXPECT_EQ(vals(t), (std::vector<double>{0, 3, 1, 4, 2, 5, 100, 103, 101, 104, 102, 105}));
  Tensor one = cat({a}, 1);
  EXPECT_EQ(vals(one), vals(a));
  EXPECT_FALSE(one.is_same(a));  // always a new tensor
  EXPECT_EQ(cat({iota({2}, 0, DType::kBF16), iota({1}, 5, DType::kBF16)}).dtype(), DType::kBF16);
}

TEST(Cat, Errors) {
  Tensor a = zeros({2, 3});
  EXPECT_ERROR_NAMING(cat({}), "cat: expected at least one tensor");
  EXPECT_ERROR_NAMING(cat({a, zeros({2, 4})}, 0),
                      "cat: tensor 1 has shape [2, 4], expected [2, 3] like tensor 0 except in dim 0");
  EXPECT_ERROR_NAMING(cat({a, zeros({3})}), "cat: tensor 1 has shape [3]");
  EXPECT_ERROR_NAMING(cat({a, zeros({2, 3}, DType::kF64)}), "cat: tensor 1 has dtype f64, expected f32 like tensor 0");
  EXPECT_ERROR_NAMING(cat({scalar_tensor(1), scalar_tensor(2)}),
                      "cat: zero-dimensional tensors cannot be concatenated");
  EXPECT_ERROR_NAMING(cat({a, a}, 2), "cat: dim 2 is out of range");
  EXPECT_ERROR_NAMING(cat({a, Tensor()}), "cat: tensor 1 is an undefined tensor");
}

TEST(Stack, NewDim) {
  Tensor a = iota({2, 3}), b = iota({2, 3}, 10);
  Tensor s0 = stack({a, b});
  EXPECT_EQ(s0.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(vals(s0), (std::vector<double>{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15}));
  Tensor s2 = stack({a, b}, 2);
  EXPECT_EQ(s2.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(vals(s2), (std::vector<double>{0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15}));
  EXPECT_EQ(stack({a, b}, -1).shape(), (Shape{2, 3, 2}));
  Tensor scalars = stack({scalar_tensor(1), scalar_tensor(2), scalar_tensor(3)});
  EXPECT_EQ(scalars.shape(), (Shape{3}));
  EXPECT_EQ(vals(scalars), (std::vector<double>{1, 2, 3}));
  EXPECT_ERROR_NAMING(stack({a, zeros({3, 2})}), "stack: tensor 1 has shape [3, 2], expected [2, 3] like tensor 0");
  EXPECT_ERROR_NAMING(stack({a, b}, 3), "stack: dim 3 is out of range");
  EXPECT_ERROR_NAMING(stack({}), "stack: expected at least one tensor");
  EXPECT_ERROR_NAMING(stack({a, zeros({2, 3}, DType::kI64)}), "stack: tensor 1 has dtype i64");
}

TEST(IndexSelect, AlongEachDim) {
  Tensor x = iota({3, 4});
  Tensor rows = index_select(x, 0, from_vector<int64_t>({2, 0, 2}));
  EXPECT_EQ(rows.shape(), (Shape{3, 4}));
  EXPECT_EQ(vals(rows), (std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}));
  Tensor cols = index_select(x, 1, from_vector<int32_t>({3, 1}));
  EXPECT_EQ(vals(cols), (std::vector<double>{3, 1, 7, 5, 11, 9}));
  EXPECT_EQ(vals(index_select(x.t(), 0, from_vector<int64_t>({1}, {1}))), (std::vector<double>{1, 5, 9}));
  EXPECT_EQ(index_select(x, 1, zeros({0}, DType::kI64)).shape(), (Shape{3, 0}));
  EXPECT_EQ(index_select(x, 0, scalar_tensor(1, DType::kI64)).shape(), (Shape{1, 4}));
  EXPECT_ERROR_NAMING(index_select(x, 0, from_vector<int64_t>({3})), "index_select: index 3");
  EXPECT_ERROR_NAMING(index_select(x, 0, from_vector<int64_t>({-1})), "index_select");
  EXPECT_ERROR_NAMING(index_select(x, 0, zeros({2})), "index_select: index must be an integer tensor, got f32");
  EXPECT_ERROR_NAMING(index_select(x, 0, zeros({1, 1}, DType::kI64)), "index_select: index must be 0-D or 1-D");
  EXPECT_ERROR_NAMING(index_select(x, 2, zeros({1}, DType::kI64)), "index_select: dim 2 is out of range");
  EXPECT_ERROR_NAMING(index_select(scalar_tensor(1), 0, zeros({1}, DType::kI64)),
                      "index_select: input must be at least 1-D");
}

TEST(IndexSelect, TrustedVariantsGiveTheCheckedResults) {
  // For an index Coppice derived itself (a pattern's maps): the same values, no range check on a GPU.
  Tensor x = iota({3, 4});
  Tensor index = from_vector<int64_t>({2, 0, 2});
  EXPECT_EQ(vals(index_select_trusted(x, 0, index)), vals(index_select(x, 0, index)));
  EXPECT_EQ(vals(index_select_trusted(x, 1, index)), vals(index_select(x, 1, index)));
  Tensor src = iota({3}, 1);
  EXPECT_EQ(vals(scatter_add_trusted(zeros({4}), 0, index, src)), vals(scatter_add(zeros({4}), 0, index, src)));
  // The operands are still checked: only the index's range is taken on trust.
  EXPECT_ERROR_NAMING(index_select_trusted(x, 0, zeros({2})), "index_select: index must be an integer tensor");
  EXPECT_ERROR_NAMING(scatter_add_trusted(zeros({4}), 0, index, iota({3}, 1).to(DType::kF64)),
                      "scatter_add: src has dtype f64");
}

TEST(Gather, AgainstLoops) {
  Tensor x = iota({3, 4});
  Tensor idx = from_vector<int64_t>({3, 0, 1, 1, 2, 2}, {3, 2});
  Tensor g = gather(x, 1, idx);
  EXPECT_EQ(g.shape(), (Shape{3, 2}));
  EXPECT_EQ(vals(g), (std::vector<double>{3, 0, 5, 5, 10, 10}));
  Tensor g0 = gather(x, 0, from_vector<int64_t>({2, 1, 0, 0}, {1, 4}));
  EXPECT_EQ(vals(g0), (std::vector<double>{8, 5, 2, 3}));
  // An index smaller than the input in the other dims.
  EXPECT_EQ(vals(gather(x, 1, from_vector<int64_t>({1, 2}, {2, 1}))), (std::vector<double>{1, 6}));
  EXPECT_EQ(vals(gather(x.t(), 0, from_vector<int64_t>({3}, {1, 1}))), (std::vector<double>{3}));
  EXPECT_ERROR_NAMING(gather(x, 1, from_vector<int64_t>({4}, {1, 1})), "gather: index 4");
  EXPECT_ERROR_NAMING(gather(x, 1, from_vector<int64_t>({0, 1})),
                      "gather: index must have as many dims as the input (2)");
  EXPECT_ERROR_NAMING(gather(x, 1, zeros({4, 1}, DType::kI64)),
                      "gather: index [4, 1] is larger than input [3, 4] in dim 0");
  EXPECT_ERROR_NAMING(gather(x, 1, zeros({1, 1})), "gather: index must be an integer tensor");
}

TEST(ScatterAdd, AccumulatesDuplicates) {
  Tensor x = zeros({2, 4});
  Tensor idx = from_vector<int64_t>({0, 3, 0, 1, 1, 1}, {2, 3});
  Tensor src = iota({2, 3}, 1);  // [[1,2,3],[4,5,6]]
  Tensor r = scatter_add(x, 1, idx, src);
  EXPECT_EQ(vals(r), (std::vector<double>{4, 0, 0, 2, 0, 15, 0, 0}));
  EXPECT_EQ(vals(x), std::vector<double>(8, 0.0));  // x unchanged
  // Along dim 0, onto non-zero x, with src larger than index (only index's part is read).
  Tensor base = iota({3, 2});
  Tensor big_src = iota({2, 3}, 10);
  Tensor r0 = scatter_add(base, 0, from_vector<int64_t>({2, 0, 2, 2}, {2, 2}), big_src);
  // base [[0,1],[2,3],[4,5]]; src part [[10,11],[13,14]]: (0,0)->row2, (0,1)->row0, (1,0)->row2, (1,1)->row2
  EXPECT_EQ(vals(r0), (std::vector<double>{0, 12, 2, 3, 27, 19}));
  // Reference loop over a larger case.
  Tensor xs = iota({3, 5});
  Tensor is = from_vector<int64_t>({4, 4, 0, 1, 2, 2, 3, 3, 3}, {3, 3});
  Tensor ss = iota({3, 3}, 0.5);
  std::vector<double> want = vals(xs), sv = vals(ss);
  std::vector<double> iv = vals(is);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) want[i * 5 + static_cast<int64_t>(iv[i * 3 + j])] += sv[i * 3 + j];
  EXPECT_EQ(vals(scatter_add(xs, 1, is, ss)), want);
  EXPECT_EQ(vals(scatter_add(xs, 1, zeros({3, 0}, DType::kI64), ss)), vals(xs));
  EXPECT_ERROR_NAMING(scatter_add(x, 1, from_vector<int64_t>({4}, {1, 1}), src), "scatter_add: index 4");
  EXPECT_ERROR_NAMING(scatter_add(x, 1, idx, zeros({2, 3}, DType::kF64)),
                      "scatter_add: src has dtype f64, expected f32");
  EXPECT_ERROR_NAMING(scatter_add(x, 1, idx, zeros({2, 2})),
                      "scatter_add: index [2, 3] is larger than src [2, 2] in dim 1");
  EXPECT_ERROR_NAMING(scatter_add(x, 1, zeros({3, 1}, DType::kI64), zeros({3, 1})),
                      "scatter_add: index [3, 1] is larger than input [2, 4] in dim 0");
  EXPECT_ERROR_NAMING(scatter_add(x, 1, zeros({2}, DType::kI64), zeros({2})),
                      "scatter_add: input [2, 4], index [2] and src [2]");
}

TEST(ShapeOpsOnGpu, MatchTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  const Device gpu = Device::cuda(0);
  Tensor a = iota({2, 3}), b = iota({2, 3}, 100);
  EXPECT_EQ(max_abs_diff(cat({a, b.t().contiguous().t()}, 1), cat({a.to(gpu), b.to(gpu)}, 1)), 0.0);
  EXPECT_EQ(max_abs_diff(stack({a, b}, 1), stack({a.to(gpu), b.to(gpu)}, 1)), 0.0);
  Tensor idx = from_vector<int64_t>({2, 0, 2, 1, 1, 1}, {2, 3});
  EXPECT_EQ(max_abs_diff(gather(a, 1, idx), gather(a.to(gpu), 1, idx.to(gpu))), 0.0);
  EXPECT_EQ(max_abs_diff(scatter_add(a, 1, idx, b), scatter_add(a.to(gpu), 1, idx.to(gpu), b.to(gpu))), 0.0);
  EXPECT_EQ(max_abs_diff(index_select(a, 1, from_vector<int64_t>({2, 2})),
                         index_select(a.to(gpu), 1, from_vector<int64_t>({2, 2}).to(gpu))),
            0.0);
  EXPECT_ERROR_NAMING(cat({a, b.to(gpu)}), "cat: tensor 1 is on cuda:0, expected cpu like tensor 0");
  EXPECT_ERROR_NAMING(gather(a.to(gpu), 1, idx), "gather: operands are on different devices");
  // Read back at the next synchronization (tensor/cuda/deferred_checks.h).
  EXPECT_ERROR_NAMING(index_select(a.to(gpu), 0, from_vector<int64_t>({5}).to(gpu)).to(Device::cpu()),
                      "index_select: index 5");
}

TEST(IndexCopy, WritesOnlyTheChosenSlicesInPlace) {
  Tensor x = iota({4, 3});
  const void* storage = x.data_ptr();
  index_copy_(x, 0, from_vector<int64_t>({2, 0}), iota({2, 3}, 100));
  EXPECT_EQ(x.data_ptr(), storage);
  EXPECT_EQ(vals(x), (std::vector<double>{103, 104, 105, 3, 4, 5, 100, 101, 102, 9, 10, 11}));
  // Along dim 1 of a 3-D tensor, against a reference loop.
  Tensor y = iota({2, 4, 2});
  Tensor src = iota({2, 2, 2}, 50);
  std::vector<double> want = vals(y), sv = vals(src);
  const int64_t at[] = {3, 1};
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < 2; ++i) want[(o * 4 + at[j]) * 2 + i] = sv[(o * 2 + j) * 2 + i];
  index_copy_(y, 1, from_vector<int64_t>({3, 1}), src);
  EXPECT_EQ(vals(y), want);
  index_copy_(y, 1, zeros({0}, DType::kI64), zeros({2, 0, 2}));  // nothing to write
  EXPECT_EQ(vals(y), want);
  // Bad input names the op and what is wrong, and writes nothing.
  const std::vector<double> before = vals(x);
  EXPECT_ERROR_NAMING(index_copy_(x, 0, from_vector<int64_t>({1, 4}), zeros({2, 3})),
                      "index_copy_: index 4 (at position 1) is out of range for dim 0 of size 4");
  EXPECT_ERROR_NAMING(index_copy_(x, 0, from_vector<int64_t>({1}), zeros({2, 3})),
                      "index_copy_: src has shape [2, 3], expected [1, 3]");
  EXPECT_ERROR_NAMING(index_copy_(x, 0, from_vector<int64_t>({1}), zeros({1, 3}, DType::kF64)),
                      "index_copy_: src has dtype f64, expected f32");
  EXPECT_ERROR_NAMING(index_copy_(x.t(), 0, from_vector<int64_t>({1}), zeros({1, 4})),
                      "index_copy_: the destination [3, 4] must be contiguous");
  EXPECT_ERROR_NAMING(index_copy_(x, 0, zeros({1, 1}, DType::kI64), zeros({1, 3})),
                      "index_copy_: index must be 0-D or 1-D");
  EXPECT_EQ(vals(x), before);
}

}  // namespace
// copy_into_at: pieces land flat at their offsets, in one PieceCopy; the
// rest of out is untouched.
TEST(CopyIntoAt, PiecesLandAtTheirOffsets) {
  Tensor out = full({10}, -1.0);
  copy_into_at(out, {from_vector<float>({1, 2}, {2}), from_vector<float>({3, 4, 5, 6}, {2, 2}), zeros({0})},
               {1, 6, 10});
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{-1, 1, 2, -1, -1, -1, 3, 4, 5, 6}));
  copy_into_at(out, {}, {});  // nothing to copy
  EXPECT_ERROR_NAMING(copy_into_at(out, {zeros({3})}, {8}),
                      "copy_into_at: piece 0 (3 elements at offset 8) does not fit out's 10");
  EXPECT_ERROR_NAMING(copy_into_at(out, {zeros({3})}, {}), "copy_into_at: 1 pieces but 0 offsets");
  EXPECT_ERROR_NAMING(copy_into_at(out, {zeros({3}, DType::kF64)}, {0}),
                      "copy_into_at: piece 0 is f64 on cpu, expected f32 on cpu like out");
  EXPECT_ERROR_NAMING(copy_into_at(out, {zeros({2, 2}).t()}, {0}), "copy_into_at: piece 0 is not contiguous");
  EXPECT_ERROR_NAMING(copy_into_at(zeros({4, 4}).t(), {zeros({2})}, {0}), "copy_into_at: out must be contiguous");
}

}  // namespace coppice

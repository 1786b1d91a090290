// Sizes that come from outside (tensor/shape.h, tensor/tensor.h,
// tensor/factories.cc, tensor/cpu_allocator.cc): element and byte counts,
// strides and view arithmetic that would overflow throw coppice::Error naming
// the shape, and memory the machine cannot give is refused before it is
// allocated, with the bytes requested and available.
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"
#include "tensor/allocator.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

using coppice::testing::throws_with;

constexpr int64_t k2p31 = int64_t{2147483648};

TEST(Sizes, ShapeNumelOverflowThrows) {
  EXPECT_EQ(shape_numel({k2p31, k2p31}), int64_t{1} << 62);
  EXPECT_ERROR_NAMING(shape_numel({k2p31, k2p31, 10}),
                      "shape [2147483648, 2147483648, 10]: the element count overflows a 64-bit integer");
  EXPECT_EQ(shape_numel({0, k2p31, k2p31, k2p31}), 0);  // 0 first: no product past it
  EXPECT_ERROR_NAMING(contiguous_strides({0, k2p31, k2p31, 4}), "the strides overflow");
  EXPECT_EQ(contiguous_strides({k2p31 * 4, 0, 2}), (Shape{2, 2, 1}));  // the leading size is never multiplied in
}

TEST(Sizes, EmptyOfAnOverflowingShapeThrowsWithTheBytes) {
  // The model.options.sizes [2147483648, 2147483648, 10]: fc1.weight.
  EXPECT_TRUE(throws_with(
      [] {
        Tensor::empty({k2p31, k2p31});
      },
      {"empty: bytes of shape [2147483648, 2147483648] of f32", "4611686018427387904 * 4 overflows"}));
  EXPECT_ERROR_NAMING(Tensor::empty({k2p31, k2p31, 10}), "element count overflows");
  EXPECT_ERROR_NAMING(Tensor::empty({-1, 3}), "empty: negative size in shape [-1, 3]");
  // Through the factories, as data.synthetic.examples: 2305843009213693952 reached randint.
  Generator gen(0);
  EXPECT_ERROR_NAMING(randint(0, 3, {int64_t{2305843009213693952}}, DType::kI64, gen), "overflows");
  EXPECT_ERROR_NAMING(rand({k2p31, k2p31, 2}, DType::kF32, gen), "overflows");
}

TEST(Sizes, MemoryBeyondTheMachineIsRefusedBeforeAllocation) {
  const AllocatorStats before = cpu_allocator().stats();
  // 2^50 bytes: no machine has a petabyte of memory.
  EXPECT_TRUE(throws_with([] { Tensor::empty({int64_t{1} << 48}); },
                          {"cpu allocator: 1125899906842624 bytes (1.05e+06 GiB) requested but only ",
                           " are available (", " already held by tensors)"}));
  EXPECT_TRUE(throws_with(
      [] {
        zeros({int64_t{1} << 20, int64_t{1} << 28}, DType::kF64);
      },
      {"cpu allocator: 2251799813685248 bytes", "requested but only"}));
  EXPECT_EQ(cpu_allocator().stats().allocations, before.allocations);  // nothing was allocated
  EXPECT_ERROR_NAMING(cpu_allocator().allocate(std::numeric_limits<size_t>::max()),
                      "more than any machine can address");
  // Ordinary requests, small and above the checked size, still work.
  EXPECT_EQ(zeros({3}).numel(), 3);
  EXPECT_EQ(Tensor::empty({int64_t{80} << 20}, DType::kU8).numel(), int64_t{80} << 20);
}

TEST(Sizes, ViewArithmeticDoesNotWrap) {
  Tensor a = zeros({4, 6});
  EXPECT_ERROR_NAMING(a.reshape({-1, k2p31, k2p31, 4}), "reshape: the sizes of [-1, 2147483648, 2147483648, 4]");
  EXPECT_ERROR_NAMING(a.view({k2p31 * 4, k2p31 * 4, 0, -1}), "view: the sizes of");
  // A step past the end keeps one element; a huge step does not overflow.
  Tensor s = a.slice(1, 1, 6, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(s.shape(), (Shape{4, 1}));
  EXPECT_EQ(a.slice(1, 0, 6, 4).shape(), (Shape{4, 2}));
  EXPECT_ERROR_NAMING(a.narrow(1, 2, std::numeric_limits<int64_t>::max()), "narrow: [2, 2 + 9223372036854775807)");
  EXPECT_ERROR_NAMING(a.as_strided({2, 2}, {100, 1}, 0),
                      "as_strided: shape [2, 2], strides [100, 1] and offset 0 "
                      "reach elements [0, 101], outside the storage of 24");
  EXPECT_ERROR_NAMING(a.as_strided({2}, {1}, -1), "outside the storage");
  EXPECT_ERROR_NAMING(a.as_strided({3, 2}, {std::numeric_limits<int64_t>::max(), 1}, 0), "as_strided: shape [3, 2]");
  EXPECT_EQ(a.as_strided({0, 2}, {1000, 1}, 0).numel(), 0);  // reaches nothing
  // expand makes no memory, but its element count must still be countable.
  Tensor e = zeros({1}).expand({k2p31, k2p31, 4});
  EXPECT_ERROR_NAMING(e.numel(), "element count overflows");
}

TEST(Sizes, FactoriesRefuseValuesTheirDtypeCannotHold) {
  EXPECT_ERROR_NAMING(arange(0.0, 1.0, 1e-300), "arange: [0, 1) in steps of 1e-300 has 1e+300 elements, more than");
  EXPECT_ERROR_NAMING(arange(0.0, 1e18, 1.0), "more than 9007199254740992");
  EXPECT_ERROR_NAMING(arange(-1e308, 1e308, 1e-10), "has inf elements");
  EXPECT_ERROR_NAMING(arange(0.0, 300.0, 1.0, DType::kU8), "arange: [0, 300) in steps of 1 does not fit in u8");
  EXPECT_ERROR_NAMING(arange(9.3e18, 9.4e18, 1e17, DType::kI64), "does not fit in i64");
  // Integer ranges near the ends of int64 stay exact.
  const std::vector<int64_t> ends =
      arange(-9223372036854775807.0 - 1.0, 9.0e18, 9.0e18, DType::kI64).to_vector<int64_t>();
  ASSERT_EQ(ends.size(), 3u);
  EXPECT_EQ(ends[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(ends[2], int64_t{8776627963145224192});  // -2^63 + 1.8e19: 2 * step passes 2^63
  EXPECT_ERROR_NAMING(full({2}, 1e300, DType::kI64), "full: value 1e+300 does not fit in i64");
  EXPECT_ERROR_NAMING(full({2}, -1.0, DType::kU8), "does not fit in u8");
  EXPECT_ERROR_NAMING(full({2}, 3e9, DType::kI32), "does not fit in i32");
  EXPECT_EQ(full({2}, 255.0, DType::kU8).to_vector<int64_t>(), (std::vector<int64_t>{255, 255}));
}

}  // namespace
}  // namespace coppice

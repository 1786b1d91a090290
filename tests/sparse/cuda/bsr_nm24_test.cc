// BSR-of-2:4 on sparse tensor cores (sparse/cuda/bsr_nm24.h, issue 35's
// hybrid) against its CPU twin: the level family's generic linear over the
// same level tensor (a format declared with the hybrid's levels), to the
// bf16/f16 tolerance of cuda_test_util.h. The weights have an empty block
// row, blocks kept at random and, inside a kept block, groups holding two,
// one (an explicit zero beside it) or no non-zeros; x's rows are not a
// multiple of the kernel's tile. Products repeat bit for bit, and a
// declaration other than the hybrid's is refused by name.
#include "sparse/cuda/bsr_nm24.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/levels/level_impl.h"
#include "tensor/ops.h"
#include "tests/sparse/cuda/cuda_test_util.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

using sparse_cuda::bsr_nm24_declaration;
using sparse_cuda::bsr_nm24_linear;
using sparse_cuda::bsr_nm24_weight;

// Dense values [rows, cols] and the hybrid's mask: 128 x 64 blocks kept with
// probability 1/2 (block row 1 empty), and inside a kept block at most two
// of every four along a row.
std::pair<Tensor, Tensor> hybrid_operand(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(static_cast<size_t>(rows * cols), 0.0);
  std::vector<uint8_t> keep(v.size(), 0);
  for (int64_t br = 0; br < rows / 128; ++br) {
    for (int64_t bc = 0; bc < cols / 64; ++bc) {
      if (br == 1 || rng() % 2 == 0) continue;
      for (int64_t r = br * 128; r < (br + 1) * 128; ++r) {
        for (int64_t g = bc * 64; g < (bc + 1) * 64; g += 4) {
          const int64_t count = static_cast<int64_t>(rng() % 3), first = static_cast<int64_t>(rng() % 4);
          for (int64_t j = 0; j < count; ++j) {
            const auto i = static_cast<size_t>(r * cols + g + (first + 2 * j) % 4);
            keep[i] = 1;
            v[i] = (rng() % 2 == 0 ? -1.0 : 1.0) * (0.25 + static_cast<double>(rng() % 1000) / 1000.0);
          }
        }
      }
    }
  }
  return {from_vector(v, {rows, cols}, TensorOptions(DType::kF64)), ne(from_vector(keep, {rows, cols}), 0.0)};
}

TEST(BsrNm24, MatchesTheGenericCpuLinear) {
  SKIP_WITHOUT_CUDA();
  levels::register_level_format("bsr_nm24_parity", bsr_nm24_declaration(), "test");
  struct Case {
    int64_t rows, cols, m;
  };
  for (const Case c : {Case{256, 192, 200}, Case{384, 320, 64}, Case{128, 64, 1}}) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.cols << ", m " << c.m << ", " << dtype_name(dtype));
      const auto [dense, mask] = hybrid_operand(c.rows, c.cols, static_cast<uint64_t>(c.rows + c.cols));
      const levels::LevelTensor lt = levels::level_from_mask(dense.to(dtype), mask, bsr_nm24_declaration(), "test");
      const Tensor x = random_dense({c.m, c.cols}, 7).to(dtype), bias = random_dense({c.rows}, 8).to(dtype);
      // The CPU twin: the level family's generic linear (f32 sums, rounded once).
      const Tensor twin = linear(x, levels::level_format_tensor("bsr_nm24_parity", lt, "test"), bias);
      const sparse_cuda::BsrNm24Weight w = bsr_nm24_weight(lt, kCuda, "test");
      const Tensor got = bsr_nm24_linear(x.to(kCuda), w, bias.to(kCuda));
      EXPECT_TRUE(near(got, twin, dtype));
      // The twin against f64 on the same rounded values.
      EXPECT_TRUE(near(
          twin, add(matmul(x.to(DType::kF64), levels::level_to_dense(lt).to(DType::kF64).t()), bias.to(DType::kF64)),
          dtype));
      const Tensor again = bsr_nm24_linear(x.to(kCuda), w, bias.to(kCuda));
      EXPECT_EQ(host64(again).to_vector<double>(), host64(got).to_vector<double>());
    }
  }
}

TEST(BsrNm24, RefusesOtherDeclarationsAndDtypes) {
  SKIP_WITHOUT_CUDA();
  const auto [dense, mask] = hybrid_operand(128, 64, 3);
  const levels::LevelFormat bsr = levels::parse_level_format("blocked 128x64 (dense, compressed, dense, dense)", "t");
  EXPECT_TRUE(testing::throws_with(
      [&] { bsr_nm24_weight(levels::level_from_mask(dense.to(DType::kBF16), mask, bsr, "t"), kCuda, "hybrid"); },
      {"hybrid: the BSR-of-2:4 kernel takes blocked 128x64",
       "got blocked 128x64 (dense(0), compressed(1), dense(2), "
       "dense(3))"}));
  EXPECT_TRUE(testing::throws_with(
      [&] { bsr_nm24_weight(levels::level_from_mask(dense, mask, bsr_nm24_declaration(), "t"), kCuda, "hybrid"); },
      {"hybrid: values must be bf16 or f16, got f64"}));
}

}  // namespace
}  // namespace coppice

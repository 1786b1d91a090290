// The mma.sync BSR kernels (sparse/cuda/bsr_mma.h: square 16x16, 32x32,
// 64x64 and 128x128 blocks of bf16 and f16), and on Hopper the wgmma ones
// that take 32x32 and larger (bsr_wgmma.h), against f64 products on the CPU: both product
// directions with S and S^T, the SDDMM, and linear_relu's bias and relu in
// the write-out; with empty block rows, a single stored block, rows longer
// than one SDDMM run, column counts that are not multiples of the tile,
// transposed and strided dense operands, and the same bits on every run.
// Tolerance: the bf16/f16 one of cuda_test_util.h (rtol 2e-2), products
// accumulating in f32 and rounding once.
#include "sparse/cuda/bsr_mma.h"

#include <cuda_bf16.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/cuda/bsr_products.h"
#include "sparse/cuda/bsr_wgmma.h"
#include "sparse/ops.h"
#include "sparse/route_choices.h"
#include "tensor/precision.h"
#include "tests/sparse/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using sparse_cuda::bsr_kernel_takes;
using sparse_cuda::BsrKernel;

bool mma_takes(const Tensor& s) { return bsr_kernel_takes(BsrKernel::kMmaSync, s); }

Tensor mma_matmul(const Tensor& s, bool transpose_s, const Tensor& x, bool sparse_left) {
  return sparse_cuda::bsr_matmul(BsrKernel::kMmaSync, s, transpose_s, x, sparse_left, "test");
}

Tensor mma_sddmm_values(const Tensor& a, const Tensor& b, const Tensor& pattern) {
  return sparse_cuda::bsr_sddmm_values(BsrKernel::kMmaSync, a, b, pattern);
}

// bf16, f16, and f32 on TF32 tensor cores (allow_tf32).
const std::vector<TileMode> kModes = {
    {DType::kBF16, false, "bf16"}, {DType::kF16, false, "f16"}, {DType::kF32, true, "tf32"}};
const std::vector<int64_t> kSides = {16, 32, 64, 128};

// A test's matrix side: `small` for blocks up to 64x64, `large` (a multiple
// of 128) for 128x128 blocks.
int64_t side(int64_t b, int64_t small, int64_t large) { return b == 128 ? large : small; }

// A dense [rows, cols] operand on the GPU as the kernels may see it:
// contiguous, a transposed view, or every other column of a wider matrix
// (no unit stride along either dimension).
enum class Layout { kContiguous, kTransposed, kStrided };
const std::vector<Layout> kLayouts = {Layout::kContiguous, Layout::kTransposed, Layout::kStrided};
const char* layout_name(Layout l) {
  return l == Layout::kContiguous ? "contiguous" : l == Layout::kTransposed ? "transposed" : "strided";
}

Tensor operand(int64_t rows, int64_t cols, Layout layout, uint64_t seed, DType dtype) {
  if (layout == Layout::kTransposed) return random_dense({cols, rows}, seed).to(dtype).to(kCuda).t();
  if (layout == Layout::kStrided) {
    const Tensor wide = random_dense({rows, 2 * cols}, seed).to(dtype).to(kCuda);
    return wide.slice(1, 0, 2 * cols, 2);
  }
  return random_dense({rows, cols}, seed).to(dtype).to(kCuda);
}

class BsrMmaTest : public SparseCudaTest {
 protected:
  void TearDown() override {
    set_allow_tf32(false);
    SparseCudaTest::TearDown();
  }
};

TEST_F(BsrMmaTest, TakesSquare16To128BlocksOf16BitTypes) {
  EXPECT_TRUE(sparse_cuda::bsr_mma_takes(16, 16));
  EXPECT_TRUE(sparse_cuda::bsr_mma_takes(32, 32));
  EXPECT_TRUE(sparse_cuda::bsr_mma_takes(64, 64));
  EXPECT_TRUE(sparse_cuda::bsr_mma_takes(128, 128));
  EXPECT_FALSE(sparse_cuda::bsr_mma_takes(8, 8));
  EXPECT_FALSE(sparse_cuda::bsr_mma_takes(256, 256));
  // Hopper's wgmma kernels take 32x32, 64x64 and 128x128 blocks; at 64x64
  // four warpgroups multiply under a gelu gradient form, three under a
  // forward form, two otherwise (bsr_wgmma_groups).
  EXPECT_TRUE(sparse_cuda::bsr_wgmma_takes(32, 32) && sparse_cuda::bsr_wgmma_takes(64, 64) &&
              sparse_cuda::bsr_wgmma_takes(128, 128));
  EXPECT_FALSE(sparse_cuda::bsr_wgmma_takes(16, 16) || sparse_cuda::bsr_wgmma_takes(64, 128));
  // The 32x32 SDDMM's runs of 4 take two thread blocks an SM, runs of 8 one.
  static_assert(sparse_cuda::bsr_wgmma_sddmm_resident(32, 4) == 2 &&
                sparse_cuda::bsr_wgmma_sddmm_resident(32, 8) == 1 && sparse_cuda::bsr_wgmma_sddmm_resident(64, 2) == 1);
  static_assert(sparse_cuda::bsr_wgmma_groups(64, sparse_cuda::GeluWriteOut::kForward) == 3 &&
                sparse_cuda::bsr_wgmma_groups(64, sparse_cuda::GeluWriteOut::kForwardTanh) == 3 &&
                sparse_cuda::bsr_wgmma_groups(64, sparse_cuda::GeluWriteOut::kGradient) == 4 &&
                sparse_cuda::bsr_wgmma_groups(64, sparse_cuda::GeluWriteOut::kGradientTanh) == 4 &&
                sparse_cuda::bsr_wgmma_groups(64, sparse_cuda::GeluWriteOut::kNone) == 2 &&
                sparse_cuda::bsr_wgmma_groups(128, sparse_cuda::GeluWriteOut::kGradient) == 2);
  EXPECT_FALSE(sparse_cuda::bsr_mma_takes(32, 64));
  SKIP_WITHOUT_CUDA();
  const Tensor d = random_blocks(128, 128, 64, 64, 0.5, 1);
  EXPECT_TRUE(mma_takes(to_device(to_format(d.to(DType::kBF16), "bsr", FormatOptions::block(64, 64)), kCuda)));
  EXPECT_TRUE(mma_takes(to_device(to_format(d.to(DType::kF16), "bsr", FormatOptions::block(64, 64)), kCuda)));
  // f32 in f32 is not theirs, nor any 64x64 kernel's; with TF32 on, they take it.
  const Tensor f32 = to_device(to_format(d.to(DType::kF32), "bsr", FormatOptions::block(64, 64)), kCuda);
  EXPECT_FALSE(mma_takes(f32));
  EXPECT_FALSE(bsr_kernel_takes(BsrKernel::kTiles, f32));
  set_allow_tf32(true);
  EXPECT_TRUE(mma_takes(f32));
}

// The SDDMM's runs and ranges of k (bsr_mma.h, bsr_wgmma.h): plain rules,
// checked when this file compiles, at the shapes their comments quote (132
// SMs). Runs of 4 32x32 blocks where rows hold fewer than 10, else 8; 64x64
// blocks in twos, 128x128 alone.
static_assert(sparse_cuda::bsr_mma_sddmm_group(32, 3.2) == 4 && sparse_cuda::bsr_mma_sddmm_group(32, 6.4) == 4);
static_assert(sparse_cuda::bsr_mma_sddmm_group(32, 12.8) == 8 && sparse_cuda::bsr_mma_sddmm_group(16, 3.2) == 8);
static_assert(sparse_cuda::bsr_mma_sddmm_group(64, 6.4) == 2 && sparse_cuda::bsr_mma_sddmm_group(128, 6.4) == 1);
// mma.sync: the fewest waves x range. 96 runs over 264 slots take 11 ranges
// (4 waves of 1490) rather than 2 (1 wave of 8192); 256 runs over 264 slots
// stay whole (two waves of half the range cost the same: the fewer wins).
static_assert(sparse_cuda::bsr_mma_sddmm_splits(96, 16384, 264) == 11);
static_assert(sparse_cuda::bsr_mma_sddmm_splits(256, 4096, 264) == 1);
// At least 512 of k a range, at most 16 ranges; nothing to split, or no slots: one.
static_assert(sparse_cuda::bsr_mma_sddmm_splits(1, 1024, 264) == 2);
static_assert(sparse_cuda::bsr_mma_sddmm_splits(1, 1 << 20, 264) == 16);
static_assert(sparse_cuda::bsr_mma_sddmm_splits(4, 511, 264) == 1);
static_assert(sparse_cuda::bsr_mma_sddmm_splits(0, 16384, 264) == 1);
static_assert(sparse_cuda::bsr_mma_sddmm_splits(96, 16384, 0) == 1);
// wgmma's count: tests/sparse/sddmm_dispatch_test.cc (host code).

// The slots bsr_mma_sddmm_splits fills: the SMs times the thread blocks an
// SM holds of the kernel that runs.
TEST_F(BsrMmaTest, SddmmSlotsAreTheKernelsResidency) {
  SKIP_WITHOUT_CUDA();
  sparse_cuda::BsrSddmmArgs<__nv_bfloat16> p;  // a linear's weight gradient: a = dy^T, b = x
  p.bh = p.bw = 32;
  p.a.row_stride = 1;
  p.a.col_stride = 1024;
  p.b.row_stride = 1024;
  p.b.col_stride = 1;
  p.group = 4;
  const int four = sparse_cuda::bsr_mma_sddmm_resident(p);
  p.group = 8;
  const int eight = sparse_cuda::bsr_mma_sddmm_resident(p);
  EXPECT_GE(four, 1);
  EXPECT_GE(eight, 1);
  EXPECT_GE(four, eight);  // half the threads and less shared memory
}

// op(S) @ X and X @ op(S), S [128, 192] ([256, 384] in 128x128 blocks)
// with block row 1 empty.
TEST_F(BsrMmaTest, ProductsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 1000;
  for (const TileMode& mode : kModes) {
    set_allow_tf32(mode.tf32);
    const DType dtype = mode.dtype;
    for (int64_t b : kSides) {
      for (double density : {0.0, 0.4, 1.0}) {
        const Tensor dense = random_blocks(side(b, 128, 256), side(b, 192, 384), b, b, density, seed++, {1});
        const Tensor s = to_device(to_format(dense.to(dtype), "bsr", FormatOptions::block(b, b)), kCuda);
        ASSERT_TRUE(mma_takes(s));
        const Tensor s64 = host64(to_dense(s));
        for (int64_t n : {1, 8, 70, 256, 300, 1100}) {  // 1100: full 512-column tiles and an edge
          for (bool transpose_s : {false, true}) {
            const Tensor op_s = transpose_s ? s64.t() : s64;
            for (Layout layout : kLayouts) {
              const std::string what = std::string(mode.name) + " blocks " + std::to_string(b) + " density " +
                                       std::to_string(density) + " n " + std::to_string(n) +
                                       (transpose_s ? " S^T " : " S ") + layout_name(layout);
              const Tensor x = operand(op_s.size(1), n, layout, seed++, dtype);
              EXPECT_TRUE(near(mma_matmul(s, transpose_s, x, true), matmul(op_s, host64(x)), mode.tolerance()))
                  << "op(S) @ X " << what;
              const Tensor y = operand(n, op_s.size(0), layout, seed++, dtype);
              EXPECT_TRUE(near(mma_matmul(s, transpose_s, y, false), matmul(host64(y), op_s), mode.tolerance()))
                  << "X @ op(S) " << what;
            }
          }
        }
      }
    }
  }
}

// A product and an SDDMM right behind the kernel that writes their operand.
// On Hopper the wgmma kernels are launched to overlap the kernel before them
// (tensor/cuda/grid_dependency.cuh) and must wait for it before reading; x
// (16 MB) is large enough that its producer is still writing when a kernel
// that did not wait would read it. Three rounds, each operand made afresh.
TEST_F(BsrMmaTest, KernelsReadWhatTheKernelBeforeThemWrote) {
  SKIP_WITHOUT_CUDA();
  const int64_t n = 8192, in = 1024, out = 256;
  const Tensor x0 = random_dense({n, in}, 9100).to(DType::kBF16).to(kCuda);
  const Tensor dy0 = random_dense({n, out}, 9101).to(DType::kBF16).to(kCuda);
  const Tensor x2 = mul(host64(x0), 2.0), dy2 = mul(host64(dy0), 2.0);  // exact in bf16
  for (int64_t b : {32, 64}) {
    const Tensor dense = random_blocks(out, in, b, b, 0.3, 9200 + b);
    const Tensor w = to_device(to_format(dense.to(DType::kBF16), "bsr", FormatOptions::block(b, b)), kCuda);
    const Tensor w64 = host64(dense.to(DType::kBF16));
    const Tensor pattern64 = to_format(dense.to(DType::kF64), "bsr", FormatOptions::block(b, b));
    const Tensor want_y = matmul(x2, w64.t());
    const Tensor want_dw = values(sddmm(dy2.t(), x2, pattern64));
    for (int round = 0; round < 3; ++round) {
      EXPECT_TRUE(near(linear(mul(x0, 2.0), w), want_y, DType::kBF16)) << "x W^T, blocks " << b << " round " << round;
      EXPECT_TRUE(near(values(sddmm(mul(dy0, 2.0).t(), mul(x0, 2.0), w)), want_dw, DType::kBF16))
          << "dy^T x at W's pattern, blocks " << b << " round " << round;
    }
  }
}

// One stored block in a [256, 256] weight ([384, 384] in 128x128 blocks):
// every other thread block has an empty row and writes the bias alone.
TEST_F(BsrMmaTest, SingleBlockWithBiasAndRelu) {
  SKIP_WITHOUT_CUDA();
  for (const TileMode& mode : kModes) {
    set_allow_tf32(mode.tf32);
    const DType dtype = mode.dtype;
    for (int64_t b : kSides) {
      const int64_t n = side(b, 256, 384);
      std::vector<double> v(static_cast<size_t>(n * n), 0.0);
      const std::vector<double> r = random_dense({b, b}, 7).to_vector<double>();
      for (int64_t i = 0; i < b; ++i) {
        for (int64_t j = 0; j < b; ++j)
          v[static_cast<size_t>((b + i) * n + 2 * b + j)] = r[static_cast<size_t>(i * b + j)];
      }
      const Tensor dense = from_vector(v, {n, n}, TensorOptions(DType::kF64));
      const Tensor w = to_device(to_format(dense.to(dtype), "bsr", FormatOptions::block(b, b)), kCuda);
      ASSERT_EQ(nnz(w), b * b);
      const Tensor x = operand(300, n, Layout::kContiguous, 8, dtype);
      const Tensor bias = random_dense({1, n}, 9).reshape({n}).to(dtype).to(kCuda);
      const Tensor want = relu(add(matmul(host64(x), host64(dense.to(dtype)).t()), host64(bias)));
      EXPECT_TRUE(near(linear_relu(x, w, bias), want, mode.tolerance())) << mode.name << " blocks " << b;
    }
  }
}

// SDDMM: a [rows, k] @ b [k, cols] at the pattern, a and b in each layout
// (a transposed is dy^T, as the gradient of linear passes it). 512 columns
// of 32x32 blocks at density 1 give rows of 16 blocks: two runs of 8 each
// (at 0.3, runs of at most 4); k = 2048 splits the inner dimension into
// ranges summed in order.
TEST_F(BsrMmaTest, SddmmMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 2000;
  for (const TileMode& mode : kModes) {
    set_allow_tf32(mode.tf32);
    const DType dtype = mode.dtype;
    for (int64_t b : kSides) {
      for (double density : {0.0, 0.3, 1.0}) {
        const int64_t rows = side(b, 128, 256);
        const Tensor dense = random_blocks(rows, 512, b, b, density, seed++, {0});
        const Tensor pattern = to_format(dense.to(dtype), "bsr", FormatOptions::block(b, b));
        const Tensor pc = to_device(pattern, kCuda);
        const Tensor pattern64 = to_format(dense.to(dtype).to(DType::kF64), "bsr", FormatOptions::block(b, b));
        for (int64_t k : {1, 33, 100, 256, 1000, 2048}) {  // 2048: k split in ranges
          for (Layout layout : kLayouts) {
            const Tensor a = operand(rows, k, layout, seed++, dtype);
            const Tensor bb = operand(k, 512, layout, seed++, dtype);
            const Tensor want = values(sddmm(host64(a), host64(bb), pattern64));
            EXPECT_TRUE(near(mma_sddmm_values(a, bb, pc), want, mode.tolerance()))
                << mode.name << " blocks " << b << " density " << density << " k " << k << " " << layout_name(layout);
          }
        }
      }
    }
  }
}

// The SDDMM asked for a's row sums too (a linear's bias gradient beside its
// weight's): the first run of each block row sums them, a thread block of
// its own each empty block row (row 0; density 0: no stored block at all);
// k = 2048 splits the sums in ranges added in order, like the values. Both
// kernels (with a = dy^T, 32x32, 64x64 and 128x128 blocks go to wgmma on Hopper
// unless pinned to mma.sync); the same bits on repeat.
TEST_F(BsrMmaTest, SddmmSumsTheRowsOfAInTheSamePass) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 7000;
  for (const TileMode& mode : kModes) {
    set_allow_tf32(mode.tf32);
    for (int64_t b : kSides) {
      for (double density : {0.0, 0.3, 1.0}) {
        const int64_t rows = side(b, 128, 256);
        const Tensor dense = random_blocks(rows, 512, b, b, density, seed++, {0});
        const Tensor pc = to_device(to_format(dense.to(mode.dtype), "bsr", FormatOptions::block(b, b)), kCuda);
        const Tensor pattern64 = to_format(dense.to(mode.dtype).to(DType::kF64), "bsr", FormatOptions::block(b, b));
        for (int64_t k : {1, 100, 2048}) {
          for (Layout layout : {Layout::kTransposed, Layout::kContiguous}) {
            const Tensor a = operand(rows, k, layout, seed++, mode.dtype);
            const Tensor bb = operand(k, 512, Layout::kContiguous, seed++, mode.dtype);
            const Tensor want = values(sddmm(host64(a), host64(bb), pattern64));
            const Tensor want_sums = sum(host64(a), {1});
            for (const char* pin : {"bsr_tiles=auto", "bsr_tiles=mma_sync"}) {
              ScopedRoutePins pins(pin);
              const std::string what = std::string(mode.name) + " blocks " + std::to_string(b) + " density " +
                                       std::to_string(density) + " k " + std::to_string(k) + " " + layout_name(layout) +
                                       " " + pin;
              Tensor sums, again;
              const Tensor v = sparse_cuda::bsr_sddmm_values(BsrKernel::kMmaSync, a, bb, pc, &sums);
              EXPECT_TRUE(near(v, want, mode.tolerance())) << "values, " << what;
              ASSERT_TRUE(sums.defined()) << what;
              EXPECT_EQ(sums.dtype(), mode.dtype) << what;
              EXPECT_TRUE(near(sums, want_sums, mode.tolerance())) << "row sums, " << what;
              sparse_cuda::bsr_sddmm_values(BsrKernel::kMmaSync, a, bb, pc, &again);
              EXPECT_EQ(host64(sums).to_vector<double>(), host64(again).to_vector<double>()) << what;
            }
          }
        }
      }
    }
  }
}

// A linear's shapes (x contiguous along the inner dimension) at 32x32, 64x64
// and 128x128 blocks: on compute capability 9.0 the wgmma kernels' products
// (bsr_wgmma.h), and with the bsr_tiles=mma_sync pin the mma.sync kernel's,
// both against the CPU (elsewhere both are mma.sync's): the plain product,
// the bias and the tanh gelu in the write-out (z kept), the erf gelu's
// gradient, and the weight gradient's SDDMM (dy^T @ x at the pattern).
// Tokens not a multiple of either kernel's tile; block row 1 (and so some
// block columns) empty.
TEST_F(BsrMmaTest, WgmmaAndMmaSyncTakeALinearsShapes) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 3000;
  for (const TileMode& mode : {kModes[0], kModes[1]}) {
    for (int64_t b : {32, 64, 128}) {
      const Tensor dense = random_blocks(8 * b, 8 * b, b, b, 0.7, seed++, {1});
      const Tensor s = to_device(to_format(dense.to(mode.dtype), "bsr", FormatOptions::block(b, b)), kCuda);
      const Tensor s64 = host64(to_dense(s));
      const Tensor pattern64 = to_format(dense.to(mode.dtype).to(DType::kF64), "bsr", FormatOptions::block(b, b));
      const Tensor bias = random_dense({1, 8 * b}, seed++).reshape({8 * b}).to(mode.dtype).to(kCuda);
      for (int64_t n : {1, 130, 300, 1100}) {  // 1100 tokens: the SDDMM splits them in two ranges
        const Tensor x_dw = operand(n, 8 * b, Layout::kContiguous, seed++, mode.dtype);
        const Tensor dy = operand(n, 8 * b, Layout::kContiguous, seed++, mode.dtype);
        const Tensor want_dw = values(sddmm(host64(dy).t(), host64(x_dw), pattern64));
        for (const char* pin : {"bsr_tiles=auto", "bsr_tiles=mma_sync"}) {
          ScopedRoutePins pins(pin);
          EXPECT_TRUE(near(mma_sddmm_values(dy.t(), x_dw, s), want_dw, mode.tolerance()))
              << "dW, " << mode.name << " blocks " << b << " n " << n << " " << pin;
        }
        for (bool transpose_s : {false, true}) {
          const Tensor op_s = transpose_s ? s64.t() : s64;
          const Tensor x = operand(n, 8 * b, Layout::kContiguous, seed++, mode.dtype);
          const Tensor z_in = operand(n, 8 * b, Layout::kContiguous, seed++, mode.dtype);
          const Tensor want = matmul(host64(x), op_s);
          const Tensor want_z = add(want, host64(bias));
          for (const char* pin : {"bsr_tiles=auto", "bsr_tiles=mma_sync"}) {
            ScopedRoutePins pins(pin);
            const std::string what = std::string(mode.name) + " blocks " + std::to_string(b) + " n " +
                                     std::to_string(n) + (transpose_s ? " X @ S^T " : " X @ S ") + pin;
            EXPECT_TRUE(near(mma_matmul(s, transpose_s, x, false), want, mode.tolerance())) << what;
            const auto [y, z] =
                sparse_cuda::bsr_mma_matmul_gelu(s, transpose_s, x, false, "test", bias, GeluForm::kTanh);
            EXPECT_TRUE(near(z, want_z, mode.tolerance())) << "z, " << what;
            EXPECT_TRUE(near(y, gelu_of_form(want_z, GeluForm::kTanh), mode.tolerance())) << "gelu_tanh(z), " << what;
            const Tensor g =
                sparse_cuda::bsr_mma_matmul_gelu_grad(s, transpose_s, x, false, "test", z_in, GeluForm::kErf);
            EXPECT_TRUE(near(g, gelu_backward_of_form(want, host64(z_in), GeluForm::kErf), mode.tolerance()))
                << "gelu's gradient, " << what;
          }
        }
      }
    }
  }
}

// The persistent wgmma product walks several tiles a thread block (more
// tiles than the GPU has SMs) through one ring of stages: rows of 0 to 3
// blocks (a linear's at 90 % sparsity), empty ones among them, and rows of
// up to 8 blocks (16 at 32x32), longer than the ring (64x64 blocks: the
// warpgroups, two, three under a forward gelu form or four under its
// gradient, take turns at tiles, so each one skips over the others' stages;
// enough tokens that each of a gradient form's four takes about three
// tiles, through its one staging tile; 32x32: three thread blocks an SM, so
// 16 block rows make several tiles each); a token count that is not a
// multiple of the tile,
// both directions, bias, the gelu write-out and its gradient's in the erf
// and the tanh form (each form a kernel of its own; z loaded during the
// products, a turn of three at a time); the same bits on repeat.
TEST_F(BsrMmaTest, WgmmaProductWalksManyTilesAThreadBlock) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 5000;
  for (int64_t b : {32, 64, 128}) {
    for (double density : {0.2, 0.9}) {
      // 8 block rows (16 of 32) x 33, 65 or (64x64) 193 tiles of 128 tokens
      const int64_t rows = (b == 32 ? 16 : 8) * b, n = b == 128 ? 4200 : b == 64 ? 24677 : 8229;
      const Tensor dense = random_blocks(rows, rows, b, b, density, seed++, {1, 6});
      const Tensor s = to_device(to_format(dense.to(DType::kBF16), "bsr", FormatOptions::block(b, b)), kCuda);
      const Tensor s64 = host64(to_dense(s));
      const Tensor bias = random_dense({1, rows}, seed++).reshape({rows}).to(DType::kBF16).to(kCuda);
      for (bool transpose_s : {false, true}) {
        const std::string what = "blocks " + std::to_string(b) + " density " + std::to_string(density) +
                                 (transpose_s ? " X @ S^T" : " X @ S");
        const Tensor x = operand(n, rows, Layout::kContiguous, seed++, DType::kBF16);
        const Tensor want = matmul(host64(x), transpose_s ? s64.t() : s64);
        const Tensor y = mma_matmul(s, transpose_s, x, false);
        EXPECT_TRUE(near(y, want, kModes[0].tolerance())) << what;
        EXPECT_EQ(host64(y).to_vector<double>(), host64(mma_matmul(s, transpose_s, x, false)).to_vector<double>())
            << what;
        // Each gelu form is a kernel of its own on wgmma: both, both ways.
        const Tensor want_z = add(want, host64(bias));
        const Tensor z_in = operand(n, rows, Layout::kContiguous, seed++, DType::kBF16);
        for (GeluForm form : {GeluForm::kErf, GeluForm::kTanh}) {
          const std::string how = what + (form == GeluForm::kTanh ? " tanh" : " erf");
          const auto [g, z] = sparse_cuda::bsr_mma_matmul_gelu(s, transpose_s, x, false, "test", bias, form);
          EXPECT_TRUE(near(z, want_z, kModes[0].tolerance())) << "z, " << how;
          EXPECT_TRUE(near(g, gelu_of_form(want_z, form), kModes[0].tolerance())) << "gelu(z), " << how;
          const Tensor dz = sparse_cuda::bsr_mma_matmul_gelu_grad(s, transpose_s, x, false, "test", z_in, form);
          EXPECT_TRUE(near(dz, gelu_backward_of_form(want, host64(z_in), form), kModes[0].tolerance()))
              << "gelu's gradient, " << how;
          EXPECT_EQ(host64(dz).to_vector<double>(),
                    host64(sparse_cuda::bsr_mma_matmul_gelu_grad(s, transpose_s, x, false, "test", z_in, form))
                        .to_vector<double>())
              << how;
        }
      }
    }
  }
}

// Same operands, same bits: no atomics, one summation order.
TEST_F(BsrMmaTest, RepeatsBitForBit) {
  SKIP_WITHOUT_CUDA();
  for (int64_t b : kSides) {
    const Tensor dense = random_blocks(512, 512, b, b, 0.3, 40 + b);
    const Tensor s = to_device(to_format(dense.to(DType::kBF16), "bsr", FormatOptions::block(b, b)), kCuda);
    const Tensor x = operand(4096, 512, Layout::kContiguous, 41, DType::kBF16);  // the SDDMM splits k = 4096
    const Tensor dy = operand(4096, 512, Layout::kContiguous, 42, DType::kBF16);
    const Tensor y1 = linear(x, s), y2 = linear(x, s);
    EXPECT_EQ(host64(y1).to_vector<double>(), host64(y2).to_vector<double>());
    const Tensor g1 = mma_sddmm_values(dy.t(), x, s), g2 = mma_sddmm_values(dy.t(), x, s);
    EXPECT_EQ(host64(g1).to_vector<double>(), host64(g2).to_vector<double>());
  }
}

}  // namespace
}  // namespace coppice

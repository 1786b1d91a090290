// The WMMA / FMA tile kernels of BSR (sparse/cuda/bsr_products.h, kTiles)
// against f64 products on the CPU: every direction, SDDMM, every block shape
// they take, f32 (FMA and TF32), bf16, f16, empty block rows, strided dense
// operands, column counts that are not multiples of the tile or the vector
// width; and the planners' BSR routes through the ops: linear with the bias,
// and linear_relu with the bias and relu, in the write-out.
#include <cstdlib>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "gtest/gtest.h"
#include "sparse/cuda/bsr_products.h"
#include "sparse/ops.h"
#include "sparse/route_choices.h"
#include "tensor/precision.h"
#include "tensor/runtime_options.h"
#include "tests/sparse/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using sparse_cuda::bsr_kernel_takes;
using sparse_cuda::bsr_matmul;
using sparse_cuda::BsrKernel;

bool tiles_take(const Tensor& s) { return bsr_kernel_takes(BsrKernel::kTiles, s); }

const std::vector<TileMode> kModes = {{DType::kF32, false, "f32"},
                                      {DType::kF32, true, "tf32"},
                                      {DType::kBF16, false, "bf16"},
                                      {DType::kF16, false, "f16"}};

class BsrTilesTest : public SparseCudaTest {
 protected:
  void TearDown() override {
    set_allow_tf32(false);
    SparseCudaTest::TearDown();
  }
};

struct Blocks {
  int64_t bh, bw;
};
const std::vector<Blocks> kBlocks = {{16, 16}, {32, 32}, {16, 32}, {32, 16}};

TEST_F(BsrTilesTest, AppliesToTheirBlocksAndTypesOnly) {
  SKIP_WITHOUT_CUDA();
  const Tensor d = random_blocks(64, 64, 32, 32, 0.5, 1);
  EXPECT_TRUE(tiles_take(to_device(to_format(d.to(DType::kF32), "bsr", FormatOptions::block(32, 32)), kCuda)));
  EXPECT_TRUE(tiles_take(to_device(to_format(d.to(DType::kBF16), "bsr", FormatOptions::block(16, 32)), kCuda)));
  EXPECT_FALSE(tiles_take(to_device(to_format(d.to(DType::kF64), "bsr", FormatOptions::block(32, 32)), kCuda)));
  EXPECT_FALSE(tiles_take(to_device(to_format(d.to(DType::kF32), "bsr", FormatOptions::block(8, 8)), kCuda)));
  EXPECT_FALSE(tiles_take(to_format(d.to(DType::kF32), "bsr", FormatOptions::block(32, 32))));  // CPU
  EXPECT_FALSE(tiles_take(to_device(to_format(d.to(DType::kF32), "csr"), kCuda)));
}

// op(S) @ X and X @ op(S) for both op, X contiguous and a transposed view.
TEST_F(BsrTilesTest, EveryDirectionMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 100;
  for (const TileMode& mode : kModes) {
    set_allow_tf32(mode.tf32);
    for (const Blocks& blk : kBlocks) {
      for (double density : {0.0, 0.3, 1.0}) {
        const Tensor dense = random_blocks(64, 96, blk.bh, blk.bw, density, seed++, {1});
        const Tensor s = to_device(to_format(dense.to(mode.dtype), "bsr", FormatOptions::block(blk.bh, blk.bw)), kCuda);
        ASSERT_TRUE(tiles_take(s));
        const Tensor s64 = to_dense(s).to(Device::cpu()).to(DType::kF64);
        for (int64_t n : {1, 3, 64, 70, 130}) {
          for (bool transpose_s : {false, true}) {
            const Tensor op_s = transpose_s ? s64.t() : s64;
            for (bool view : {false, true}) {
              const std::string what = std::string(mode.name) + " blocks " + std::to_string(blk.bh) + "x" +
                                       std::to_string(blk.bw) + " density " + std::to_string(density) + " n " +
                                       std::to_string(n) + (transpose_s ? " S^T" : " S") + (view ? " view" : "");
              // The dense operand on the device, contiguous or a transposed view.
              auto on_device = [&](int64_t rows, int64_t cols) {
                return view ? random_dense({cols, rows}, seed++).to(mode.dtype).to(kCuda).t()
                            : random_dense({rows, cols}, seed++).to(mode.dtype).to(kCuda);
              };
              // op(S) @ X, X [op_s cols, n].
              const Tensor x = on_device(op_s.size(1), n);
              const Tensor got = bsr_matmul(BsrKernel::kTiles, s, transpose_s, x, true, "test");
              EXPECT_TRUE(near(got, matmul(op_s, host64(x)), mode.tolerance())) << "op(S) @ X " << what;
              // X @ op(S), X [n, op_s rows].
              const Tensor y = on_device(n, op_s.size(0));
              const Tensor got2 = bsr_matmul(BsrKernel::kTiles, s, transpose_s, y, false, "test");
              EXPECT_TRUE(near(got2, matmul(host64(y), op_s), mode.tolerance())) << "X @ op(S) " << what;
            }
          }
        }
      }
    }
  }
}

// The dispatched ops (matmul and linear both ways) take the tiles and agree
// with the route they replace (the pin bsr_tiles=off).
TEST_F(BsrTilesTest, DispatchedOpsAgreeWithTheOldRoute) {
  SKIP_WITHOUT_CUDA();
  const Tensor dense = random_blocks(96, 64, 32, 32, 0.4, 7, {0});
  const Tensor s = to_device(to_format(dense.to(DType::kF32), "bsr", FormatOptions::block(32, 32)), kCuda);
  const Tensor x = random_dense({40, 96}, 8).to(DType::kF32).to(kCuda);  // x @ S, linear(x, S^T)
  const Tensor w = random_dense({40, 64}, 9).to(DType::kF32).to(kCuda);  // linear(w, S) = w S^T, S @ w^T
  auto all = [&] { return std::vector<Tensor>{matmul(x, s), linear(w, s), matmul(s, w.t()), linear(s, w)}; };
  const std::vector<Tensor> tiled = all();
  std::vector<Tensor> old;
  {
    ScopedRoutePins tiles_off("bsr_tiles=off");
    old = all();
  }
  for (size_t i = 0; i < tiled.size(); ++i) EXPECT_TRUE(near(tiled[i], old[i], DType::kF32)) << "product " << i;
}

// linear(x, W, b) with a BSR weight adds the bias in the kernel (a
// three-input "linear" kernel) and matches the CPU's linear plus add.
TEST_F(BsrTilesTest, LinearWithBiasAddsItInTheKernel) {
  SKIP_WITHOUT_CUDA();
  EXPECT_NE(Dispatcher::instance().find("linear", DeviceType::kCuda, {"dense", "bsr", "dense"}), nullptr);
  uint64_t seed = 700;
  for (const TileMode& mode : kModes) {
    set_allow_tf32(mode.tf32);
    for (double density : {0.0, 0.4}) {
      const Tensor dense = random_blocks(64, 96, 32, 32, density, seed++, {1});
      const Tensor w = to_format(dense.to(mode.dtype), "bsr", FormatOptions::block(32, 32));
      const Tensor x = random_dense({70, 96}, seed++).to(mode.dtype);
      const Tensor b = random_dense({1, 64}, seed++).reshape({64}).to(mode.dtype);
      const Tensor got = linear(x.to(kCuda), to_device(w, kCuda), b.to(kCuda));
      const Tensor want = linear(x.to(DType::kF64), dense.to(mode.dtype).to(DType::kF64), b.to(DType::kF64));
      EXPECT_TRUE(near(got, want, mode.tolerance())) << mode.name << " density " << density;
      // A 3-D input (tokens of a transformer) as rows and back.
      const Tensor x3 = random_dense({6, 5 * 96}, seed++).reshape({6, 5, 96}).to(mode.dtype);
      const Tensor got3 = linear(x3.to(kCuda), to_device(w, kCuda), b.to(kCuda));
      EXPECT_EQ(got3.shape(), (Shape{6, 5, 64}));
      const Tensor want3 = linear(x3.to(DType::kF64), dense.to(mode.dtype).to(DType::kF64), b.to(DType::kF64));
      EXPECT_TRUE(near(got3.reshape({30, 64}), want3.reshape({30, 64}), mode.tolerance()))
          << mode.name << " density " << density << " 3-D";
    }
  }
}

// linear_relu(x, W[, b]) with a BSR weight: the bias and the relu in the
// kernel's write-out (a "linear_relu" kernel, with and without the bias),
// against the composite relu(linear(...)) on the GPU and the f64 CPU twin,
// 2-D and 3-D inputs, every tiled block shape; empty blocks (density 0) give
// relu(bias).
TEST_F(BsrTilesTest, LinearReluAppliesItInTheKernel) {
  SKIP_WITHOUT_CUDA();
  EXPECT_NE(Dispatcher::instance().find("linear_relu", DeviceType::kCuda, {"dense", "bsr", "dense"}), nullptr);
  EXPECT_NE(Dispatcher::instance().find("linear_relu", DeviceType::kCuda, {"dense", "bsr"}), nullptr);
  uint64_t seed = 800;
  for (const TileMode& mode : kModes) {
    set_allow_tf32(mode.tf32);
    for (const Blocks& blk : kBlocks) {
      for (double density : {0.0, 0.4}) {
        const Tensor dense = random_blocks(64, 96, blk.bh, blk.bw, density, seed++, {1});
        const Tensor w = to_device(to_format(dense.to(mode.dtype), "bsr", FormatOptions::block(blk.bh, blk.bw)), kCuda);
        ASSERT_TRUE(tiles_take(w));
        const Tensor w64 = dense.to(mode.dtype).to(DType::kF64);
        const Tensor b = random_dense({1, 64}, seed++).reshape({64}).to(mode.dtype);
        for (const Shape& xs : {Shape{70, 96}, Shape{6, 5, 96}}) {
          const Tensor x = random_dense({shape_numel(xs) / 96, 96}, seed++).reshape(xs).to(mode.dtype);
          for (bool with_bias : {true, false}) {
            const std::string what = std::string(mode.name) + " blocks " + std::to_string(blk.bh) + "x" +
                                     std::to_string(blk.bw) + " density " + std::to_string(density) + " input " +
                                     shape_to_string(xs) + (with_bias ? " bias" : "");
            const Tensor bc = with_bias ? b.to(kCuda) : Tensor();
            const Tensor got = linear_relu(x.to(kCuda), w, bc);
            Shape ys = xs;
            ys.back() = 64;
            ASSERT_EQ(got.shape(), ys) << what;
            const int64_t rows = shape_numel(xs) / 96;
            const Tensor composite = relu(linear(x.to(kCuda), w, bc));
            EXPECT_TRUE(near(got.reshape({rows, 64}), composite.reshape({rows, 64}), mode.tolerance()))
                << "vs the GPU composite, " << what;
            const Tensor want = relu(linear(x.to(DType::kF64), w64, with_bias ? b.to(DType::kF64) : Tensor()));
            EXPECT_TRUE(near(got.reshape({rows, 64}), want.reshape({rows, 64}), mode.tolerance()))
                << "vs the CPU, " << what;
          }
        }
      }
    }
  }
}

// Where no BSR kernel runs (the pin bsr_tiles=off, or f64) the op computes
// the composite.
TEST_F(BsrTilesTest, LinearReluWithoutTilesIsTheComposite) {
  SKIP_WITHOUT_CUDA();
  const Tensor dense = random_blocks(64, 96, 32, 32, 0.4, 900, {1});
  const Tensor x = random_dense({40, 96}, 901), b = random_dense({1, 64}, 902).reshape({64});
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const Tensor w = to_device(to_format(dense.to(dtype), "bsr", FormatOptions::block(32, 32)), kCuda);
    const Tensor xc = x.to(dtype).to(kCuda), bc = b.to(dtype).to(kCuda);
    ScopedRoutePins tiles_off("bsr_tiles=off");  // changes nothing for f64
    if (dtype == DType::kF64) { EXPECT_FALSE(tiles_take(w) || bsr_kernel_takes(BsrKernel::kMmaSync, w)); }
    const Tensor got = linear_relu(xc, w, bc), got_nobias = linear_relu(xc, w);
    const Tensor want =
        relu(linear(x.to(dtype).to(DType::kF64), dense.to(dtype).to(DType::kF64), b.to(dtype).to(DType::kF64)));
    EXPECT_TRUE(near(got, want, dtype)) << dtype_name(dtype);
    EXPECT_TRUE(near(got_nobias, relu(linear(x.to(dtype).to(DType::kF64), dense.to(dtype).to(DType::kF64))), dtype))
        << dtype_name(dtype) << " without bias";
  }
}

// The differentiable linear_relu on the GPU: one node whose gradients (the
// BSR weight's on its pattern) match the composite's. Its bias gradient comes
// from the weight gradient's SDDMM (sddmm_row_sums' fused cell), the relu's
// gradient from a plain relu_backward.
TEST_F(BsrTilesTest, LinearReluGradientsMatchTheComposite) {
  SKIP_WITHOUT_CUDA();
  EXPECT_TRUE(sddmm_row_sums_fused(
      to_device(to_format(random_blocks(64, 96, 32, 32, 0.4, 949), "bsr", FormatOptions::block(32, 32)), kCuda)));
  EXPECT_FALSE(sddmm_row_sums_fused(to_device(to_format(random_matrix({64, 96}, 0.4, 949), "csr"), kCuda)));
  for (const TileMode& mode : {kModes[0], kModes[2]}) {  // f32, bf16
    const Tensor dense = random_blocks(64, 96, 32, 32, 0.4, 950, {1});
    const Tensor wv = to_device(to_format(dense.to(mode.dtype), "bsr", FormatOptions::block(32, 32)), kCuda);
    const Tensor xv = random_dense({70, 96}, 951).to(mode.dtype).to(kCuda);
    const Tensor bv = random_dense({1, 64}, 952).reshape({64}).to(mode.dtype).to(kCuda);
    const Tensor g = random_dense({70, 64}, 953).to(mode.dtype).to(kCuda);
    auto run = [&](bool fused) {
      Variable x(xv, true), w(wv, true), b(bv, true);
      Variable y = fused ? linear_relu(x, w, b) : relu(linear(x, w, b));
      y.backward(g);
      return std::vector<Tensor>{y.value(), x.grad(), values(w.grad()), b.grad()};
    };
    const std::vector<Tensor> fused = run(true), composite = run(false);
    for (size_t i = 0; i < fused.size(); ++i) {
      EXPECT_TRUE(near(fused[i], composite[i], mode.tolerance())) << mode.name << " output " << i;
    }
  }
}

// sddmm_row_sums where the BSR kernel and the dense route are timed against
// each other (bsr_sddmm_row_sums): the call that times them runs both, and
// its row sums must be those of the route whose values it returns, the bits
// every later call returns (they were the route run last's: the dense
// route's column sum, off by an ulp from the kernel's in f16).
TEST_F(BsrTilesTest, RowSumsOfTheCallThatTimesTheRoutesAreTheLaterCallsBits) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 960;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int64_t block : {32, 64}) {
      // A token count no other test uses: the decision is measured here.
      const int64_t k = 331 + block + static_cast<int64_t>(dtype);
      const Tensor dense = random_blocks(512, 256, block, block, 0.4, seed++, {1});
      const Tensor pattern = to_device(to_format(dense.to(dtype), "bsr", FormatOptions::block(block, block)), kCuda);
      const Tensor a = random_dense({512, k}, seed++).to(dtype).to(kCuda);
      const Tensor b = random_dense({k, 256}, seed++).to(dtype).to(kCuda);
      const auto [first_values, first_sums] = sddmm_row_sums(a, b, pattern);
      const auto [values_again, sums_again] = sddmm_row_sums(a, b, pattern);
      const std::string what = str_cat(dtype_name(dtype), " blocks ", block);
      EXPECT_TRUE(same_bits(values(first_values), values(values_again))) << what;
      EXPECT_TRUE(same_bits(first_sums, sums_again)) << what;
    }
  }
}

TEST_F(BsrTilesTest, SddmmMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 500;
  for (const TileMode& mode : kModes) {
    set_allow_tf32(mode.tf32);
    for (const Blocks& blk : kBlocks) {
      for (double density : {0.0, 0.3, 1.0}) {
        const Tensor dense = random_blocks(64, 96, blk.bh, blk.bw, density, seed++, {0});
        const Tensor pattern = to_format(dense.to(mode.dtype), "bsr", FormatOptions::block(blk.bh, blk.bw));
        const Tensor pc = to_device(pattern, kCuda);
        for (int64_t k : {1, 33, 100}) {
          for (int layout : {0, 1, 2}) {
            const bool views = layout == 1, strided = layout == 2;
            // Operands laid out on the device: contiguous, transposed views
            // (a as the gradient of linear passes dy^T), or every other
            // column of a wider matrix (no unit stride).
            auto on_device = [&](int64_t rows, int64_t cols) {
              if (strided)
                return random_dense({rows, 2 * cols}, seed++).to(mode.dtype).to(kCuda).slice(1, 0, 2 * cols, 2);
              if (views) return random_dense({cols, rows}, seed++).to(mode.dtype).to(kCuda).t();
              return random_dense({rows, cols}, seed++).to(mode.dtype).to(kCuda);
            };
            const Tensor ad = on_device(64, k), bd = on_device(k, 96);
            const Tensor a = ad.to(Device::cpu()), b = bd.to(Device::cpu());
            // The op (which may time the BSR kernel against the dense route
            // and take either) and the tiles themselves.
            const Tensor got = sddmm(ad, bd, pc);
            EXPECT_EQ(pattern_version(got), pattern_version(pattern));
            const Tensor tiled = sparse_cuda::bsr_sddmm_values(BsrKernel::kTiles, ad, bd, pc);
            const Tensor pattern64 =
                to_format(dense.to(mode.dtype).to(DType::kF64), "bsr", FormatOptions::block(blk.bh, blk.bw));
            const Tensor want = sddmm(a.to(DType::kF64), b.to(DType::kF64), pattern64);
            EXPECT_TRUE(near(tiled, values(want), mode.tolerance()))
                << "tiles " << mode.name << " blocks " << blk.bh << "x" << blk.bw << " density " << density << " k "
                << k
                << (views     ? " views"
                    : strided ? " strided"
                              : "");
            EXPECT_TRUE(near(values(got), values(want), mode.tolerance()))
                << mode.name << " blocks " << blk.bh << "x" << blk.bw << " density " << density << " k " << k
                << (views     ? " views"
                    : strided ? " strided"
                              : "");
          }
        }
      }
    }
  }
}

// The block-column index is cached per pattern: two patterns of one shape
// in turn each get their own.
TEST_F(BsrTilesTest, TransposedWalkFollowsThePattern) {
  SKIP_WITHOUT_CUDA();
  const Tensor x = random_dense({5, 64}, 30).to(DType::kF32);
  for (int round = 0; round < 2; ++round) {
    for (uint64_t seed : {31, 32}) {
      const Tensor dense = random_blocks(64, 64, 16, 16, 0.4, seed);
      const Tensor s = to_device(to_format(dense.to(DType::kF32), "bsr", FormatOptions::block(16, 16)), kCuda);
      EXPECT_TRUE(near(matmul(x.to(kCuda), s), matmul(x.to(DType::kF64), dense), DType::kF32))
          << "pattern " << seed << " round " << round;
    }
  }
}

TEST_F(BsrTilesTest, InnerDimensionMismatchIsRefused) {
  SKIP_WITHOUT_CUDA();
  const Tensor s = to_device(
      to_format(random_blocks(32, 64, 32, 32, 1.0, 40).to(DType::kF32), "bsr", FormatOptions::block(32, 32)), kCuda);
  const Tensor x = random_dense({32, 8}, 41).to(DType::kF32).to(kCuda);
  try {
    bsr_matmul(BsrKernel::kTiles, s, false, x, true, "matmul");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inner dimensions differ"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace coppice

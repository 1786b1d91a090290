// Formats declared by their levels on a GPU (sparse/cuda/level_cells.cc):
// a declaration that is a built-in format's runs on that format's CUDA
// kernels, so its products and SDDMM are near the built-in tensor's (a
// route is measured per pattern, so not always bitwise) and the CPU generic
// twin's, and its dense form is the built-in's bit for bit; its parts, positions and
// pattern version survive the moves; the BSR-of-2:4 hybrid's linear runs on
// its tensor-core kernel through the dispatcher; any other declaration's op
// fails naming the format and what would run it. No dense fallback runs.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/cuda/bsr_nm24.h"
#include "sparse/levels/builtin_levels.h"
#include "sparse/levels/level_impl.h"
#include "sparse/ops.h"
#include "sparse/stored_positions.h"
#include "tensor/ops.h"
#include "tests/sparse/cuda/cuda_test_util.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

class LevelCells : public SparseCudaTest {};

struct Builtin {
  const char* name;       // the declared format
  const char* builtin;    // the built-in format it is
  FormatOptions options;  // the built-in's
};

// Bitwise equality of two tensors of any format, on the host.
void expect_same(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(host64(to_dense(got)).to_vector<double>(), host64(to_dense(want)).to_vector<double>());
}

TEST_F(LevelCells, ABuiltinsDeclarationRunsOnItsCudaKernels) {
  SKIP_WITHOUT_CUDA();
  const std::vector<Builtin> cases = {{"cuda_levels_csr", "csr", {}},
                                      {"cuda_levels_bsr", "bsr", FormatOptions::block(8, 16)},
                                      {"cuda_levels_ell", "blocked_ell", FormatOptions::block(16)},
                                      {"cuda_levels_nm", "nm", FormatOptions::nm(2, 4)}};
  for (const Builtin& c : cases) {
    // bf16 too where the built-in's tensor-core kernels take it.
    const bool tensor_cores = std::string(c.builtin) == "nm" || std::string(c.builtin) == "bsr";
    for (DType dtype : tensor_cores ? std::vector<DType>{DType::kF32, DType::kBF16} : std::vector<DType>{DType::kF32}) {
      SCOPED_TRACE(::testing::Message() << c.name << ", " << dtype_name(dtype));
      levels::register_level_format(c.name, levels::builtin_level_format(c.builtin, 2, c.options, "test"), "test");
      const Tensor dense = two_of_four(random_blocks(64, 96, 16, 16, 0.5, 11, {1})).to(dtype);
      const Tensor mask = ne(dense, 0.0);
      const Tensor cpu = sparse_from_mask(dense, mask, c.name);
      const Tensor builtin = to_device(sparse_from_mask(dense, mask, c.builtin, c.options), kCuda);
      const Tensor w = to_device(cpu, kCuda);
      ASSERT_EQ(w.format(), c.name);
      ASSERT_TRUE(w.device().is_cuda());
      EXPECT_EQ(pattern_version(w), pattern_version(cpu));
      EXPECT_EQ(stored_positions(w), stored_positions(cpu));
      expect_same(w, cpu);

      const Tensor x = random_dense({40, 96}, 3).to(dtype).to(kCuda),
                   dy = random_dense({40, 64}, 4).to(dtype).to(kCuda);
      // Products near the built-in tensor's, not bitwise: a route is measured per pattern (BSR's and
      // Blocked-ELL's f32 products choose between kernels), and the view's pattern is another one.
      const Tensor y = linear(x, w);
      EXPECT_TRUE(near(y, linear(x, builtin), dtype));
      EXPECT_TRUE(near(y, linear(x.to(Device::cpu()), cpu), dtype));  // the CPU twin
      const Tensor dx = matmul(dy, w);
      EXPECT_TRUE(near(dx, matmul(dy, builtin), dtype));
      EXPECT_TRUE(near(dx, matmul(dy.to(Device::cpu()), cpu), dtype));
      // The weight's gradient: in the declared format, the pattern kept.
      const Tensor dw = sddmm(dy.t(), x, w);
      ASSERT_EQ(dw.format(), c.name);
      EXPECT_EQ(pattern_version(dw), pattern_version(w));
      EXPECT_TRUE(near(dw, sddmm(dy.t(), x, builtin), dtype));
      // Values on the device, and back to the host part for part.
      const Tensor doubled = with_values(w, mul(values(w), scalar_tensor(2.0, values(w).options())));
      expect_same(doubled, with_values(builtin, mul(values(builtin), scalar_tensor(2.0, values(builtin).options()))));
      const Tensor back = to_device(doubled, Device::cpu());
      EXPECT_EQ(back.format(), c.name);
      expect_same(back, with_values(cpu, mul(values(cpu), scalar_tensor(2.0, values(cpu).options()))));
    }
  }
}

TEST_F(LevelCells, TheHybridsLinearRunsOnItsTensorCoreKernel) {
  SKIP_WITHOUT_CUDA();
  levels::register_level_format("cuda_levels_bsr_nm24", sparse_cuda::bsr_nm24_declaration(), "test");
  const Tensor dense = two_of_four(random_blocks(256, 192, 128, 64, 0.5, 5)).to(DType::kBF16);
  const Tensor cpu = sparse_from_mask(dense, ne(dense, 0.0), "cuda_levels_bsr_nm24");
  const Tensor w = to_device(cpu, kCuda);
  const Tensor x = random_dense({72, 192}, 6).to(DType::kBF16).to(kCuda);
  const Tensor bias = random_dense({256}, 7).to(DType::kBF16).to(kCuda);
  const Tensor direct = sparse_cuda::bsr_nm24_linear(
      x, sparse_cuda::bsr_nm24_weight(levels::level_impl(cpu, "test").tensor(), kCuda, "test"), bias);
  // Without a bias bit for bit; linear adds a bias after the product, the kernel in its write-out.
  EXPECT_TRUE(near(linear(x, w, bias), direct, DType::kBF16));
  expect_same(linear(x, w),
              sparse_cuda::bsr_nm24_linear(
                  x, sparse_cuda::bsr_nm24_weight(levels::level_impl(cpu, "test").tensor(), kCuda, "test")));
  EXPECT_TRUE(near(linear(x, w, bias), linear(x.to(Device::cpu()), cpu, bias.to(Device::cpu())), DType::kBF16));
  // Its backward has no kernel on the GPU: refused by name.
  const Tensor dy = random_dense({72, 256}, 8).to(DType::kBF16).to(kCuda);
  EXPECT_TRUE(testing::throws_with(
      [&] { matmul(dy, w); },
      {"matmul: format 'cuda_levels_bsr_nm24'", "on cuda:0 has no CUDA kernel",
       "the BSR-of-2:4 kernel runs only its linear forward", "the generic kernels run on the CPU"}));
}

TEST_F(LevelCells, OtherDeclarationsAreRefusedByName) {
  SKIP_WITHOUT_CUDA();
  levels::register_level_format("cuda_levels_ellpack", levels::parse_level_format("(dense, ranged)", "t"), "test");
  const Tensor dense = random_matrix({32, 48}, 0.3, 9);
  const Tensor w = to_device(sparse_from_mask(dense, ne(dense, 0.0), "cuda_levels_ellpack"), kCuda);
  // Moves, densifies (on the host) and keeps its positions; its products have no kernel.
  expect_same(w, dense);
  const Tensor x = random_dense({8, 48}, 10).to(kCuda);
  EXPECT_TRUE(testing::throws_with(
      [&] { linear(x, w); },
      {"linear: format 'cuda_levels_ellpack' on cuda:0 has no CUDA kernel: its declaration (dense(0), ranged(1)) is "
       "no built-in format's and no specialized kernel takes it (the BSR-of-2:4 linear takes blocked 128x64",
       "move the tensor there"}));
  EXPECT_TRUE(testing::throws_with(
      [&] {
        sddmm(random_dense({32, 8}, 11).to(kCuda), x, w);
      },
      {"sddmm: format 'cuda_levels_ellpack'"}));
}

}  // namespace
}  // namespace coppice

// The fused CUDA LayerNorm (tensor/cuda/layer_norm.cu) against the composite
// it replaces, which runs on the CPU: y, dx, dweight and dbias, with and
// without the affine parameters, rows narrower and wider than a warp, every
// floating dtype; repeated backward passes give the same bits.
#include <string>
#include <vector>

#include "tensor/ops.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;

Tensor on_gpu(const Tensor& t) { return t.defined() ? t.to(gpu()) : t; }
Tensor on_cpu(const Tensor& t) { return t.to(Device::cpu()); }

TEST(CudaLayerNormTest, ForwardAndBackwardMatchTheComposite) {
  COPPICE_REQUIRE_GPU();
  uint64_t seed = 3;
  for (DType dtype : floating_dtypes()) {
    const Tol tol = dtype == DType::kF32 ? Tol{1e-5, 1e-5} : math_tol(dtype);
    for (int64_t d : {1, 7, 64, 1000}) {
      for (bool affine : {false, true}) {
        const std::string what = str_cat(dtype_name(dtype), " d ", d, affine ? " affine" : "");
        const Shape shape{3, 5, d};
        const Tensor x = random(shape, dtype, seed++, -3, 3), g = random(shape, dtype, seed++);
        const Tensor w = affine ? random({d}, dtype, seed++) : Tensor(),
                     b = affine ? random({d}, dtype, seed++) : Tensor();
        expect_match(on_cpu(layer_norm(on_gpu(x), {d}, on_gpu(w), on_gpu(b))), layer_norm(x, {d}, w, b), tol.rtol * 4,
                     tol.atol * 4, "y " + what);
        const LayerNormGrads want = layer_norm_backward(x, {d}, w, g, affine, affine);
        const LayerNormGrads got = layer_norm_backward(on_gpu(x), {d}, on_gpu(w), on_gpu(g), affine, affine);
        // d = 1 rows have no spread: dx is 0 up to the rounding of g * w (which
        // the GPU may fuse into an FMA) times rstd = 1 / sqrt(eps), about 316.
        expect_match(on_cpu(got.dx), want.dx, tol.rtol * 8, tol.atol * (d == 1 ? 1000 : 8), "dx " + what);
        if (affine) {
          expect_match(on_cpu(got.dweight), want.dweight, tol.rtol * 8, tol.atol * 16, "dweight " + what);
          expect_match(on_cpu(got.dbias), want.dbias, tol.rtol * 8, tol.atol * 16, "dbias " + what);
          const LayerNormGrads again = layer_norm_backward(on_gpu(x), {d}, on_gpu(w), on_gpu(g), true, true);
          EXPECT_EQ(values(on_cpu(again.dweight)), values(on_cpu(got.dweight))) << what;
        }
      }
    }
  }
}

// More rows than one chunk of the column sums (256), so that several chunks
// are added in order.
TEST(CudaLayerNormTest, ManyRows) {
  COPPICE_REQUIRE_GPU();
  const Tensor x = random({700, 48}, DType::kF32, 9), g = random({700, 48}, DType::kF32, 10),
               w = random({48}, DType::kF32, 11);
  const LayerNormGrads want = layer_norm_backward(x, {48}, w, g, true, true);
  const LayerNormGrads got = layer_norm_backward(on_gpu(x), {48}, on_gpu(w), on_gpu(g), true, true);
  expect_match(on_cpu(got.dweight), want.dweight, 1e-4, 1e-4, "dweight");
  expect_match(on_cpu(got.dbias), want.dbias, 1e-4, 1e-4, "dbias");
  expect_match(on_cpu(got.dx), want.dx, 1e-4, 1e-4, "dx");
}

}  // namespace
}  // namespace coppice

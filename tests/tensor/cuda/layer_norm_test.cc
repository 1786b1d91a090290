// The fused CUDA LayerNorm (tensor/cuda/layer_norm.cu) against the composite
// it replaces, which runs on the CPU: y, dx, dweight and dbias, with and
// without the affine parameters, rows narrower and wider than a warp, every
// floating dtype; repeated backward passes give the same bits. The same for
// add_layer_norm and its backward (h = x + r, y = layer_norm(h); dx = dh +
// layer_norm's dx) against their CPU twins: row lengths that fill the 16-byte
// packs and the register cache, go past it, or fit no pack (the scalar
// kernels), views at an odd offset (the scalar kernels), one row, and rows
// streamed through shared memory, more of them than the grid has warps.
#include <cstdint>
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

// The streamed kernels right behind the kernel that writes their input: on
// sm_90 they are launched to overlap the kernel before them
// (tensor/cuda/grid_dependency.cuh) and must wait for it before reading. x
// (16 MB) is large enough that its producer is still writing when a kernel
// that did not wait would read it. Three rounds, each input made afresh.
TEST(CudaLayerNormTest, ReadsWhatTheKernelBeforeItWrote) {
  COPPICE_REQUIRE_GPU();
  const int64_t rows = 8192, d = 1024;
  const Tol tol = math_tol(DType::kBF16);
  const Tensor x = random({rows, d}, DType::kBF16, 20, -3, 3), g = random({rows, d}, DType::kBF16, 21),
               w = random({d}, DType::kBF16, 22), b = random({d}, DType::kBF16, 23);
  const Tensor x2 = mul(x, 2.0), g2 = mul(g, 2.0);  // exact in bf16
  const Tensor want_y = layer_norm(x2, {d}, w, b);
  const LayerNormGrads want = layer_norm_backward(x2, {d}, w, g2, false, false);
  const Tensor xg = on_gpu(x), gg = on_gpu(g), wg = on_gpu(w), bg = on_gpu(b);
  for (int round = 0; round < 3; ++round) {
    const std::string what = str_cat("round ", round);
    expect_match(on_cpu(layer_norm(mul(xg, 2.0), {d}, wg, bg)), want_y, tol.rtol * 4, tol.atol * 4, "y " + what);
    const LayerNormGrads got = layer_norm_backward(mul(xg, 2.0), {d}, wg, mul(gg, 2.0), false, false);
    expect_match(on_cpu(got.dx), want.dx, tol.rtol * 8, tol.atol * 8, "dx " + what);
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

// `t` copied to the GPU as a view one element into a larger buffer: still
// contiguous, but not 16-byte aligned, so the kernels take the scalar path.
Tensor on_gpu_misaligned(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor buffer = Tensor::empty({t.numel() + 1}, TensorOptions(t.dtype(), gpu()));
  Tensor view = buffer.narrow(0, 1, t.numel()).view(t.shape());
  view.copy_(t.to(gpu()));
  EXPECT_NE(reinterpret_cast<uintptr_t>(view.data_ptr()) % 16, 0u);
  return view;
}

// Tolerances per dtype (y and dx as the test above): f32 to 4e-5 relative,
// 16-bit to a few of their ulps, f64 to 1e-13.
Tol add_ln_tol(DType dtype) {
  switch (dtype) {
    case DType::kF32: return {4e-5, 4e-5};
    case DType::kF64: return {1e-13, 1e-13};
    default: {
      const Tol t = math_tol(dtype);
      return {t.rtol * 4, t.atol * 4};
    }
  }
}

void check_add_layer_norm(DType dtype, const Shape& shape, bool affine, bool misaligned, uint64_t seed) {
  const int64_t d = shape.back();
  const std::string what =
      str_cat(dtype_name(dtype), " ", shape_to_string(shape), affine ? " affine" : "", misaligned ? " misaligned" : "");
  const Tol tol = add_ln_tol(dtype);
  const Tensor x = random(shape, dtype, seed, -3, 3), r = random(shape, dtype, seed + 1, -1, 1);
  const Tensor dy = random(shape, dtype, seed + 2), dh = random(shape, dtype, seed + 3);
  const Tensor w = affine ? random({d}, dtype, seed + 4) : Tensor(),
               b = affine ? random({d}, dtype, seed + 5) : Tensor();
  auto dev = [&](const Tensor& t) { return misaligned ? on_gpu_misaligned(t) : on_gpu(t); };

  const AddLayerNormResult want = add_layer_norm(x, r, {d}, w, b);
  const AddLayerNormResult got = add_layer_norm(dev(x), dev(r), {d}, dev(w), dev(b));
  expect_match(on_cpu(got.h), want.h, 0, 0, "h " + what);  // add's own rounding: exact
  expect_match(on_cpu(got.y), want.y, tol.rtol, tol.atol, "y " + what);
  // y is layer_norm of the returned h, bit for bit: the same kernel reads the
  // same values (the unfused ops on the GPU give the fused results).
  expect_match(on_cpu(layer_norm(got.h, {d}, dev(w), dev(b))), on_cpu(got.y), 0, 0, "y against layer_norm(h) " + what);

  const LayerNormGrads gwant = add_layer_norm_backward(want.h, {d}, w, dh, dy, affine, affine);
  const LayerNormGrads ggot = add_layer_norm_backward(dev(want.h), {d}, dev(w), dev(dh), dev(dy), affine, affine);
  // As above: d = 1 rows have dx = dh up to rstd (about 316) times the rounding of g * w.
  const double dx_atol = tol.atol * (d == 1 ? 1000 : 2);
  expect_match(on_cpu(ggot.dx), gwant.dx, tol.rtol * 2, dx_atol, "dx " + what);
  if (affine) {
    expect_match(on_cpu(ggot.dweight), gwant.dweight, tol.rtol * 2, tol.atol * 4, "dweight " + what);
    expect_match(on_cpu(ggot.dbias), gwant.dbias, tol.rtol * 2, tol.atol * 4, "dbias " + what);
  }
  // Without dh it is layer_norm_backward's dx.
  const LayerNormGrads nodh = add_layer_norm_backward(dev(want.h), {d}, dev(w), Tensor(), dev(dy), false, false);
  expect_match(on_cpu(nodh.dx), layer_norm_backward(want.h, {d}, w, dy, false, false).dx, tol.rtol * 2, dx_atol,
               "dx without dh " + what);

  // The same bits on a second run.
  const AddLayerNormResult again = add_layer_norm(dev(x), dev(r), {d}, dev(w), dev(b));
  EXPECT_EQ(values(on_cpu(again.y)), values(on_cpu(got.y))) << what;
  const LayerNormGrads gagain = add_layer_norm_backward(dev(want.h), {d}, dev(w), dev(dh), dev(dy), affine, affine);
  EXPECT_EQ(values(on_cpu(gagain.dx)), values(on_cpu(ggot.dx))) << what;
}

// Row lengths: 1, 7, 37, 1000 fit no bf16 pack (f32: 1000 does, in 4s); 8
// and 64 fill part of the register cache; 1024 all of it for 16-bit types;
// 2048 goes past it (its second half is read again).
TEST(CudaAddLayerNormTest, MatchesTheCpuTwin) {
  COPPICE_REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType dtype : floating_dtypes()) {
    for (int64_t d : {1, 7, 8, 37, 64, 1000, 1024, 2048}) {
      for (bool affine : {false, true}) {
        check_add_layer_norm(dtype, {3, 5, d}, affine, false, seed);
        seed += 6;
      }
    }
  }
}

TEST(CudaAddLayerNormTest, MisalignedViewsTakeTheScalarPath) {
  COPPICE_REQUIRE_GPU();
  uint64_t seed = 300;
  for (DType dtype : floating_dtypes()) {
    for (int64_t d : {8, 64, 1024}) {
      check_add_layer_norm(dtype, {4, d}, true, true, seed);
      seed += 6;
    }
  }
}

TEST(CudaAddLayerNormTest, OneRowAndManyRows) {
  COPPICE_REQUIRE_GPU();
  check_add_layer_norm(DType::kBF16, {1, 1024}, true, false, 400);
  check_add_layer_norm(DType::kF16, {1, 1000}, true, false, 410);
  check_add_layer_norm(DType::kF32, {1, 1}, false, false, 420);
  // More rows than a chunk of the column sums (256) and than one block's warps.
  check_add_layer_norm(DType::kBF16, {700, 64}, true, false, 430);
  check_add_layer_norm(DType::kF32, {600, 48}, true, false, 440);
  // The GPT's rows (1024 bf16, the whole row in registers), dweight and
  // dbias summed in 33 chunks of rows, the last one short.
  check_add_layer_norm(DType::kBF16, {1030, 1024}, true, false, 450);
}

// Rows streamed through shared memory (16-bit rows of up to 1024
// values): more rows than the grid has warps, so each warp's stages are
// reused (7000 rows of 1024: 4-5 rows a warp on an H200's 132 SMs; 40000 of
// 64, with many blocks an SM), the weight and bias gradients summed in the
// dx kernel, and one of the two asked for alone.
TEST(CudaAddLayerNormTest, StreamedRowsReuseTheirStages) {
  COPPICE_REQUIRE_GPU();
  check_add_layer_norm(DType::kBF16, {7000, 1024}, true, false, 460);
  check_add_layer_norm(DType::kF16, {40000, 64}, true, false, 470);
  const Shape shape{7000, 1024};
  const Tensor x = random(shape, DType::kBF16, 480, -3, 3), g = random(shape, DType::kBF16, 481),
               w = random({1024}, DType::kBF16, 482);
  const Tol tol = add_ln_tol(DType::kBF16);
  for (bool dweight : {false, true}) {
    const LayerNormGrads want = layer_norm_backward(x, {1024}, w, g, dweight, !dweight);
    const LayerNormGrads got = layer_norm_backward(on_gpu(x), {1024}, on_gpu(w), on_gpu(g), dweight, !dweight);
    const std::string what = dweight ? "dweight alone" : "dbias alone";
    expect_match(on_cpu(got.dx), want.dx, tol.rtol * 2, tol.atol * 2, "dx, " + what);
    EXPECT_EQ(got.dweight.defined(), dweight) << what;
    EXPECT_EQ(got.dbias.defined(), !dweight) << what;
    const Tensor& param = dweight ? got.dweight : got.dbias;
    expect_match(on_cpu(param), dweight ? want.dweight : want.dbias, tol.rtol * 2, tol.atol * 4, what);
  }
}

// The streamed (d 8 and 1024) or packed (d 2048; f32: 1024 too) and the
// scalar kernels of layer_norm on one input: they differ only in the order
// of the per-lane sums.
TEST(CudaLayerNormTest, PackedAndScalarPathsAgree) {
  COPPICE_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tol tol = add_ln_tol(dtype);
    for (int64_t d : {8, 1024, 2048}) {
      const Tensor x = random({6, d}, dtype, 500 + d, -3, 3), w = random({d}, dtype, 501), b = random({d}, dtype, 502);
      const Tensor packed = on_cpu(layer_norm(on_gpu(x), {d}, on_gpu(w), on_gpu(b)));
      const Tensor scalar = on_cpu(layer_norm(on_gpu_misaligned(x), {d}, on_gpu(w), on_gpu(b)));
      expect_match(packed, scalar, tol.rtol, tol.atol, str_cat(dtype_name(dtype), " d ", d));
      expect_match(packed, layer_norm(x, {d}, w, b), tol.rtol, tol.atol, str_cat(dtype_name(dtype), " cpu d ", d));
    }
  }
}

TEST(CudaAddLayerNormTest, RejectsMismatchedOperands) {
  COPPICE_REQUIRE_GPU();
  const Tensor x = Tensor::empty({2, 8}, TensorOptions(DType::kF32, gpu()));
  expect_error(
      [&] {
        add_layer_norm(x, Tensor::empty({2, 8}, TensorOptions(DType::kF64, gpu())), {8});
      },
      "add_layer_norm: residual");
  expect_error([&] { add_layer_norm(x, Tensor::empty({2, 8}), {8}); }, "add_layer_norm");
}

}  // namespace
}  // namespace coppice

// A transformer MLP's gelu in the sparse products' write-out
// (sparse/cuda/gelu_write_out.h): linear_gelu ({gelu(z), z} from one
// kernel) and matmul_gelu_backward (gelu's gradient at z applied to g @ W),
// each in both forms (GeluForm: erf, and GPT-2's tanh approximation, whose
// composite is gelu_tanh and gelu_tanh_backward), every check below for each.
// BSR (bsr_products.h, bsr_mma.cu): against the composite on the GPU (the
// same bits where the tiles run: the kernel rounds the product to the dtype
// first, as the composite does) and against f64 on the CPU; every square
// block the mma.sync kernels take and a rectangular one (the WMMA tiles: the
// composite), f32, TF32, bf16, f16, empty block rows, a pattern with no
// blocks, token counts not a multiple of the tile or of a 16-byte run, 3-D
// inputs, the same bits on a repeat; a bad z named. 2:4 (nm_products.h):
// both tensor-core kernels against their plain product and the elementwise
// op (the same bits), rows not a multiple of 8, the frontend's choice of
// path. gelu_mlp's gradients on the GPU equal to the composite's, BSR and 2:4.
#include <functional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "gtest/gtest.h"
#include "sparse/cuda/bsr_products.h"
#include "sparse/cuda/nm_products.h"
#include "sparse/nm.h"
#include "sparse/nm_transposable.h"
#include "sparse/ops.h"
#include "sparse/route_choices.h"
#include "tensor/op_profile.h"
#include "tensor/precision.h"
#include "tensor/runtime_options.h"
#include "tests/sparse/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using sparse_cuda::bsr_kernel_takes;
using sparse_cuda::BsrKernel;

const std::vector<TileMode> kModes = {{DType::kF32, false, "f32"},
                                      {DType::kF32, true, "tf32"},
                                      {DType::kBF16, false, "bf16"},
                                      {DType::kF16, false, "f16"}};

struct Blocks {
  int64_t bh, bw;
};
// Square ones on the mma.sync kernels (the fused write-out), 16x32 on the WMMA tiles (the composite).
const std::vector<Blocks> kBlocks = {{16, 16}, {32, 32}, {64, 64}, {16, 32}};

class GeluProductsTest : public SparseCudaTest {
 protected:
  void TearDown() override {
    set_allow_tf32(false);
    SparseCudaTest::TearDown();
  }
};

// The same bits where a BSR kernel runs the product (they round once and use
// no atomics); elsewhere near (64x64 f32 blocks take the CSR route, which
// times cuSPARSE against its own kernel per shape: two calls measured a
// last-bit difference on an H200).
::testing::AssertionResult agree(const Tensor& got, const Tensor& want, const Tensor& w) {
  const bool bsr_kernel = bsr_kernel_takes(BsrKernel::kMmaSync, w) || bsr_kernel_takes(BsrKernel::kTiles, w);
  return bsr_kernel ? same_bits(got, want) : near(got, want, w.dtype());
}

bool fused_kernel_runs(const Tensor& w) { return bsr_kernel_takes(BsrKernel::kMmaSync, w); }

const GeluForm kForms[] = {GeluForm::kErf, GeluForm::kTanh};

const char* form_name(GeluForm form) { return form == GeluForm::kTanh ? "tanh" : "erf"; }

// The names the profile counts a form's composite ops by.
const char* gelu_op(GeluForm form) { return form == GeluForm::kTanh ? "gelu_tanh" : "gelu"; }
const char* gelu_grad_op(GeluForm form) { return form == GeluForm::kTanh ? "gelu_tanh_backward" : "gelu_backward"; }

struct Case {
  TileMode mode;
  Blocks blk;
  double density;
  std::string what;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const TileMode& mode : kModes) {
    for (const Blocks& blk : kBlocks) {
      for (double density : {0.0, 0.4}) {
        out.push_back({mode, blk, density, str_cat(mode.name, " blocks ", blk.bh, "x", blk.bw, " density ", density)});
      }
    }
  }
  return out;
}

// W [128, 192] of the case's blocks, type and density, block row 1 empty, on the GPU.
Tensor bsr_weight(const Case& c, uint64_t seed) {
  const Tensor dense = random_blocks(128, 192, c.blk.bh, c.blk.bw, c.density, seed, {1});
  return to_device(to_format(dense.to(c.mode.dtype), "bsr", FormatOptions::block(c.blk.bh, c.blk.bw)), kCuda);
}

// x [tokens, 192].
TEST_F(GeluProductsTest, LinearGeluIsTheCompositeInOneKernel) {
  SKIP_WITHOUT_CUDA();
  EXPECT_NE(Dispatcher::instance().find("linear_gelu", DeviceType::kCuda, {"dense", "bsr", "dense"}), nullptr);
  ScopedRuntimeOptions profiled([](RuntimeOptions& o) { o.profile = ProfileMode::kOn; });
  uint64_t seed = 1000;
  for (const Case& c : cases()) {
    set_allow_tf32(c.mode.tf32);
    const Tensor w = bsr_weight(c, seed++);
    const Tensor b = random_dense({1, 128}, seed++).reshape({128}).to(c.mode.dtype).to(kCuda);
    for (const Shape& xs : {Shape{70, 192}, Shape{3, 67, 192}, Shape{1, 192}}) {
      const std::string what = str_cat(c.what, " input ", shape_to_string(xs));
      const Tensor x = random_dense({shape_numel(xs) / 192, 192}, seed++).reshape(xs).to(c.mode.dtype).to(kCuda);
      for (bool with_bias : {true, false}) {
        for (const GeluForm form : kForms) {
          const std::string how = str_cat(what, with_bias ? " bias " : " ", form_name(form));
          const Tensor bias = with_bias ? b : Tensor();
          const int64_t gelus = op_profile_calls(gelu_op(form));
          const auto [y, z] = linear_gelu(x, w, bias, form);
          const bool fused = op_profile_calls(gelu_op(form)) == gelus;
          EXPECT_EQ(fused, fused_kernel_runs(w) && values(w).size(0) > 0) << how << ": which path ran";
          const Tensor z_want = linear(x, w, bias);
          EXPECT_TRUE(agree(z, z_want, w)) << "z, " << how;
          EXPECT_TRUE(agree(y, gelu_of_form(z_want, form), w)) << "gelu(z), " << how;
          const Tensor want = linear(host64(x), host64(to_dense(w)), with_bias ? host64(b) : Tensor());
          EXPECT_TRUE(near(z, want, c.mode.tolerance())) << "z vs the CPU, " << how;
          EXPECT_TRUE(near(y, gelu_of_form(want, form), c.mode.tolerance())) << "gelu(z) vs the CPU, " << how;
          const auto [y2, z2] = linear_gelu(x, w, bias, form);
          EXPECT_TRUE(agree(y2, y, w) && agree(z2, z, w)) << "repeat, " << how;
        }
      }
    }
  }
}

// g [tokens, 128] @ W [128, 192], then gelu's gradient at z [tokens, 192].
TEST_F(GeluProductsTest, MatmulGeluBackwardIsTheCompositeInOneKernel) {
  SKIP_WITHOUT_CUDA();
  EXPECT_NE(Dispatcher::instance().find("matmul_gelu_backward", DeviceType::kCuda, {"dense", "bsr", "dense"}), nullptr);
  ScopedRuntimeOptions profiled([](RuntimeOptions& o) { o.profile = ProfileMode::kOn; });
  uint64_t seed = 2000;
  for (const Case& c : cases()) {
    set_allow_tf32(c.mode.tf32);
    const Tensor w = bsr_weight(c, seed++);
    for (int64_t tokens : {70, 201, 1}) {
      const Tensor g = random_dense({tokens, 128}, seed++).to(c.mode.dtype).to(kCuda);
      const Tensor z = random_dense({tokens, 192}, seed++).to(c.mode.dtype).to(kCuda);
      for (const GeluForm form : kForms) {
        const std::string what = str_cat(c.what, " tokens ", tokens, " ", form_name(form));
        const int64_t passes = op_profile_calls(gelu_grad_op(form));
        const Tensor got = matmul_gelu_backward(g, w, z, form);
        const bool fused = op_profile_calls(gelu_grad_op(form)) == passes;
        EXPECT_EQ(fused, fused_kernel_runs(w) && values(w).size(0) > 0) << what << ": which path ran";
        EXPECT_TRUE(agree(got, gelu_backward_of_form(matmul(g, w), z, form), w)) << what;
        const Tensor want = gelu_backward_of_form(matmul(host64(g), host64(to_dense(w))), host64(z), form);
        EXPECT_TRUE(near(got, want, c.mode.tolerance())) << "vs the CPU, " << what;
        EXPECT_TRUE(agree(matmul_gelu_backward(g, w, z, form), got, w)) << "repeat, " << what;
      }
    }
  }
}

// A strided z and a 3-D gradient: the op makes z contiguous and keeps the shapes.
TEST_F(GeluProductsTest, MatmulGeluBackwardTakesViews) {
  SKIP_WITHOUT_CUDA();
  const Tensor dense = random_blocks(128, 192, 32, 32, 0.4, 3000);
  const Tensor w = to_device(to_format(dense.to(DType::kBF16), "bsr", FormatOptions::block(32, 32)), kCuda);
  const Tensor g = random_dense({2 * 35, 128}, 3001).reshape({2, 35, 128}).to(DType::kBF16).to(kCuda);
  const Tensor zt = random_dense({192, 70}, 3002).to(DType::kBF16).to(kCuda).t().reshape({2, 35, 192});
  for (const GeluForm form : kForms) {
    const Tensor got = matmul_gelu_backward(g, w, zt, form);
    ASSERT_EQ(got.shape(), (Shape{2, 35, 192})) << form_name(form);
    EXPECT_TRUE(same_bits(got, gelu_backward_of_form(matmul(g, w), zt, form))) << form_name(form);
  }
}

TEST_F(GeluProductsTest, BadPreActivationIsNamed) {
  SKIP_WITHOUT_CUDA();
  const Tensor dense = random_blocks(128, 192, 32, 32, 0.4, 3100);
  const Tensor w = to_device(to_format(dense.to(DType::kBF16), "bsr", FormatOptions::block(32, 32)), kCuda);
  const Tensor g = random_dense({16, 128}, 3101).to(DType::kBF16).to(kCuda);
  const Tensor z_short = random_dense({16, 191}, 3102).to(DType::kBF16).to(kCuda);
  const Tensor z_f32 = random_dense({16, 192}, 3103).to(DType::kF32).to(kCuda);
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) { return std::string(e.what()); }
    return std::string("no error");
  };
  const std::string shape = message([&] { (void)matmul_gelu_backward(g, w, z_short); });
  EXPECT_NE(shape.find("matmul_gelu_backward"), std::string::npos) << shape;
  EXPECT_NE(shape.find("[16, 192]"), std::string::npos) << shape;
  const std::string dtype = message([&] { (void)matmul_gelu_backward(g, w, z_f32); });
  EXPECT_NE(dtype.find("z has dtype"), std::string::npos) << dtype;
  const std::string inner = message([&] { (void)matmul_gelu_backward(g.narrow(1, 0, 64), w, z_f32); });
  EXPECT_NE(inner.find("out features"), std::string::npos) << inner;
  const std::string tanh_shape = message([&] { (void)matmul_gelu_backward(g, w, z_short, GeluForm::kTanh); });
  EXPECT_NE(tanh_shape.find("[16, 192]"), std::string::npos) << tanh_shape;
}

// The attribute reaches the kernels: the two forms give different bits (z
// the same), and the kernel dispatched without the attribute gives the erf
// form, with tanh = true the tanh one.
TEST_F(GeluProductsTest, TheTanhAttributeSelectsTheForm) {
  SKIP_WITHOUT_CUDA();
  const Tensor dense = random_blocks(128, 192, 32, 32, 0.4, 3200);
  const Tensor w = to_device(to_format(dense.to(DType::kBF16), "bsr", FormatOptions::block(32, 32)), kCuda);
  const Tensor x = random_dense({40, 192}, 3201).to(DType::kBF16).to(kCuda);
  const Tensor g = random_dense({40, 128}, 3202).to(DType::kBF16).to(kCuda);
  const Tensor z = random_dense({40, 192}, 3203).to(DType::kBF16).to(kCuda);
  const auto [y_erf, z_erf] = linear_gelu(x, w, Tensor(), GeluForm::kErf);
  const auto [y_tanh, z_tanh] = linear_gelu(x, w, Tensor(), GeluForm::kTanh);
  EXPECT_TRUE(same_bits(z_tanh, z_erf));
  EXPECT_FALSE(same_bits(y_tanh, y_erf));
  EXPECT_FALSE(same_bits(matmul_gelu_backward(g, w, z, GeluForm::kTanh), matmul_gelu_backward(g, w, z)));
  const std::vector<Tensor> plain = dispatch("linear_gelu", {x, w});
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_TRUE(same_bits(plain[0], y_erf));
  const std::vector<Tensor> with_tanh = dispatch("linear_gelu", {x, w}, Attrs().set("tanh", true));
  ASSERT_EQ(with_tanh.size(), 2u);
  EXPECT_TRUE(same_bits(with_tanh[0], y_tanh));
  EXPECT_TRUE(same_bits(dispatch("matmul_gelu_backward", {g, w, z}, Attrs().set("tanh", true))[0],
                        gelu_tanh_backward(matmul(g, w), z)));
}

// gelu_mlp with BSR weights on the GPU: values and every gradient equal to
// linear, gelu, linear's (each weight's on its pattern).
TEST_F(GeluProductsTest, GeluMlpGradientsMatchTheComposite) {
  SKIP_WITHOUT_CUDA();
  for (const GeluForm form : kForms) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      for (int64_t block : {32, 64}) {
        const Tensor d1 = random_blocks(256, 128, block, block, 0.4, 4000 + block, {1});
        const Tensor d2 = random_blocks(128, 256, block, block, 0.4, 4100 + block);
        const Tensor w1v = to_device(to_format(d1.to(dtype), "bsr", FormatOptions::block(block, block)), kCuda);
        const Tensor w2v = to_device(to_format(d2.to(dtype), "bsr", FormatOptions::block(block, block)), kCuda);
        const Tensor xv = random_dense({2 * 45, 128}, 4200).reshape({2, 45, 128}).to(dtype).to(kCuda);
        const Tensor b1v = random_dense({1, 256}, 4201).reshape({256}).to(dtype).to(kCuda);
        const Tensor b2v = random_dense({1, 128}, 4202).reshape({128}).to(dtype).to(kCuda);
        const Tensor g = random_dense({2 * 45, 128}, 4203).reshape({2, 45, 128}).to(dtype).to(kCuda);
        auto run = [&](bool fused) {
          Variable x(xv, true), w1(w1v, true), b1(b1v, true), w2(w2v, true), b2(b2v, true);
          Variable y =
              fused ? gelu_mlp(x, w1, b1, w2, b2, form) : linear(gelu_of_form(linear(x, w1, b1), form), w2, b2);
          y.backward(g);
          return std::vector<Tensor>{y.value(), x.grad(), values(w1.grad()), b1.grad(), values(w2.grad()), b2.grad()};
        };
        const std::vector<Tensor> fused = run(true), composite = run(false);
        for (size_t i = 0; i < fused.size(); ++i) {
          EXPECT_TRUE(same_bits(fused[i], composite[i]))
              << form_name(form) << " " << dtype_name(dtype) << " blocks " << block << " output " << i;
        }
      }
    }
  }
}

// ---- 2:4 ----

// A 2:4 weight [rows, cols] of `dtype` on the GPU, transposable (W^T 2:4 too).
Tensor nm_weight(int64_t rows, int64_t cols, DType dtype, uint64_t seed) {
  const Tensor dense = random_dense({rows, cols}, seed).to(dtype);
  return to_device(nm_compress(dense, transposable_nm_mask(dense), 2, 4), kCuda);
}

// The two tensor-core kernels (each where the device runs it).
const sparse_cuda::Nm24Kernel kNmKernels[] = {sparse_cuda::Nm24Kernel::kWgmma, sparse_cuda::Nm24Kernel::kMmaSp};

TEST_F(GeluProductsTest, Nm24GeluFormsAreTheirCompositesInOneKernel) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 5000;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t rows : {128, 100}) {
      const Tensor w = nm_weight(rows, 192, dtype, seed++);
      const Tensor b = random_dense({1, rows}, seed++).reshape({rows}).to(dtype).to(kCuda);
      for (int64_t tokens : {70, 1, 201}) {
        const Tensor x = random_dense({tokens, 192}, seed++).to(dtype).to(kCuda);
        const Tensor g = random_dense({tokens, rows}, seed++).to(dtype).to(kCuda);
        const Tensor z_in = random_dense({tokens, 192}, seed++).to(dtype).to(kCuda);
        for (const sparse_cuda::Nm24Kernel kernel : kNmKernels) {
          if (!sparse_cuda::nm24_kernel_runs(kernel, w, false)) continue;
          const std::string what = str_cat(dtype_name(dtype), " rows ", rows, " tokens ", tokens, " ",
                                           kernel == sparse_cuda::Nm24Kernel::kWgmma ? "wgmma" : "mma.sp");
          for (const GeluForm form : kForms) {
            const std::string how = str_cat(what, " ", form_name(form));
            for (bool with_bias : {true, false}) {
              const Tensor bias = with_bias ? b : Tensor();
              const auto [y, z] = sparse_cuda::nm24_linear_gelu(kernel, x, w, bias, form);
              const Tensor z_want = sparse_cuda::nm24_linear(kernel, x, w, bias, false);
              EXPECT_TRUE(same_bits(z, z_want)) << "z, " << how << (with_bias ? " bias" : "");
              EXPECT_TRUE(same_bits(y, gelu_of_form(z_want, form))) << "gelu(z), " << how << (with_bias ? " bias" : "");
              const Tensor want = linear(host64(x), host64(to_dense(w)), with_bias ? host64(b) : Tensor());
              EXPECT_TRUE(near(y, gelu_of_form(want, form), dtype)) << "vs the CPU, " << how;
            }
            if (rows % 64 != 0) continue;  // dy @ W runs on W^T, whose columns (W's rows) come in steps of 64
            if (!sparse_cuda::nm24_kernel_runs(kernel, w, true)) continue;
            const Tensor got = sparse_cuda::nm24_matmul_gelu_grad(kernel, g, w, z_in, form);
            EXPECT_TRUE(same_bits(got, gelu_backward_of_form(sparse_cuda::nm24_matmul(kernel, g, w), z_in, form)))
                << how;
            const Tensor want = gelu_backward_of_form(matmul(host64(g), host64(to_dense(w))), host64(z_in), form);
            EXPECT_TRUE(near(got, want, dtype)) << "gradient vs the CPU, " << how;
          }
        }
      }
    }
  }
}

// A 2:4 transformer MLP's products in bf16 on the GPU, from seeds seed..seed + 4:
// linear_gelu's x [rows, 192], W [128, 192] (transposable) and b [128], and
// matmul_gelu_backward's g [rows, 128] and z [rows, 192].
struct Nm24GeluOperands {
  Tensor w, x, b, g, z;
  Nm24GeluOperands(int64_t rows, uint64_t seed)
      : w(nm_weight(128, 192, DType::kBF16, seed)),
        x(random_dense({rows, 192}, seed + 1).to(DType::kBF16).to(kCuda)),
        b(random_dense({1, 128}, seed + 2).reshape({128}).to(DType::kBF16).to(kCuda)),
        g(random_dense({rows, 128}, seed + 3).to(DType::kBF16).to(kCuda)),
        z(random_dense({rows, 192}, seed + 4).to(DType::kBF16).to(kCuda)) {}

  struct Outputs {
    Tensor y, zf, gz;  // linear_gelu's {gelu(z), z}, matmul_gelu_backward's gradient
  };
  Outputs run(GeluForm form) const {
    auto [y, zf] = linear_gelu(x, w, b, form);
    return {y, zf, matmul_gelu_backward(g, w, z, form)};
  }

  // Every output within bf16's rounding of the f64 composite.
  void expect_near_f64(const Outputs& o, GeluForm form, const std::string& how) const {
    const Tensor want = linear(host64(x), host64(to_dense(w)), host64(b));
    EXPECT_TRUE(near(o.zf, want, DType::kBF16)) << how;
    EXPECT_TRUE(near(o.y, gelu_of_form(want, form), DType::kBF16)) << how;
    EXPECT_TRUE(
        near(o.gz, gelu_backward_of_form(matmul(host64(g), host64(to_dense(w))), host64(z), form), DType::kBF16))
        << how;
  }
};

// The ops take the fused 2:4 kernels under the pin nm24=sparse, the dense ops
// on the decompressed weight under nm24=dense (here, at 70 rows, the product
// and a pass), with the same values up to the products' rounding.
TEST_F(GeluProductsTest, Nm24FrontendFollowsThePin) {
  SKIP_WITHOUT_CUDA();
  EXPECT_NE(Dispatcher::instance().find("linear_gelu", DeviceType::kCuda, {"dense", "nm", "dense"}), nullptr);
  EXPECT_NE(Dispatcher::instance().find("matmul_gelu_backward", DeviceType::kCuda, {"dense", "nm", "dense"}), nullptr);
  ScopedRuntimeOptions profiled([](RuntimeOptions& o) { o.profile = ProfileMode::kOn; });
  const Nm24GeluOperands ops(70, 5100);
  for (const GeluForm form : kForms) {
    for (bool on : {true, false}) {
      ScopedRoutePins nm24(on ? "nm24=sparse" : "nm24=dense");
      const std::string how = str_cat(form_name(form), ", nm24 ", on ? "sparse" : "dense");
      const int64_t gelus = op_profile_calls(gelu_op(form)), grads = op_profile_calls(gelu_grad_op(form));
      const Nm24GeluOperands::Outputs o = ops.run(form);
      EXPECT_EQ(op_profile_calls(gelu_op(form)) == gelus, on) << "linear_gelu, " << how;
      EXPECT_EQ(op_profile_calls(gelu_grad_op(form)) == grads, on) << "matmul_gelu_backward, " << how;
      ops.expect_near_f64(o, form, how);
      // Either path: the bits of the composite on the same product.
      EXPECT_TRUE(same_bits(o.y, gelu_of_form(o.zf, form))) << "gelu(z) from z, " << how;
    }
  }
}

// Unpinned, each gelu form of a 2:4 product is timed on its own (the fused
// write-out against the dense op and its pass), recorded under nm24 with the
// form in the key, apart from the plain product's choice.
TEST_F(GeluProductsTest, Nm24GeluFormsAreTimedOnTheirOwn) {
  SKIP_WITHOUT_CUDA();
  clear_route_choices();
  const Nm24GeluOperands ops(64, 5120);
  for (const GeluForm form : kForms) ops.expect_near_f64(ops.run(form), form, form_name(form));
  int gelu_keys = 0;
  for (const RouteChoice& c : recorded_route_choices()) {
    if (c.decision == "nm24" && c.key.find("|gelu_") != std::string::npos) ++gelu_keys;
  }
  EXPECT_EQ(gelu_keys, 4);  // each form, forward and gradient
  clear_route_choices();
}

// A 2:4 weight multiplied dense (nm24=dense) under the tanh gelu, at a shape
// cuBLASLt takes (rows of whole 16-byte packs): the dense kernels' epilogues
// on the decompressed weight (profiled as linear_lt_gelu), no gelu pass,
// within the products' rounding of f64 (the epilogue applies the gelu before
// rounding, so the bits are not the composite's).
TEST_F(GeluProductsTest, Nm24DenseRouteTakesTheTanhEpilogues) {
  SKIP_WITHOUT_CUDA();
  ScopedRuntimeOptions profiled([](RuntimeOptions& o) { o.profile = ProfileMode::kOn; });
  ScopedRoutePins nm24("nm24=dense");
  const Nm24GeluOperands ops(64, 5150);
  const int64_t epilogues = op_profile_calls("linear_lt_gelu"), passes = op_profile_calls(gelu_op(GeluForm::kTanh));
  const int64_t grad_passes = op_profile_calls(gelu_grad_op(GeluForm::kTanh));
  const Nm24GeluOperands::Outputs o = ops.run(GeluForm::kTanh);
  EXPECT_EQ(op_profile_calls("linear_lt_gelu"), epilogues + 2);
  EXPECT_EQ(op_profile_calls(gelu_op(GeluForm::kTanh)), passes);
  EXPECT_EQ(op_profile_calls(gelu_grad_op(GeluForm::kTanh)), grad_passes);
  ops.expect_near_f64(o, GeluForm::kTanh, "tanh, nm24 dense");
}

// gelu_mlp with 2:4 weights on sparse tensor cores: values and gradients
// equal to linear, gelu, linear's.
TEST_F(GeluProductsTest, Nm24GeluMlpGradientsMatchTheComposite) {
  SKIP_WITHOUT_CUDA();
  ScopedRoutePins nm24("nm24=sparse");
  const Tensor w1v = nm_weight(256, 128, DType::kBF16, 5200), w2v = nm_weight(128, 256, DType::kBF16, 5201);
  const Tensor xv = random_dense({2 * 45, 128}, 5202).reshape({2, 45, 128}).to(DType::kBF16).to(kCuda);
  const Tensor b1v = random_dense({1, 256}, 5203).reshape({256}).to(DType::kBF16).to(kCuda);
  const Tensor b2v = random_dense({1, 128}, 5204).reshape({128}).to(DType::kBF16).to(kCuda);
  const Tensor g = random_dense({2 * 45, 128}, 5205).reshape({2, 45, 128}).to(DType::kBF16).to(kCuda);
  for (const GeluForm form : kForms) {
    auto run = [&](bool fused) {
      Variable x(xv, true), w1(w1v, true), b1(b1v, true), w2(w2v, true), b2(b2v, true);
      Variable y = fused ? gelu_mlp(x, w1, b1, w2, b2, form) : linear(gelu_of_form(linear(x, w1, b1), form), w2, b2);
      y.backward(g);
      return std::vector<Tensor>{y.value(), x.grad(), values(w1.grad()), b1.grad(), values(w2.grad()), b2.grad()};
    };
    const std::vector<Tensor> fused = run(true), composite = run(false);
    for (size_t i = 0; i < fused.size(); ++i) {
      EXPECT_TRUE(same_bits(fused[i], composite[i])) << form_name(form) << " output " << i;
    }
  }
}

}  // namespace
}  // namespace coppice

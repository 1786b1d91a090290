// Dense linear layers on CUDA: linear and linear_relu with a bias in the
// GEMM's epilogue (cuBLASLt, tensor/cuda/linear_lt.cc), linear_gelu and
// matmul_gelu_backward with the tanh gelu in it, and linear_weight_grad (a
// GEMM and the column sums), against the CPU's computation, on shapes
// cuBLASLt takes and ones it declines (which take the composite), the same
// bits on every run and under graph capture.
//
// Tolerances: each result is compared with the exact product of the same
// (rounded) inputs, computed on the CPU in f64, element by element within
// (3 u + (k + 4) 2^-24) * scale, where u is the unit roundoff of the dtype
// (2^-24 f32, 2^-8 bf16, 2^-11 f16), k the length of the sums and scale the
// same sum over absolute values (|x| |W|^T + |b|, |g|^T |x|, the sums of
// |g|): a 16-bit result rounded once or twice, and f32 sums of k terms.
// The GPU and the CPU composite are each held to it, and to each other
// within twice it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/op_profile.h"
#include "tensor/ops.h"
#include "tensor/precision.h"
#include "tensor/runtime_options.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using cuda_testing::gpu;
using cuda_testing::random;
using cuda_testing::values;

const std::vector<DType> kLtTypes = {DType::kF32, DType::kBF16, DType::kF16};

// TF32 off for a test (the default; gemm.cc's policy), restored after.
class NoTf32 {
 public:
  NoTf32() : previous_(allow_tf32()) { set_allow_tf32(false); }
  ~NoTf32() { set_allow_tf32(previous_); }

 private:
  bool previous_;
};

double unit_roundoff(DType t) {
  switch (t) {
    case DType::kBF16: return std::ldexp(1.0, -8);
    case DType::kF16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

// Expects `got` (any device) within rel * scale of the f64 reference `want`.
void expect_within(const Tensor& got, const Tensor& want, const Tensor& scale, double rel, const std::string& what) {
  ASSERT_EQ(shape_to_string(got.shape()), shape_to_string(want.shape())) << what;
  const std::vector<double> g = values(got), w = values(want), s = values(scale);
  int reported = 0;
  for (size_t i = 0; i < g.size() && reported < 10; ++i) {
    if (!(std::abs(g[i] - w[i]) <= rel * s[i] + 1e-30)) {
      ++reported;
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << w[i] << " within " << rel * s[i];
    }
  }
}

// expect_within the tolerance above, for a `dtype` result whose sums have `k`
// terms; `factor` widens it (2 for GPU against CPU).
void expect_close(const Tensor& got, const Tensor& want, const Tensor& scale, DType dtype, int64_t k,
                  const std::string& what, double factor = 1) {
  EXPECT_EQ(got.dtype(), dtype) << what;
  expect_within(got, want, scale,
                factor * (3 * unit_roundoff(dtype) + static_cast<double>(k + 4) * std::ldexp(1.0, -24)), what);
}

// Exactly the same values (and signs of zero), for same-bits checks.
void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(shape_to_string(a.shape()), shape_to_string(b.shape())) << what;
  const std::vector<double> x = values(a), y = values(b);
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(x[i] == y[i] && std::signbit(x[i]) == std::signbit(y[i]))) {
      ADD_FAILURE() << what << ": element " << i << " is " << x[i] << " then " << y[i];
      return;
    }
  }
}

Tensor f64(const Tensor& t) { return t.to(Device::cpu()).to(DType::kF64); }

struct Dims {
  int64_t n, in, out;
};
std::string dims_name(const Dims& d) {
  return "N " + std::to_string(d.n) + ", in " + std::to_string(d.in) + ", out " + std::to_string(d.out);
}

// Multiples of 8 and 16 (cuBLASLt's path), odd sizes, a single row, and
// dimensions of 1 (which the composite takes).
const std::vector<Dims> kDims = {{64, 128, 256}, {37, 72, 40}, {37, 70, 41}, {1, 64, 32},
                                 {5, 3, 7},      {16, 1, 8},   {8, 16, 1}};

// linear / linear_relu with a bias on the GPU and on the CPU, against the f64 product.
void check_forward(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, const std::string& what) {
  const DType dtype = x.dtype();
  const Tensor xd = f64(x), wd = f64(w), bd = f64(b);
  Tensor want = add(matmul(xd, wd.t()), bd);
  if (relu) want = coppice::relu(want);
  const Tensor scale = add(matmul(abs(xd), abs(wd).t()), abs(bd));
  const int64_t k = w.size(1);
  auto run = [&](const Device& d) {
    return relu ? linear_relu(x.to(d), w.to(d), b.to(d)) : linear(x.to(d), w.to(d), b.to(d));
  };
  const Tensor on_gpu = run(gpu()), on_cpu = run(Device::cpu());
  EXPECT_TRUE(on_gpu.device().is_cuda()) << what;
  expect_close(on_gpu, want, scale, dtype, k, what + " (GPU)");
  expect_close(on_cpu, want, scale, dtype, k, what + " (CPU)");
  expect_close(on_gpu, f64(on_cpu), scale, dtype, k, what + " (GPU against CPU)", 2);
}

TEST(LinearLtTest, ForwardMatchesTheCpu) {
  COPPICE_REQUIRE_GPU();
  NoTf32 no_tf32;
  uint64_t seed = 1;
  for (DType t : kLtTypes) {
    for (const Dims& d : kDims) {
      for (bool relu : {false, true}) {
        const Tensor x = random({d.n, d.in}, t, ++seed, -1, 1), w = random({d.out, d.in}, t, ++seed, -1, 1);
        const Tensor b = random({d.out}, t, ++seed, -1, 1);
        check_forward(x, w, b, relu, std::string(dtype_name(t)) + " " + dims_name(d) + (relu ? " relu" : ""));
      }
    }
    // Inputs of rank 3 and 1: rows of the last dimension.
    const Tensor w = random({40, 72}, t, ++seed, -1, 1), b = random({40}, t, ++seed, -1, 1);
    for (const Shape& xs : {Shape{2, 5, 72}, Shape{72}}) {
      for (bool relu : {false, true}) {
        check_forward(random(xs, t, ++seed, -1, 1), w, b, relu,
                      std::string(dtype_name(t)) + " x " + shape_to_string(xs) + (relu ? " relu" : ""));
      }
    }
  }
}

TEST(LinearLtTest, WeightGradMatchesTheCpu) {
  COPPICE_REQUIRE_GPU();
  NoTf32 no_tf32;
  uint64_t seed = 100;
  for (DType t : kLtTypes) {
    for (const Dims& d : kDims) {
      const std::string what = std::string(dtype_name(t)) + " " + dims_name(d);
      const Tensor g = random({d.n, d.out}, t, ++seed, -1, 1), x = random({d.n, d.in}, t, ++seed, -1, 1);
      const Tensor gd = f64(g), xd = f64(x);
      const Tensor want_w = matmul(gd.t(), xd), scale_w = matmul(abs(gd).t(), abs(xd));
      const Tensor want_b = sum(gd, {0}), scale_b = sum(abs(gd), {0});
      for (bool bias : {true, false}) {
        const auto [gw, gb] = linear_weight_grad(g.to(gpu()), x.to(gpu()), bias);
        const auto [cw, cb] = linear_weight_grad(g, x, bias);
        EXPECT_TRUE(gw.device().is_cuda()) << what;
        expect_close(gw, want_w, scale_w, t, d.n, what + " gw (GPU)");
        expect_close(cw, want_w, scale_w, t, d.n, what + " gw (CPU)");
        expect_close(gw, f64(cw), scale_w, t, d.n, what + " gw (GPU against CPU)", 2);
        ASSERT_EQ(gb.defined(), bias) << what;
        ASSERT_EQ(cb.defined(), bias) << what;
        if (!bias) continue;
        EXPECT_TRUE(gb.device().is_cuda()) << what;
        expect_close(gb, want_b, scale_b, t, d.n, what + " gb (GPU)");
        expect_close(cb, want_b, scale_b, t, d.n, what + " gb (CPU)");
        expect_close(gb, f64(cb), scale_b, t, d.n, what + " gb (GPU against CPU)", 2);
      }
    }
  }
}

// The point of the kernel: bf16 and f16 layers of aligned shapes run as one
// cuBLASLt call with the epilogue (counted by the op profiler: linear_lt, and
// linear_lt_gelu for the tanh gelu forms), not the composite. f32 may or may
// not (cuBLASLt's choice); it is reported. The weight gradient never does:
// its bias gradient is the column sums.
TEST(LinearLtTest, HalfTypesTakeTheEpiloguePath) {
  COPPICE_REQUIRE_GPU();
  NoTf32 no_tf32;
  ScopedRuntimeOptions profile([](RuntimeOptions& r) { r.profile = ProfileMode::kOn; });
  for (DType t : kLtTypes) {
    const std::string name(dtype_name(t));
    const Tensor x = random({64, 128}, t, 1, -1, 1).to(gpu()), w = random({256, 128}, t, 2, -1, 1).to(gpu());
    const Tensor b = random({256}, t, 3, -1, 1).to(gpu()), g = random({64, 256}, t, 4, -1, 1).to(gpu());
    const Tensor z = random({64, 128}, t, 5, -2, 2).to(gpu());
    struct Call {
      const char* what;
      const char* profiled_as;
      std::function<void()> run;
    };
    const std::vector<Call> calls = {
        {"linear", "linear_lt", [&] { (void)linear(x, w, b); }},
        {"linear_relu", "linear_lt", [&] { (void)linear_relu(x, w, b); }},
        {"tanh linear_gelu with a bias", "linear_lt_gelu", [&] { (void)linear_gelu(x, w, b, GeluForm::kTanh); }},
        {"tanh linear_gelu", "linear_lt_gelu", [&] { (void)linear_gelu(x, w, Tensor(), GeluForm::kTanh); }},
        {"tanh matmul_gelu_backward", "linear_lt_gelu", [&] { (void)matmul_gelu_backward(g, w, z, GeluForm::kTanh); }},
    };
    for (const Call& c : calls) {
      const int64_t before = op_profile_calls(c.profiled_as);
      c.run();
      const bool fused = op_profile_calls(c.profiled_as) == before + 1;
      if (t == DType::kF32) {
        std::printf("note: f32 %s %s cuBLASLt's epilogue\n", c.what, fused ? "takes" : "does not take");
      } else {
        EXPECT_TRUE(fused) << name << " " << c.what << ": cuBLASLt declined, the composite ran";
      }
    }
    const int64_t before = op_profile_calls("linear_lt");
    (void)linear_weight_grad(g, x, true);
    EXPECT_EQ(op_profile_calls("linear_lt"), before) << name << " linear_weight_grad";
  }
}

// Rows that are not a multiple of 16 bytes (an MLP's 10-way output layer)
// take the composite: cuBLASLt's epilogues run there on CUDA-core kernels,
// ten times slower than the composite's GEMM.
TEST(LinearLtTest, RowsNotOfWholePacksTakeTheComposite) {
  COPPICE_REQUIRE_GPU();
  ScopedRuntimeOptions profile([](RuntimeOptions& r) { r.profile = ProfileMode::kOn; });
  for (DType t : {DType::kBF16, DType::kF16}) {
    const Tensor x = random({64, 128}, t, 1, -1, 1).to(gpu()), w = random({10, 128}, t, 2, -1, 1).to(gpu());
    const Tensor b = random({10}, t, 3, -1, 1).to(gpu()), g = random({64, 10}, t, 4, -1, 1).to(gpu());
    const int64_t before = op_profile_calls("linear_lt");
    const Tensor y = linear(x, w, b);
    const auto [gw, gb] = linear_weight_grad(g, x, true);
    EXPECT_EQ(op_profile_calls("linear_lt"), before) << dtype_name(t) << ": a 10-wide layer took cuBLASLt";
    EXPECT_EQ(y.shape(), (Shape{64, 10}));
    EXPECT_EQ(gw.shape(), (Shape{10, 128}));
    EXPECT_EQ(gb.shape(), (Shape{10}));
  }
}

// Same bits on every call, with other shapes in between (the algorithm is
// chosen once per shape), for shapes large enough for split-K; the tanh gelu
// forms too.
TEST(LinearLtTest, SameBitsEveryRun) {
  COPPICE_REQUIRE_GPU();
  NoTf32 no_tf32;
  for (DType t : kLtTypes) {
    const std::string name(dtype_name(t));
    const Tensor x = random({4096, 256}, t, 1, -1, 1).to(gpu()), w = random({768, 256}, t, 2, -1, 1).to(gpu());
    const Tensor b = random({768}, t, 3, -1, 1).to(gpu()), g = random({4096, 768}, t, 4, -1, 1).to(gpu());
    const Tensor z = random({4096, 256}, t, 10, -2, 2).to(gpu());
    const Tensor y1 = linear(x, w, b), r1 = linear_relu(x, w, b);
    const auto [gw1, gb1] = linear_weight_grad(g, x, true);
    const auto [a1, z1] = linear_gelu(x, w, b, GeluForm::kTanh);
    const Tensor dz1 = matmul_gelu_backward(g, w, z, GeluForm::kTanh);
    (void)linear(random({37, 72}, t, 5).to(gpu()), random({40, 72}, t, 6).to(gpu()), random({40}, t, 7).to(gpu()));
    (void)linear_weight_grad(random({300, 64}, t, 8).to(gpu()), random({300, 32}, t, 9).to(gpu()), true);
    (void)linear_gelu(random({37, 72}, t, 11).to(gpu()), random({40, 72}, t, 12).to(gpu()), Tensor(), GeluForm::kTanh);
    const Tensor y2 = linear(x, w, b), r2 = linear_relu(x, w, b);
    const auto [gw2, gb2] = linear_weight_grad(g, x, true);
    const auto [a2, z2] = linear_gelu(x, w, b, GeluForm::kTanh);
    const Tensor dz2 = matmul_gelu_backward(g, w, z, GeluForm::kTanh);
    expect_same_bits(y1, y2, name + " linear");
    expect_same_bits(r1, r2, name + " linear_relu");
    expect_same_bits(gw1, gw2, name + " gw");
    expect_same_bits(gb1, gb2, name + " gb");
    expect_same_bits(a1, a2, name + " tanh linear_gelu");
    expect_same_bits(z1, z2, name + " tanh linear_gelu's z");
    expect_same_bits(dz1, dz2, name + " tanh matmul_gelu_backward");
  }
}

// Captured in a CUDA graph (workspace from the graph's pool), a replay gives
// the eager bits, and recomputes from inputs changed in place.
TEST(LinearLtTest, GraphCaptureReplaysTheEagerBits) {
  COPPICE_REQUIRE_GPU();
  NoTf32 no_tf32;
  for (DType t : kLtTypes) {
    const std::string name(dtype_name(t));
    Tensor x = random({512, 128}, t, 1, -1, 1).to(gpu());
    const Tensor w = random({256, 128}, t, 2, -1, 1).to(gpu());
    const Tensor b = random({256}, t, 3, -1, 1).to(gpu()), g = random({512, 256}, t, 4, -1, 1).to(gpu());
    const Tensor z = random({512, 128}, t, 6, -2, 2).to(gpu());
    auto eager = [&] {
      const auto [gw, gb] = linear_weight_grad(g, x, true);
      const auto [a, za] = linear_gelu(x, w, b, GeluForm::kTanh);
      return std::vector<Tensor>{
          linear(x, w, b), linear_relu(x, w, b), gw, gb, a, za, matmul_gelu_backward(g, w, z, GeluForm::kTanh)};
    };
    const std::vector<Tensor> want = eager();  // also warms the handle and the algorithm cache
    std::vector<Tensor> got;
    std::string why;
    std::unique_ptr<CapturedWork> graph = capture_work(
        gpu(), [&] { got = eager(); }, &why);
    ASSERT_NE(graph, nullptr) << name << ": " << why;
    graph->replay();
    for (size_t i = 0; i < want.size(); ++i) expect_same_bits(got[i], want[i], name + " output " + std::to_string(i));
    x.copy_(random({512, 128}, t, 5, -1, 1).to(gpu()));
    graph->replay();
    const std::vector<Tensor> again = eager();
    for (size_t i = 0; i < want.size(); ++i) {
      expect_same_bits(got[i], again[i], name + " output " + std::to_string(i) + " after a change of x");
    }
  }
}

TEST(LinearLtTest, EmptyDimensions) {
  COPPICE_REQUIRE_GPU();
  for (DType t : kLtTypes) {
    const TensorOptions on_gpu(t, gpu());
    const Tensor b = random({4}, t, 1, -1, 1);
    // No rows.
    EXPECT_EQ(linear(zeros({0, 3}, on_gpu), zeros({4, 3}, on_gpu), b.to(gpu())).shape(), (Shape{0, 4}));
    // No input features: the bias on every row (relu'd for linear_relu).
    const Tensor y = linear(zeros({2, 0}, on_gpu), zeros({4, 0}, on_gpu), b.to(gpu()));
    EXPECT_EQ(values(y), values(add(zeros({2, 4}, TensorOptions(t)), b)));
    const Tensor r = linear_relu(zeros({2, 0}, on_gpu), zeros({4, 0}, on_gpu), b.to(gpu()));
    EXPECT_EQ(values(r), values(coppice::relu(add(zeros({2, 4}, TensorOptions(t)), b))));
    // No outputs.
    EXPECT_EQ(linear(zeros({2, 3}, on_gpu), zeros({0, 3}, on_gpu), zeros({0}, on_gpu)).shape(), (Shape{2, 0}));
    // The weight gradient of no rows: zeros.
    const auto [gw, gb] = linear_weight_grad(zeros({0, 4}, on_gpu), zeros({0, 3}, on_gpu), true);
    EXPECT_EQ(values(gw), std::vector<double>(12, 0.0));
    EXPECT_EQ(values(gb), std::vector<double>(4, 0.0));
  }
}

// Operands that are not 16-byte aligned take the composite, and are right.
TEST(LinearLtTest, MisalignedOperandsTakeTheComposite) {
  COPPICE_REQUIRE_GPU();
  ScopedRuntimeOptions profile([](RuntimeOptions& r) { r.profile = ProfileMode::kOn; });
  for (DType t : {DType::kBF16, DType::kF16}) {
    const std::string name(dtype_name(t));
    // Views one element into their storage, made on the GPU (a copy there would be aligned).
    const Tensor x = random({64, 128}, t, 1, -1, 1).to(gpu()), w = random({256, 128}, t, 2, -1, 1).to(gpu());
    const Tensor b = random({257}, t, 3, -1, 1).to(gpu()).narrow(0, 1, 256);
    int64_t before = op_profile_calls("linear_lt");
    check_forward(x, w, b, false, name + " misaligned bias");
    EXPECT_EQ(op_profile_calls("linear_lt"), before) << name << ": a misaligned bias took the epilogue";
    const Tensor g = random({64 * 256 + 1}, t, 4, -1, 1).to(gpu()).narrow(0, 1, 64 * 256).reshape({64, 256});
    before = op_profile_calls("linear_lt");
    const auto [gw, gb] = linear_weight_grad(g, x, true);
    EXPECT_EQ(op_profile_calls("linear_lt"), before) << name << ": a misaligned grad took the epilogue";
    const Tensor gc = g.to(Device::cpu()), xc = x.to(Device::cpu());
    const auto [cw, cb] = linear_weight_grad(gc, xc, true);
    expect_close(gw, f64(cw), matmul(abs(f64(gc)).t(), abs(f64(xc))), t, 64, name + " misaligned g: gw", 2);
    expect_close(gb, f64(cb), sum(abs(f64(gc)), {0}), t, 64, name + " misaligned g: gb", 2);
  }
}

// f64 is the composite, bit for bit.
TEST(LinearLtTest, F64IsTheComposite) {
  COPPICE_REQUIRE_GPU();
  const Tensor x = random({37, 72}, DType::kF64, 1).to(gpu()), w = random({40, 72}, DType::kF64, 2).to(gpu());
  const Tensor b = random({40}, DType::kF64, 3).to(gpu()), g = random({37, 40}, DType::kF64, 4).to(gpu());
  expect_same_bits(linear(x, w, b), add(matmul(x, w.t()), b), "f64 linear");
  expect_same_bits(linear_relu(x, w, b), coppice::relu(add(matmul(x, w.t()), b)), "f64 linear_relu");
  const auto [gw, gb] = linear_weight_grad(g, x, true);
  expect_same_bits(gw, matmul(g.t(), x), "f64 gw");
  expect_same_bits(gb, sum(g, {0}), "f64 gb");
}

// With TF32 allowed, f32 stays within TF32's precision (10-bit mantissas).
TEST(LinearLtTest, Tf32WhenAllowed) {
  COPPICE_REQUIRE_GPU();
  const bool previous = allow_tf32();
  set_allow_tf32(true);
  const Tensor x = random({64, 128}, DType::kF32, 1, -1, 1), w = random({256, 128}, DType::kF32, 2, -1, 1);
  const Tensor b = random({256}, DType::kF32, 3, -1, 1);
  const Tensor y = linear(x.to(gpu()), w.to(gpu()), b.to(gpu()));
  set_allow_tf32(previous);
  const Tensor want = add(matmul(f64(x), f64(w).t()), f64(b));
  const Tensor scale = add(matmul(abs(f64(x)), abs(f64(w)).t()), abs(f64(b)));
  // Inputs cut to TF32's 10-bit mantissas (2^-10 relative each, rounded or
  // truncated), two per product, and f32 sums.
  EXPECT_EQ(y.dtype(), DType::kF32);
  expect_within(y, want, scale, 4 * std::ldexp(1.0, -10), "f32 with TF32");
}

// The tanh gelu forms (linear_gelu and matmul_gelu_backward with
// GeluForm::kTanh) against f64: z within the linear's tolerance; gelu_tanh(z)
// and the gradient within gelu's slope (at most 1.13) times the product's
// tolerance (the linear's: the composite rounds the product, and the bias sum,
// before the gelu; the epilogue does not), two roundings of the result, and 2^-10 |z| (or |g W| (1 + |z|)) for the
// epilogue's tanh, whose own error cuBLASLt does not document. The GPU and the CPU (the composite) are held to the same
// bound; the largest error seen, as a share of the bound, is printed.
struct GeluCheck {
  double worst = 0;  // the largest |got - want| / bound seen
  std::string worst_what;
  void expect(const Tensor& got, const Tensor& want, const Tensor& bound, const std::string& what) {
    ASSERT_EQ(shape_to_string(got.shape()), shape_to_string(want.shape())) << what;
    const std::vector<double> g = values(got), w = values(want), b = values(bound);
    int reported = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const double err = std::abs(g[i] - w[i]);
      if (err / (b[i] + 1e-30) > worst) worst = err / (b[i] + 1e-30), worst_what = what;
      if (!(err <= b[i] + 1e-30) && reported++ < 10) {
        ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << w[i] << " within " << b[i];
      }
    }
  }
};

Tensor scaled(const Tensor& t, double s) { return mul(t, s); }

TEST(LinearLtTest, TanhGeluEpiloguesMatchF64) {
  COPPICE_REQUIRE_GPU();
  NoTf32 no_tf32;
  uint64_t seed = 300;
  GeluCheck check;
  for (DType t : kLtTypes) {
    const double u = unit_roundoff(t), f32 = std::ldexp(1.0, -24), tanh_err = std::ldexp(1.0, -10);
    for (const Dims& d : kDims) {
      for (bool with_bias : {true, false}) {
        const std::string what = std::string(dtype_name(t)) + " " + dims_name(d) + (with_bias ? " bias" : "");
        const Tensor x = random({d.n, d.in}, t, ++seed, -2, 2), w = random({d.out, d.in}, t, ++seed, -1, 1);
        const Tensor b = with_bias ? random({d.out}, t, ++seed, -1, 1) : Tensor();
        const Tensor xd = f64(x), wd = f64(w);
        Tensor want_z = matmul(xd, wd.t()), scale_z = matmul(abs(xd), abs(wd).t());
        if (with_bias) want_z = add(want_z, f64(b)), scale_z = add(scale_z, abs(f64(b)));
        const Tensor want_y = gelu_tanh(want_z);
        const Tensor z_err = scaled(scale_z, 3 * u + static_cast<double>(d.in + 4) * f32);  // z's own tolerance
        const Tensor bound_y = add(add(scaled(z_err, 1.13), scaled(abs(want_y), 2 * u)), scaled(abs(want_z), tanh_err));
        for (const Device& dev : {gpu(), Device::cpu()}) {
          const std::string where = what + (dev.is_cuda() ? " (GPU)" : " (CPU)");
          const auto [y, z] = linear_gelu(x.to(dev), w.to(dev), with_bias ? b.to(dev) : Tensor(), GeluForm::kTanh);
          EXPECT_EQ(y.device().type, dev.type) << where;
          expect_close(z, want_z, scale_z, t, d.in, where + " z");
          check.expect(y, want_y, bound_y, where + " y");
        }
        // The gradient at z of a layer [in -> out] whose input was gelu_tanh(z):
        // g [N, out] @ w [out, in], z [N, in] (z rounded to t, as stored).
        const Tensor g = random({d.n, d.out}, t, ++seed, -1, 1), z = random({d.n, d.in}, t, ++seed, -3, 3);
        const Tensor gd = f64(g), zd = f64(z);
        const Tensor want_gw = matmul(gd, wd), scale_gw = matmul(abs(gd), abs(wd));
        const Tensor want = gelu_tanh_backward(want_gw, zd);
        const Tensor gw_err = scaled(scale_gw, 3 * u + static_cast<double>(d.out + 4) * f32);
        const Tensor bound = add(add(scaled(gw_err, 1.13), scaled(abs(want), 2 * u)),
                                 scaled(mul(abs(want_gw), add(abs(zd), 1.0)), tanh_err));
        for (const Device& dev : {gpu(), Device::cpu()}) {
          const Tensor dz = matmul_gelu_backward(g.to(dev), w.to(dev), z.to(dev), GeluForm::kTanh);
          EXPECT_EQ(dz.device().type, dev.type) << what;
          check.expect(dz, want, bound, what + (dev.is_cuda() ? " dz (GPU)" : " dz (CPU)"));
        }
      }
    }
  }
  std::printf("note: the tanh gelu forms' largest error is %.3f of the bound (%s)\n", check.worst,
              check.worst_what.c_str());
}

// The erf form on the GPU is the composite, bit for bit (cuBLASLt's GELU
// epilogues are tanh only): linear (the bias epilogue) then gelu; matmul then
// gelu_backward.
TEST(LinearLtTest, ErfGeluIsTheComposite) {
  COPPICE_REQUIRE_GPU();
  ScopedRuntimeOptions profile([](RuntimeOptions& r) { r.profile = ProfileMode::kOn; });
  for (DType t : kLtTypes) {
    const std::string name(dtype_name(t));
    const Tensor x = random({64, 128}, t, 1, -1, 1).to(gpu()), w = random({256, 128}, t, 2, -1, 1).to(gpu());
    const Tensor b = random({256}, t, 3, -1, 1).to(gpu()), g = random({64, 128}, t, 4, -1, 1).to(gpu());
    const Tensor zb = random({64, 128}, t, 5, -2, 2).to(gpu()), w2 = random({128, 128}, t, 6, -1, 1).to(gpu());
    const int64_t before = op_profile_calls("linear_lt_gelu");
    const auto [y, z] = linear_gelu(x, w, b);
    const Tensor want_z = linear(x, w, b);
    expect_same_bits(z, want_z, name + " z");
    expect_same_bits(y, gelu(want_z), name + " y");
    expect_same_bits(matmul_gelu_backward(g, w2, zb), gelu_backward(matmul(g, w2), zb), name + " dz");
    EXPECT_EQ(op_profile_calls("linear_lt_gelu"), before) << name << ": the erf form took a tanh epilogue";
  }
}

// Tanh gelu forms that cuBLASLt does not take (rows not of whole 16-byte
// packs) or that have misaligned operands take the composite, and are right
// (TanhGeluEpiloguesMatchF64 holds the odd shapes to the same bound).
TEST(LinearLtTest, TanhGeluDeclinedShapesTakeTheComposite) {
  COPPICE_REQUIRE_GPU();
  ScopedRuntimeOptions profile([](RuntimeOptions& r) { r.profile = ProfileMode::kOn; });
  for (DType t : {DType::kBF16, DType::kF16}) {
    const std::string name(dtype_name(t));
    const Tensor x = random({64, 128}, t, 1, -1, 1).to(gpu()), w = random({256, 128}, t, 2, -1, 1).to(gpu());
    const Tensor g = random({64, 256}, t, 4, -1, 1).to(gpu());
    // 41 outputs: rows not of whole packs; a misaligned z.
    const int64_t before = op_profile_calls("linear_lt_gelu");
    (void)linear_gelu(x, random({41, 128}, t, 6).to(gpu()), random({41}, t, 7).to(gpu()), GeluForm::kTanh);
    const Tensor z_off = random({64 * 128 + 1}, t, 8).to(gpu()).narrow(0, 1, 64 * 128).reshape({64, 128});
    const Tensor dz = matmul_gelu_backward(g, w, z_off, GeluForm::kTanh);
    EXPECT_EQ(op_profile_calls("linear_lt_gelu"), before) << name << ": a declined shape took the epilogue";
    expect_same_bits(dz, gelu_tanh_backward(matmul(g, w), z_off), name + " misaligned z");
  }
}

TEST(LinearLtTest, Errors) {
  COPPICE_REQUIRE_GPU();
  const TensorOptions on_gpu(DType::kBF16, gpu());
  EXPECT_ERROR_NAMING(linear_weight_grad(zeros({4, 3}, on_gpu), zeros({5, 2}, on_gpu), true),
                      "linear_weight_grad: expected grad [N, out] and input [N, in] with one N");
  EXPECT_ERROR_NAMING(linear_weight_grad(zeros({4, 3}, on_gpu), zeros({4, 2}), true),
                      "linear_weight_grad: operands are on different devices");
  EXPECT_ERROR_NAMING(
      linear(zeros({2, 3}, on_gpu), zeros({4, 3}, on_gpu), zeros({4}, TensorOptions(DType::kF32, gpu()))),
      "linear: bias has dtype f32, expected bf16");
  EXPECT_ERROR_NAMING(
      matmul_gelu_backward(zeros({4, 3}, on_gpu), zeros({3, 5}, on_gpu), zeros({4, 6}, on_gpu), GeluForm::kTanh),
      "matmul_gelu_backward: z must have the product's shape [4, 5], got [4, 6]");
  EXPECT_ERROR_NAMING(linear_gelu(zeros({2, 3}, on_gpu), zeros({4, 5}, on_gpu), Tensor(), GeluForm::kTanh),
                      "linear_gelu: input's last dimension (3) differs from weight's in features");
}

}  // namespace
}  // namespace coppice

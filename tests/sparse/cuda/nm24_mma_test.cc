// The 2:4 hardware path on CUDA (sparse/cuda/nm_products.h) against its CPU
// twins: the metadata words and the transposed pack bit for bit
// (pack_nm24, pack_nm24_transposed), the 2:4 selection exactly (nm_compress on
// the host, ties and NaN included), and the products x @ W^T (with bias and
// relu) and dy @ W (through W^T, transposable patterns) against the CPU
// product that reads the same metadata, on the device's best kernel and, on
// a Hopper GPU, on mma.sp too (both kernels are built for it), to the bf16/f16 tolerance of
// cuda_test_util.h (rtol 2e-2: inputs are 16-bit, sums f32, rounded once).
// Shapes are chosen to leave partial tiles on both sides (rows of W or x not
// multiples of 128, rows of W not multiples of 8), and products repeat bit
// for bit.
#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/cuda/nm_products.h"
#include "sparse/nm.h"
#include "sparse/nm_metadata.h"
#include "sparse/nm_transposable.h"
#include "sparse/ops.h"
#include "sparse/route_choices.h"
#include "tensor/ops.h"
#include "tensor/runtime_options.h"
#include "tests/sparse/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using sparse_cuda::nm24_device_pack;
using sparse_cuda::nm24_device_pack_transposed;
using sparse_cuda::nm24_kernel_runs;
using sparse_cuda::nm24_takes;
using sparse_cuda::nm24_transposable;
using sparse_cuda::Nm24Kernel;

const char* kernel_name(Nm24Kernel kernel) { return kernel == Nm24Kernel::kWgmma ? "wgmma" : "mma.sp"; }

// The best kernel the device has for the product (sparse wgmma on Hopper), as the planner takes it.
Nm24Kernel best_kernel(const Tensor& w, bool transposed) {
  return nm24_kernel_runs(Nm24Kernel::kWgmma, w, transposed) ? Nm24Kernel::kWgmma : Nm24Kernel::kMmaSp;
}

const std::vector<DType> kHalf = {DType::kBF16, DType::kF16};

// A 2:4 weight [rows, cols] of `dtype` on the GPU: magnitude-selected, or
// transposable (both W and W^T 2:4).
Tensor weight(int64_t rows, int64_t cols, DType dtype, uint64_t seed, bool transposable) {
  const Tensor dense = random_dense({rows, cols}, seed).to(dtype);
  const Tensor w = transposable ? nm_compress(dense, transposable_nm_mask(dense), 2, 4) : nm_compress(dense);
  return to_device(w, kCuda);
}

std::vector<uint8_t> bytes(const Tensor& t) { return t.to(Device::cpu()).to_vector<uint8_t>(); }

// The same values (compared in f64 on the host, no tolerance).
bool same(const Tensor& a, const Tensor& b) { return allclose(host64(a), host64(b), 0.0, 0.0); }

// The products run on the tensor-core kernels whatever they measure against
// the dense route (the pin nm24=sparse), except where a test says.
class Nm24MmaTest : public SparseCudaTest {
 protected:
  ScopedRoutePins on_{"nm24=sparse"};
};

TEST_F(Nm24MmaTest, TakesTwoOfFourIn16BitsWithColsOf64) {
  SKIP_WITHOUT_CUDA();
  EXPECT_TRUE(nm24_takes(weight(8, 128, DType::kBF16, 1, false)));
  EXPECT_TRUE(nm24_takes(weight(8, 64, DType::kF16, 1, false)));
  EXPECT_FALSE(nm24_takes(weight(8, 96, DType::kBF16, 1, false)));  // 96 is not a multiple of 64
  EXPECT_FALSE(nm24_takes(weight(8, 128, DType::kF32, 1, false)));
  EXPECT_FALSE(nm24_takes(to_device(nm_compress(random_dense({8, 128}, 1).to(DType::kBF16), 2, 8), kCuda)));
  // dy @ W needs rows of 64 and a transposable pattern; a magnitude-selected
  // one almost never is.
  EXPECT_TRUE(nm24_transposable(weight(128, 64, DType::kBF16, 2, true)));
  EXPECT_FALSE(nm24_transposable(weight(128, 64, DType::kBF16, 2, false)));
  EXPECT_FALSE(nm24_transposable(weight(96, 64, DType::kBF16, 2, true)));
}

TEST_F(Nm24MmaTest, MetadataAndTransposedPackMatchTheCpuTwinBitForBit) {
  SKIP_WITHOUT_CUDA();
  for (DType dtype : kHalf) {
    const Tensor w = weight(192, 128, dtype, 3, true);
    const Tensor host = to_device(w, Device::cpu());
    const Nm24Packed cpu = pack_nm24(host), gpu = nm24_device_pack(w);
    EXPECT_EQ(bytes(gpu.metadata), bytes(cpu.metadata));
    const Nm24Packed cpu_t = pack_nm24_transposed(host), gpu_t = nm24_device_pack_transposed(w);
    EXPECT_EQ(bytes(gpu_t.metadata), bytes(cpu_t.metadata)) << dtype_name(dtype);
    EXPECT_TRUE(same(gpu_t.values, cpu_t.values)) << dtype_name(dtype);
  }
}

TEST_F(Nm24MmaTest, SelectionOnTheDeviceMatchesTheHost) {
  SKIP_WITHOUT_CUDA();
  Tensor dense = random_dense({33, 64}, 5);
  std::vector<double> v = dense.to_vector<double>();
  // Ties (equal and opposite magnitudes), zeros, infinities and NaN.
  for (int j = 0; j < 4; ++j) v[static_cast<size_t>(j)] = 1.5;
  v[4] = -2.0, v[5] = 2.0, v[6] = 2.0, v[7] = -2.0;
  v[8] = 0.0, v[9] = 0.0, v[10] = 0.0, v[11] = 0.0;
  v[12] = std::numeric_limits<double>::infinity(), v[13] = std::nan(""), v[14] = 1.0, v[15] = -1e30;
  dense = from_vector(v, {33, 64});
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tensor host = nm_compress(dense.to(dtype));
    const Tensor gpu = nm_compress(to_device(dense.to(dtype), kCuda));
    EXPECT_EQ(bytes(nm_impl(gpu, "test").indices()), bytes(nm_impl(host, "test").indices())) << dtype_name(dtype);
    const Tensor hv = values(host).to(DType::kF64), gv = values(gpu).to(Device::cpu()).to(DType::kF64);
    const std::vector<double> h = hv.to_vector<double>(), g = gv.to_vector<double>();
    for (size_t i = 0; i < h.size(); ++i) {
      EXPECT_TRUE(h[i] == g[i] || (std::isnan(h[i]) && std::isnan(g[i]))) << dtype_name(dtype) << " slot " << i;
    }
  }
}

// The transposable 2:4 mask on the device is the host's, bit for bit:
// random weights, a tile of zeros (every pattern ties), NaN, infinities and
// equal magnitudes, in every floating dtype.
TEST_F(Nm24MmaTest, TransposableMaskOnTheDeviceMatchesTheHost) {
  SKIP_WITHOUT_CUDA();
  Tensor dense = random_dense({64, 128}, 21);
  std::vector<double> v = dense.to_vector<double>();
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 4; ++j) v[static_cast<size_t>(r * 128 + j)] = 0.0;  // tile (0, 0): all zero
  v[4] = std::nan(""), v[128 + 5] = std::numeric_limits<double>::infinity(), v[256 + 6] = -1.5, v[384 + 7] = 1.5;
  for (int j = 8; j < 12; ++j) v[static_cast<size_t>(j)] = 2.0;  // equal magnitudes in a row
  v[128 + 8] = -2.0;
  dense = from_vector(v, {64, 128});
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    const Tensor w = dense.to(dtype);
    const Tensor host = transposable_nm_mask(w);
    const Tensor gpu = transposable_nm_mask(to_device(w, kCuda));
    EXPECT_TRUE(gpu.device().is_cuda());
    EXPECT_EQ(gpu.to(Device::cpu()).to(DType::kU8).to_vector<uint8_t>(), host.to(DType::kU8).to_vector<uint8_t>())
        << dtype_name(dtype);
  }
}

// nm_compress with a mask on the device is the host's: the kept entries,
// explicit zeros where a group keeps fewer than two, and the same error where
// one keeps more.
TEST_F(Nm24MmaTest, MaskedCompressionOnTheDeviceMatchesTheHost) {
  SKIP_WITHOUT_CUDA();
  const Tensor dense = random_dense({32, 64}, 31);
  std::vector<double> keep = transposable_nm_mask(dense).to(DType::kF64).to_vector<double>();
  keep[0] = keep[1] = keep[2] = keep[3] = 0.0;       // group 0 keeps none: zeros at 0 and 1
  keep[4] = 1.0, keep[5] = keep[6] = keep[7] = 0.0;  // group 1 keeps one
  const Tensor mask = ne(from_vector(keep, {32, 64}), 0.0);
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    const Tensor host = nm_compress(dense.to(dtype), mask, 2, 4);
    const Tensor gpu = nm_compress(to_device(dense.to(dtype), kCuda), to_device(mask, kCuda), 2, 4);
    EXPECT_EQ(bytes(nm_impl(gpu, "test").indices()), bytes(nm_impl(host, "test").indices())) << dtype_name(dtype);
    EXPECT_TRUE(same(values(gpu), values(host))) << dtype_name(dtype);
  }
  std::vector<double> three = keep;
  three[4 * 9] = three[4 * 9 + 1] = three[4 * 9 + 2] = 1.0;  // group 9 keeps three
  const Tensor bad = to_device(ne(from_vector(three, {32, 64}), 0.0), kCuda);
  try {
    nm_compress(to_device(dense, kCuda), bad, 2, 4);
    ADD_FAILURE() << "a group keeping three of four was accepted";
  } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("group 9 of row 0"), std::string::npos) << e.what(); }
}

// x @ W^T (+ bias) (relu) against the CPU product of the same 16-bit values.
TEST_F(Nm24MmaTest, LinearMatchesTheCpuTwin) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t batch, out, in;
  };
  uint64_t seed = 10;
  for (DType dtype : kHalf) {
    for (const Case& c : {Case{200, 192, 320}, Case{64, 100, 64}, Case{300, 256, 128}, Case{1, 8, 64}}) {
      const Tensor w = weight(c.out, c.in, dtype, ++seed, false);
      const Tensor x = random_dense({c.batch, c.in}, ++seed).to(dtype);
      const Tensor b = random_dense({c.out}, ++seed).to(dtype);
      const Tensor xg = to_device(x, kCuda), bg = to_device(b, kCuda);
      const Tensor wh = to_device(w, Device::cpu());
      EXPECT_TRUE(near(linear(xg, w), linear(x, wh), dtype)) << dtype_name(dtype) << " " << c.batch << "x" << c.out;
      EXPECT_TRUE(near(linear(xg, w, bg), linear(x, wh, b), dtype));
      EXPECT_TRUE(near(linear_relu(xg, w, bg), linear_relu(x, wh, b), dtype));
      EXPECT_TRUE(
          near(sparse_cuda::nm24_linear(best_kernel(w, false), xg, w, Tensor(), true), relu(linear(x, wh)), dtype));
      // The same bits on every run.
      EXPECT_TRUE(same(linear(xg, w, bg), linear(xg, w, bg)));
    }
  }
}

// Both tensor-core kernels where both run (sparse wgmma is Hopper's; mma.sp
// runs everywhere), on shapes that leave partial tiles of either kernel
// (wgmma: 256 rows of W by 128 of x, steps of 64 columns), against the CPU.
TEST_F(Nm24MmaTest, EachKernelMatchesTheCpuTwin) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t batch, out, in;
  };
  uint64_t seed = 50;
  for (DType dtype : kHalf) {
    for (const Case& c : {Case{300, 320, 192}, Case{129, 512, 64}, Case{1, 64, 448}}) {
      const Tensor w = weight(c.out, c.in, dtype, ++seed, true);
      const Tensor x = random_dense({c.batch, c.in}, ++seed).to(dtype);
      const Tensor dy = random_dense({c.batch, c.out}, ++seed).to(dtype);
      const Tensor b = random_dense({c.out}, ++seed).to(dtype);
      const Tensor wh = to_device(w, Device::cpu());
      const Tensor xg = to_device(x, kCuda), dyg = to_device(dy, kCuda), bg = to_device(b, kCuda);
      for (Nm24Kernel kernel : {Nm24Kernel::kWgmma, Nm24Kernel::kMmaSp}) {
        const std::string what =
            str_cat(kernel_name(kernel), " ", dtype_name(dtype), " ", c.batch, "x", c.out, "x", c.in);
        if (nm24_kernel_runs(kernel, w, false)) {
          EXPECT_TRUE(near(sparse_cuda::nm24_linear(kernel, xg, w, bg, true), linear_relu(x, wh, b), dtype)) << what;
        }
        if (nm24_kernel_runs(kernel, w, true)) {
          EXPECT_TRUE(near(sparse_cuda::nm24_matmul(kernel, dyg, w), matmul(dy, wh), dtype)) << what;
        }
      }
    }
  }
}

// The fused relu keeps a NaN (tensor's relu does): a NaN bias makes its
// output feature NaN on every row, on both kernels, where fmaxf(v, 0) once
// turned it into 0 and hid the step from the non-finite checks.
TEST_F(Nm24MmaTest, FusedReluKeepsNaN) {
  SKIP_WITHOUT_CUDA();
  const Tensor w = weight(128, 192, DType::kBF16, 600, false);
  const Tensor x = to_device(random_dense({70, 192}, 601).to(DType::kBF16), kCuda);
  std::vector<double> bias(128, 0.25);
  bias[3] = std::numeric_limits<double>::quiet_NaN();
  const Tensor b = to_device(from_vector(bias, {128}).to(DType::kBF16), kCuda);
  for (Nm24Kernel kernel : {Nm24Kernel::kWgmma, Nm24Kernel::kMmaSp}) {
    if (!nm24_kernel_runs(kernel, w, false)) continue;
    const char* name = kernel_name(kernel);
    const std::vector<double> y = host64(sparse_cuda::nm24_linear(kernel, x, w, b, /*relu=*/true)).to_vector<double>();
    int64_t nans = 0, nans_at_3 = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      nans += std::isnan(y[i]);
      nans_at_3 += std::isnan(y[i]) && i % 128 == 3;
    }
    EXPECT_EQ(nans_at_3, 70) << name;
    EXPECT_EQ(nans, 70) << name;
  }
}

// dy @ W through W^T on the tensor cores (transposable), and the dense way
// (not transposable): both match the CPU.
TEST_F(Nm24MmaTest, DxMatchesTheCpuTwin) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 100;
  for (DType dtype : kHalf) {
    for (bool transposable : {true, false}) {
      const Tensor w = weight(192, 320, dtype, ++seed, transposable);
      EXPECT_EQ(nm24_transposable(w), transposable);
      const Tensor dy = random_dense({130, 192}, ++seed).to(dtype);
      const Tensor got = matmul(to_device(dy, kCuda), w);
      EXPECT_TRUE(near(got, matmul(dy, to_device(w, Device::cpu())), dtype)) << dtype_name(dtype);
      if (transposable) {
        EXPECT_TRUE(near(sparse_cuda::nm24_matmul(best_kernel(w, true), to_device(dy, kCuda), w),
                         matmul(dy, to_device(w, Device::cpu())), dtype));
      }
    }
  }
}

// Every mode gives the product: the kernels, the dense route, and the faster
// of the two by measurement (twice: measured, then remembered).
TEST_F(Nm24MmaTest, EveryModeMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  const Tensor w = weight(128, 256, DType::kBF16, 300, true);
  const Tensor x = random_dense({96, 256}, 301).to(DType::kBF16), dy = random_dense({96, 128}, 302).to(DType::kBF16);
  const Tensor wh = to_device(w, Device::cpu());
  for (const char* mode : {"auto", "sparse", "mma_sp", "dense"}) {
    ScopedRoutePins set(str_cat("nm24=", mode));
    for (int run = 0; run < 2; ++run) {
      EXPECT_TRUE(near(linear(to_device(x, kCuda), w), linear(x, wh), DType::kBF16)) << mode;
      EXPECT_TRUE(near(matmul(to_device(dy, kCuda), w), matmul(dy, wh), DType::kBF16)) << mode;
    }
  }
}

// The dense form the other products multiply, built on the device in one
// kernel, for any n:m and floating dtype.
TEST_F(Nm24MmaTest, DenseFormOnTheDeviceMatchesTheHost) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 400;
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    for (auto [n, m] : {std::pair<int64_t, int64_t>{2, 4}, {1, 4}, {3, 8}}) {
      const Tensor w = nm_compress(random_dense({24, 32}, ++seed).to(dtype), n, m);
      EXPECT_TRUE(same(sparse_cuda::nm_dense(to_device(w, kCuda)), to_dense(w))) << n << ":" << m;
    }
  }
}

// dW = dy^T x at W's positions (the dense product gathered by the group
// indices), for 2:4 and other n:m.
TEST_F(Nm24MmaTest, SddmmGathersAtThePattern) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 200;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (auto [n, m] : {std::pair<int64_t, int64_t>{2, 4}, {1, 4}, {2, 8}}) {
      const Tensor pattern = nm_compress(random_dense({96, 64}, ++seed).to(dtype), n, m);
      const Tensor a = random_dense({96, 40}, ++seed).to(dtype), b = random_dense({40, 64}, ++seed).to(dtype);
      const Tensor got = sddmm(to_device(a, kCuda), to_device(b, kCuda), to_device(pattern, kCuda));
      const Tensor want = sddmm(a, b, pattern);
      EXPECT_TRUE(near(values(got), values(want), dtype)) << n << ":" << m << " " << dtype_name(dtype);
    }
  }
}

}  // namespace
}  // namespace coppice

// CPU parity of gemm (cuBLAS on the GPU, OpenBLAS on the CPU).
#include <algorithm>
#include <cmath>

#include "tensor/ops.h"
#include "tensor/precision.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;

Attrs trans(bool ta, bool tb) {
  Attrs a;
  a.set("trans_a", ta).set("trans_b", tb);
  return a;
}

Tol gemm_tol(DType t, int64_t k) {
  const double kk = static_cast<double>(k);
  switch (t) {
    case DType::kF32: return {1e-5, 2e-6 * kk};
    case DType::kF64: return {1e-12, 1e-14 * kk};
    default: return {1e-2, 1e-2 * (1 + kk / 64)};  // one 16-bit ulp of the output, plus order
  }
}

TEST(CudaGemmTest, ShapesTransposesAndBatchBroadcast) {
  COPPICE_REQUIRE_GPU();
  struct Case {
    int64_t ba, bb, m, k, n;
  };
  const std::vector<Case> cases = {{1, 1, 1, 1, 1},   {1, 1, 17, 33, 9}, {3, 3, 8, 5, 7},
                                   {4, 1, 6, 64, 10}, {1, 5, 12, 7, 3},  {2, 2, 65, 130, 67}};
  for (DType t : floating_dtypes()) {
    for (const Case& c : cases) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          Tensor a = random(ta ? Shape{c.ba, c.k, c.m} : Shape{c.ba, c.m, c.k}, t, 51, -1, 1);
          Tensor b = random(tb ? Shape{c.bb, c.n, c.k} : Shape{c.bb, c.k, c.n}, t, 52, -1, 1);
          const Tol tol = gemm_tol(t, c.k);
          expect_parity("gemm", {a, b}, trans(ta, tb), tol.rtol, tol.atol,
                        str_cat(dtype_name(t), " ba=", c.ba, " bb=", c.bb, " m=", c.m, " k=", c.k, " n=", c.n,
                                " ta=", ta, " tb=", tb));
        }
      }
    }
  }
}

// The largest error of an f32 GEMM on the GPU against the f64 product.
double worst_f32_error(const Tensor& a, const Tensor& b) {
  const Tensor want = dispatch("gemm", {a.to(DType::kF64), b.to(DType::kF64)}, trans(false, false))[0];
  const Tensor got = dispatch("gemm", to_gpu({a, b}), trans(false, false))[0];
  const std::vector<double> g = values(got), w = values(want);
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - w[i]));
  return worst;
}

// allow_tf32 (tensor/precision.h) switches f32 GEMMs to TF32 tensor cores:
// errors grow from f32's (~1e-5 here) to TF32's (~1e-3 here: 10-bit
// mantissas, k = 512 products of values in [-1, 1]), and switching it off
// again restores plain f32.
TEST(CudaGemmTest, Tf32OnlyWhenAllowed) {
  COPPICE_REQUIRE_GPU();
  const Tensor a = random({1, 256, 512}, DType::kF32, 61, -1, 1), b = random({1, 512, 256}, DType::kF32, 62, -1, 1);
  ASSERT_FALSE(allow_tf32());
  const double f32_error = worst_f32_error(a, b);
  set_allow_tf32(true);
  const double tf32_error = worst_f32_error(a, b);
  set_allow_tf32(false);
  EXPECT_LT(f32_error, 1e-4);
  EXPECT_GT(tf32_error, 1e-4) << "TF32 was not used";
  EXPECT_LT(tf32_error, 5e-2);
  EXPECT_EQ(worst_f32_error(a, b), f32_error);
}

TEST(CudaGemmTest, EmptyAndZeroInnerDimension) {
  COPPICE_REQUIRE_GPU();
  for (DType t : floating_dtypes()) {
    expect_parity("gemm", {random({2, 3, 0}, t, 53), random({2, 0, 4}, t, 54)}, trans(false, false), 0, 0, "k = 0");
    expect_parity("gemm", {random({2, 0, 5}, t, 55), random({2, 5, 4}, t, 56)}, trans(false, false), 0, 0, "m = 0");
    expect_parity("gemm", {random({0, 3, 5}, t, 57), random({1, 5, 4}, t, 58)}, trans(false, false), 0, 0, "batch 0");
  }
}

// With a third input the product is written into it (a slice of a larger
// buffer: a data-parallel bucket, through linear_weight_grad's gw_out) and
// returned as it: the same bits as the product into a fresh tensor, the
// buffer around it untouched; on the CPU the same.
TEST(CudaGemmTest, WritesIntoAGivenOutput) {
  COPPICE_REQUIRE_GPU();
  for (DType t : floating_dtypes()) {
    for (const Device device : {Device::cpu(), gpu()}) {
      Tensor a = random({1, 64, 40}, t, 61).to(device), b = random({1, 40, 96}, t, 62).to(device);
      const Tensor fresh = dispatch("gemm", {a, b}, trans(false, false))[0];
      // The slice starts 256 bytes in, as a bucket's aligned slices do.
      const int64_t skip = 256 / static_cast<int64_t>(dtype_size(t));
      Tensor bucket = full({skip + 64 * 96 + 3}, 9.0, TensorOptions(t, device));
      Tensor out = bucket.narrow(0, skip, 64 * 96).view({1, 64, 96});
      const Tensor got = dispatch("gemm", {a, b, out}, trans(false, false))[0];
      const std::string what = str_cat(dtype_name(t), " ", device.to_string());
      EXPECT_EQ(got.data_ptr(), out.data_ptr()) << what;
      expect_match(got, fresh, 0, 0, what);
      const std::vector<double> all = values(bucket);
      EXPECT_EQ(all[0], 9.0) << what;
      EXPECT_EQ(all[static_cast<size_t>(skip - 1)], 9.0) << what;
      EXPECT_EQ(all.back(), 9.0) << what;
    }
  }
}

TEST(CudaGemmTest, NonContiguousOperandsAndErrors) {
  COPPICE_REQUIRE_GPU();
  Tensor a = random({2, 9, 6}, DType::kF32, 59), b = random({2, 8, 9}, DType::kF32, 60);
  // a viewed as [2, 6, 9] and b as [2, 9, 8], both non-contiguous.
  expect_parity("gemm", {a, b}, trans(false, false), 1e-5, 1e-5, "transposed views",
                [](size_t, const Tensor& x) { return x.transpose(1, 2); });
  Tensor g = Tensor::empty({1, 2, 3}, TensorOptions(gpu()));
  expect_error([&] { dispatch("gemm", {g, g}, trans(false, false)); }, "inner dimensions");
  expect_error([&] { dispatch("gemm", {g.to(DType::kI32), g.to(DType::kI32)}, trans(false, true)); }, "gemm");
  Tensor h = Tensor::empty({3, 3, 2}, TensorOptions(gpu())), k = Tensor::empty({2, 2, 3}, TensorOptions(gpu()));
  expect_error([&] { dispatch("gemm", {h, k}, trans(false, false)); }, "do not broadcast");
}

}  // namespace
}  // namespace coppice

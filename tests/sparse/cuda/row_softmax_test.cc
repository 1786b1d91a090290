// CPU parity of the CUDA row softmax over CSR values (sparse/cuda/
// csr_row_softmax.cu), forward and backward, for f32, f64, bf16 and f16, on
// random CSR patterns with empty rows, one-entry rows, rows longer than 1024
// entries, and NaN / -inf values; and both ops inside a CUDA graph capture
// (no read-back, no synchronization). Every test skips without a GPU.
//
// Tolerances, per element of a row of `len` entries, relative to the CPU's
// result (eps: f32's for f32/bf16/f16, which compute in f32; f64's for f64):
//  - forward: y = e / s with e = exp(x - max) (max exact on both devices).
//    CUDA's exp is within 2 ulp of libm's, and the GPU sums each lane's
//    len/32 terms and then 5 butterfly levels in the compute type, while the
//    CPU sums in f64: positive terms, so s differs by at most (len/32 + 5)
//    eps relative; with the exps and the divisions, (len/32 + 12) eps.
//  - backward: gx = y * (g - dot). dot's error is at most (len/32 + 6) eps
//    times sum |g * y| (cancellation makes it absolute, not relative), and
//    the subtraction and product add 3 eps of |y| (|g| + |dot|).
//  - bf16/f16 round the f32 result once, so a difference in f32 can move it
//    to the neighbouring value: one ulp of the output on top (2^-7 and 2^-10
//    relative, f16 subnormals 2^-24 absolute).
// NaN must appear at the same positions.
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/ops.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tests/sparse/cuda/cuda_test_util.h"

namespace coppice {
namespace {

struct Rows {
  std::vector<int32_t> crow{0};
  std::vector<double> x;
};

constexpr double kInf = std::numeric_limits<double>::infinity();

// Rows of the given lengths with values N(0, 3^2); `special` rows hold a NaN,
// only -inf, or some -inf.
Rows make_rows(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<int32_t> lens = {0, 1, 2, 0, 7, 31, 32, 33, 64, 100, 1025, 3000, 0, 1, 257, 4097};
  std::uniform_int_distribution<int32_t> len(0, 300);
  for (int k = 0; k < 150; ++k) lens.push_back(k % 7 == 0 ? 0 : len(rng));
  Rows r;
  for (int32_t n : lens) {
    for (int32_t i = 0; i < n; ++i) r.x.push_back(normal(rng));
    r.crow.push_back(static_cast<int32_t>(r.x.size()));
  }
  // Special rows at the end: a NaN among finite values, only -inf, some -inf.
  for (double v : {1.0, std::nan(""), -2.0, 0.5, 3.0}) r.x.push_back(v);
  r.crow.push_back(static_cast<int32_t>(r.x.size()));
  for (int i = 0; i < 3; ++i) r.x.push_back(-kInf);
  r.crow.push_back(static_cast<int32_t>(r.x.size()));
  for (double v : {-kInf, 2.0, -kInf, -1.0, 0.0, -kInf, 4.0, 1.5, -kInf}) r.x.push_back(v);
  r.crow.push_back(static_cast<int32_t>(r.x.size()));
  return r;
}

double eps_for(DType d) {
  return d == DType::kF64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
}

// One ulp of the stored type relative to the value (0 where the result is
// the compute type itself), and the absolute floor of subnormals.
double output_ulp(DType d) { return d == DType::kBF16 ? 0x1p-7 : d == DType::kF16 ? 0x1p-10 : 0.0; }
double output_floor(DType d) { return d == DType::kF16 ? 0x1p-24 : 1e-300; }

std::vector<double> host(const Tensor& t) { return t.to(Device::cpu()).to(DType::kF64).to_vector<double>(); }

// Compares got with want where tol[i] bounds |got - want|; NaN must match.
::testing::AssertionResult within(const std::vector<double>& got, const std::vector<double>& want,
                                  const std::vector<double>& tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isnan(got[i])) {
      if (std::isnan(want[i]) != std::isnan(got[i])) {
        return ::testing::AssertionFailure() << "entry " << i << ": " << got[i] << " vs " << want[i];
      }
      continue;
    }
    if (!(std::abs(got[i] - want[i]) <= tol[i])) {
      return ::testing::AssertionFailure()
             << "entry " << i << ": " << got[i] << " vs " << want[i] << " (tolerance " << tol[i] << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

const std::vector<DType> kAll = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};

TEST_F(SparseCudaTest, RowSoftmaxMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  for (DType dtype : kAll) {
    const Rows r = make_rows(41);
    const Tensor crow = from_vector(r.crow);
    const Tensor x = from_vector(r.x).to(dtype);
    const Tensor want = csr_row_softmax(crow, x);
    const Tensor got = csr_row_softmax(crow.to(kCuda), x.to(kCuda));
    EXPECT_TRUE(got.device().is_cuda());
    EXPECT_EQ(got.dtype(), dtype);
    const std::vector<double> w = host(want);
    std::vector<double> tol(w.size());
    const double eps = eps_for(dtype);
    for (size_t row = 0; row + 1 < r.crow.size(); ++row) {
      const int32_t b = r.crow[row], e = r.crow[row + 1];
      for (int32_t i = b; i < e; ++i) {
        tol[i] =
            std::abs(w[i]) * ((static_cast<double>(e - b) / 32 + 12) * eps + output_ulp(dtype)) + output_floor(dtype);
      }
    }
    EXPECT_TRUE(within(host(got), w, tol)) << dtype_name(dtype);
    // The NaN row is NaN throughout, the -inf row too.
    const size_t rows = r.crow.size() - 1;
    const std::vector<double> g = host(got);
    EXPECT_TRUE(std::isnan(g[r.crow[rows - 3]]) && std::isnan(g[r.crow[rows - 2]])) << dtype_name(dtype);
    EXPECT_EQ(g[r.crow[rows - 1]], 0.0) << dtype_name(dtype);  // an -inf entry gets no weight
  }
}

TEST_F(SparseCudaTest, RowSoftmaxBackwardMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  for (DType dtype : kAll) {
    const Rows r = make_rows(42);
    const Tensor crow = from_vector(r.crow);
    const Tensor y = csr_row_softmax(crow, from_vector(r.x).to(dtype));  // NaN rows included
    std::mt19937_64 rng(43);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> gv(r.x.size());
    for (double& v : gv) v = normal(rng);
    const Tensor g = from_vector(gv).to(dtype);
    const Tensor want = csr_row_softmax_backward(crow, y, g);
    const Tensor got = csr_row_softmax_backward(crow.to(kCuda), y.to(kCuda), g.to(kCuda));
    EXPECT_TRUE(got.device().is_cuda());
    const std::vector<double> w = host(want), yh = host(y), gh = host(g);
    std::vector<double> tol(w.size());
    const double eps = eps_for(dtype);
    for (size_t row = 0; row + 1 < r.crow.size(); ++row) {
      const int32_t b = r.crow[row], e = r.crow[row + 1];
      double dot = 0.0, mag = 0.0;
      for (int32_t i = b; i < e; ++i) {
        dot += gh[i] * yh[i];
        mag += std::abs(gh[i] * yh[i]);
      }
      for (int32_t i = b; i < e; ++i) {
        tol[i] = std::abs(yh[i]) *
                     ((static_cast<double>(e - b) / 32 + 6) * eps * mag + 3 * eps * (std::abs(gh[i]) + std::abs(dot))) +
                 std::abs(w[i]) * output_ulp(dtype) + output_floor(dtype);
      }
    }
    EXPECT_TRUE(within(host(got), w, tol)) << dtype_name(dtype);
  }
}

// Neither op reads anything back or synchronizes, so both record in a CUDA
// graph, and a replay recomputes from the current values.
TEST_F(SparseCudaTest, RowSoftmaxCapturesInAGraph) {
  SKIP_WITHOUT_CUDA();
  const Rows r = make_rows(44);
  const Tensor crow = from_vector(r.crow).to(kCuda);
  Tensor x = from_vector(r.x).to(DType::kF32).to(kCuda);  // rewritten in place below
  const Tensor g = full({static_cast<int64_t>(r.x.size())}, 0.5, TensorOptions(DType::kF32, kCuda));
  (void)csr_row_softmax_backward(crow, csr_row_softmax(crow, x), g);  // warm: kernels loaded
  Tensor y, gx;
  std::string why;
  std::unique_ptr<CapturedWork> work = capture_work(
      kCuda, [&] { gx = csr_row_softmax_backward(crow, y = csr_row_softmax(crow, x), g); }, &why);
  ASSERT_NE(work, nullptr) << why;
  x.copy_(mul(x, scalar_tensor(2.0, x.options())));  // in place: the address the graph reads
  work->replay();
  const Tensor y_eager = csr_row_softmax(crow, x);
  const Tensor gx_eager = csr_row_softmax_backward(crow, y_eager, g);
  // The same kernels on the same data: bit-equal (NaN where the eager run has NaN).
  auto same = [](const Tensor& a, const Tensor& b) {
    const std::vector<double> u = host(a), v = host(b);
    for (size_t i = 0; i < u.size(); ++i) {
      if (!(u[i] == v[i] || (std::isnan(u[i]) && std::isnan(v[i])))) return false;
    }
    return u.size() == v.size();
  };
  EXPECT_TRUE(same(y, y_eager));
  EXPECT_TRUE(same(gx, gx_eager));
}

// No rows, and rows but no entries: nothing to launch, empty outputs.
TEST_F(SparseCudaTest, RowSoftmaxEmpty) {
  SKIP_WITHOUT_CUDA();
  const Tensor none = Tensor::empty({0}, TensorOptions(DType::kF32, kCuda));
  for (const std::vector<int32_t>& p : {std::vector<int32_t>{0}, std::vector<int32_t>{0, 0, 0}}) {
    const Tensor crow = from_vector(p, {static_cast<int64_t>(p.size())}).to(kCuda);
    EXPECT_EQ(csr_row_softmax(crow, none).numel(), 0);
    EXPECT_EQ(csr_row_softmax_backward(crow, none, none).numel(), 0);
  }
}

}  // namespace
}  // namespace coppice

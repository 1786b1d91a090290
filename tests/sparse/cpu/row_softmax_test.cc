// The CPU kernels of csr_row_softmax and csr_row_softmax_backward
// (sparse/cpu/row_softmax.cc) against an f64 reference written out here:
// empty rows, one-entry rows, -inf and NaN values, bf16/f16 computed in f32
// and rounded once, and the frontends' checks.
#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/ops.h"
#include "tensor/ops.h"
#include "tests/sparse/cpu/test_util.h"

namespace coppice::sparse_test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Rows: [1, 2, 3], [], [5], [-inf, 0, -inf], [1, NaN, 2], [-inf, -inf], [].
const std::vector<int32_t> kCrow = {0, 3, 3, 4, 7, 10, 12, 12};
const std::vector<double> kX = {1, 2, 3, 5, -kInf, 0, -kInf, 1, std::nan(""), 2, -kInf, -kInf};

std::vector<double> reference(const std::vector<int32_t>& crow, const std::vector<double>& x) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r + 1 < crow.size(); ++r) {
    double m = -kInf, s = 0.0;
    bool nan = false;
    for (int32_t i = crow[r]; i < crow[r + 1]; ++i) {
      nan = nan || std::isnan(x[i]);
      m = std::max(m, x[i]);
    }
    for (int32_t i = crow[r]; i < crow[r + 1]; ++i) s += std::exp(x[i] - m);
    for (int32_t i = crow[r]; i < crow[r + 1]; ++i) y[i] = nan ? std::nan("") : std::exp(x[i] - m) / s;
  }
  return y;
}

void expect_same(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "entry " << i << ": " << got[i];
    } else {
      EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "entry " << i;
    }
  }
}

TEST(CsrRowSoftmax, SpecialRowsAgainstReference) {
  const std::vector<double> want = reference(kCrow, kX);
  // The one-entry row is exactly 1, -inf entries get exactly 0, the all -inf
  // row is NaN (-inf - -inf), the NaN row NaN throughout.
  EXPECT_EQ(want[3], 1.0);
  EXPECT_EQ(want[4], 0.0);
  EXPECT_TRUE(std::isnan(want[10]) && std::isnan(want[7]));
  for (DType dtype : {DType::kF64, DType::kF32}) {
    const Tensor y = csr_row_softmax(from_vector(kCrow), from_vector(kX).to(dtype));
    EXPECT_EQ(y.dtype(), dtype);
    const std::vector<double> got = y.to(DType::kF64).to_vector<double>();
    expect_same(got, want, dtype == DType::kF64 ? 1e-15 : 1e-6);
    EXPECT_EQ(got[3], 1.0);
    EXPECT_EQ(got[4], 0.0);
    EXPECT_EQ(got[6], 0.0);
  }
}

// bf16/f16 compute in f32 and round once: exactly the f32 result, rounded.
TEST(CsrRowSoftmax, HalfTypesAreF32RoundedOnce) {
  const Tensor crow = from_vector(kCrow);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const Tensor x = from_vector(kX).to(dtype);
    const Tensor y = csr_row_softmax(crow, x);
    EXPECT_EQ(y.dtype(), dtype);
    expect_same(y.to(DType::kF64).to_vector<double>(),
                csr_row_softmax(crow, x.to(DType::kF32)).to(dtype).to(DType::kF64).to_vector<double>(), 0.0);
    const Tensor g = from_vector<double>({0.5, -1, 2, 3, 1, -1, 2, 0.25, 1, 1, 0, 0}).to(dtype);
    expect_same(csr_row_softmax_backward(crow, y, g).to(DType::kF64).to_vector<double>(),
                csr_row_softmax_backward(crow, y.to(DType::kF32), g.to(DType::kF32))
                    .to(dtype)
                    .to(DType::kF64)
                    .to_vector<double>(),
                0.0);
  }
}

TEST(CsrRowSoftmax, BackwardAgainstReference) {
  const std::vector<int32_t> crow = {0, 3, 3, 4, 6};
  const std::vector<double> x = {0.5, -1, 2, 7, 1, -3};
  const std::vector<double> g = {1, -2, 0.5, 4, -1, 3};
  const std::vector<double> y = reference(crow, x);
  std::vector<double> want(x.size());
  for (size_t r = 0; r + 1 < crow.size(); ++r) {
    double dot = 0.0;
    for (int32_t i = crow[r]; i < crow[r + 1]; ++i) dot += g[i] * y[i];
    for (int32_t i = crow[r]; i < crow[r + 1]; ++i) want[i] = y[i] * (g[i] - dot);
  }
  EXPECT_EQ(want[3], 0.0);  // a one-entry row's softmax is constant
  const Tensor gx = csr_row_softmax_backward(from_vector(crow), from_vector(y), from_vector(g));
  expect_same(gx.to_vector<double>(), want, 1e-15);
}

TEST(CsrRowSoftmax, NoRowsAndNoEntries) {
  const Tensor none = Tensor::empty({0}, TensorOptions(DType::kF32));
  for (const std::vector<int32_t>& p : {std::vector<int32_t>{0}, std::vector<int32_t>{0, 0, 0}}) {
    EXPECT_EQ(csr_row_softmax(from_vector(p, {static_cast<int64_t>(p.size())}), none).numel(), 0);
    EXPECT_EQ(csr_row_softmax_backward(from_vector(p, {static_cast<int64_t>(p.size())}), none, none).numel(), 0);
  }
}

TEST(CsrRowSoftmax, ChecksItsOperands) {
  const Tensor crow = from_vector(kCrow), x = from_vector(kX);
  EXPECT_THROWS_NAMING(csr_row_softmax(crow.to(DType::kI64), x), "i32");
  EXPECT_THROWS_NAMING(csr_row_softmax(crow, x.to(DType::kI32)), "f32, f64, bf16 or f16");
  EXPECT_THROWS_NAMING(csr_row_softmax(from_vector<int32_t>({0, 3, 2, 12}), x), "decrease");
  EXPECT_THROWS_NAMING(csr_row_softmax(from_vector<int32_t>({0, 3}), x), "nnz");
  EXPECT_THROWS_NAMING(csr_row_softmax_backward(crow, x, x.to(DType::kF32)), "one dtype");
  EXPECT_THROWS_NAMING(csr_row_softmax_backward(crow, x, x.narrow(0, 0, 4)), "one length");
}

}  // namespace
}  // namespace coppice::sparse_test

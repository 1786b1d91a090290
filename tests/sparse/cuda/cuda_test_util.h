// Shared by the sparse CUDA parity tests: the skip without a GPU, random
// matrices drawn on the host, a tolerance per dtype, a fixture that asserts no
// dense fallback ran, and one matrix in every format of sparse/.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparse/coo.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {

#define SKIP_WITHOUT_CUDA() \
  if (!coppice::cuda_available()) GTEST_SKIP() << "no CUDA device: the sparse CUDA kernels cannot run here"

inline const Device kCuda = Device::cuda(0);

// Non-zero with probability `density` (exactly at 0 and 1), values +-[0.5, 2),
// rows in `empty_rows` all zero; drawn on the host.
inline Tensor random_matrix(const Shape& shape, double density, uint64_t seed,
                            const std::vector<int64_t>& empty_rows = {}) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> keep(0.0, 1.0), mag(0.5, 2.0);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)), 0.0);
  for (double& x : v) {
    const double u = keep(rng), m = mag(rng);
    const bool neg = (rng() & 1) != 0;
    if (density >= 1.0 || u < density) x = neg ? -m : m;
  }
  for (int64_t r : empty_rows) {
    for (int64_t c = 0; c < shape[1]; ++c) v[static_cast<size_t>(r * shape[1] + c)] = 0.0;
  }
  return from_vector(v, shape, TensorOptions(DType::kF64));
}

inline Tensor random_dense(const Shape& shape, uint64_t seed) { return random_matrix(shape, 1.0, seed); }

inline double rtol_for(DType d) { return d == DType::kF64 ? 1e-10 : d == DType::kF32 ? 1e-4 : 2e-2; }

inline ::testing::AssertionResult near(const Tensor& got, const Tensor& want, DType dtype) {
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure() << "shapes " << shape_to_string(got.shape()) << " and "
                                         << shape_to_string(want.shape());
  }
  const double rtol = rtol_for(dtype), atol = rtol * 8;
  const std::vector<double> g = to_dense(got).to(Device::cpu()).to(DType::kF64).to_vector<double>();
  const std::vector<double> w = to_dense(want).to(Device::cpu()).to(DType::kF64).to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (!(std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]))) {
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Every test also asserts that no dense fallback ran.
class SparseCudaTest : public ::testing::Test {
 protected:
  void SetUp() override { Dispatcher::instance().reset_fallback_counts(); }
  void TearDown() override {
    if (cuda_available()) { EXPECT_TRUE(Dispatcher::instance().fallback_counts().empty()); }
  }
};

// An f64 [rows, cols] matrix whose [bh, bw] blocks are kept with
// probability `density` (values as random_matrix's), block rows in `empty`
// all zero; drawn on the host.
inline Tensor random_blocks(int64_t rows, int64_t cols, int64_t bh, int64_t bw, double density, uint64_t seed,
                            const std::vector<int64_t>& empty = {}) {
  std::vector<double> v = random_matrix({rows, cols}, 1.0, seed).to_vector<double>();
  const std::vector<double> k = random_matrix({rows / bh, cols / bw}, density, seed + 1, empty).to_vector<double>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      if (k[static_cast<size_t>((r / bh) * (cols / bw) + c / bw)] == 0.0) v[static_cast<size_t>(r * cols + c)] = 0.0;
    }
  }
  return from_vector(v, {rows, cols}, TensorOptions(DType::kF64));
}

// A copy in f64 on the host (the reference side of a parity check).
inline Tensor host64(const Tensor& t) { return t.to(Device::cpu()).to(DType::kF64); }

// Every element equal, as f64 on the host (NaN nowhere in what it compares):
// a fused kernel against the ops it replaces.
inline ::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure() << "shapes " << shape_to_string(got.shape()) << " and "
                                         << shape_to_string(want.shape());
  }
  const std::vector<double> g = host64(got).to_vector<double>(), w = host64(want).to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] != w[i]) return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i];
  }
  return ::testing::AssertionSuccess();
}

// How the BSR tile kernels multiply (sparse/cuda/bsr_tiles.h): a dtype, and
// for f32 whether TF32 tensor cores may (allow_tf32). TF32 keeps 10 mantissa
// bits, as f16 does: its results are checked to the 16-bit tolerance.
struct TileMode {
  DType dtype;
  bool tf32;
  const char* name;
  DType tolerance() const { return tf32 ? DType::kBF16 : dtype; }
};

inline const std::vector<double> kDensities = {0.0, 0.1, 0.5, 1.0};
inline const std::vector<DType> kDtypes = {DType::kF32, DType::kF64, DType::kBF16};

// Every group of 4 columns keeps at most its first 2 elements (2:4).
inline Tensor two_of_four(const Tensor& dense) {
  std::vector<double> v = dense.to(DType::kF64).to_vector<double>();
  const int64_t cols = dense.size(1);
  for (size_t i = 0; i < v.size(); ++i) {
    if (static_cast<int64_t>(i) % cols % 4 >= 2) v[i] = 0.0;
  }
  return from_vector(v, dense.shape(), TensorOptions(DType::kF64)).to(dense.dtype());
}

// Every format of sparse/ (uncoalesced COO included) in every direction,
// 8x8 blocks and 2:4 chosen so that each format can hold the matrix.
inline std::vector<Tensor> every_format(const Tensor& dense_in) {
  const Tensor dense = two_of_four(dense_in);
  std::vector<Tensor> out;
  for (const char* f : {"csr", "coo", "csc", "masked"}) out.push_back(to_format(dense, f));
  out.push_back(to_format(dense, "bsr", FormatOptions::block(4, 8)));
  out.push_back(to_format(dense, "blocked_ell", FormatOptions::block(8)));
  out.push_back(to_format(dense, "nm", FormatOptions::nm(2, 4)));
  // Uncoalesced COO: every entry split in two halves.
  const Tensor coo = to_format(dense, "coo");
  const Tensor idx = coo_impl(coo, "test").indices();
  const Tensor half_values = mul(values(coo), scalar_tensor(0.5, values(coo).options()));
  out.push_back(sparse_coo(cat({idx, idx}, 1), cat({half_values, half_values}), dense.shape()));
  return out;
}

}  // namespace coppice

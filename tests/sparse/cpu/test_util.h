// Helpers for the tests of the sparse CPU kernels: random matrices with a
// density and empty rows, the conversion of a dense matrix to each format
// (with block sizes and n:m that fit its shape), a tolerance check against a
// dense f64 reference, and a fixture that makes every dense fallback an error.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparse/ops.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice::sparse_test {

#define EXPECT_THROWS_NAMING(stmt, text)                                                         \
  do {                                                                                           \
    try {                                                                                        \
      stmt;                                                                                      \
      ADD_FAILURE() << "expected coppice::Error from: " #stmt;                                   \
    } catch (const Error& e) {                                                                   \
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what(); \
    }                                                                                            \
  } while (0)

inline const std::vector<std::string>& formats() {
  static const std::vector<std::string> f = {"coo", "csr", "csc", "bsr", "blocked_ell", "nm", "masked"};
  return f;
}

// Shapes: one row, non-square both ways, no rows; the last dim divides by 4 (n:m).
inline const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {{1, 8}, {12, 8}, {12, 40}, {36, 24}, {0, 8}};
  return s;
}

inline const std::vector<double>& densities() {
  static const std::vector<double> d = {0.0, 0.1, 0.5, 1.0};
  return d;
}

// f64 [rows, cols]: each element non-zero with probability `density` (all of
// them at 1), values +-[0.5, 2); every third row empty when density < 1.
inline Tensor random_matrix(const Shape& shape, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> keep(0.0, 1.0), mag(0.5, 2.0);
  const int64_t rows = shape[0], cols = shape[1];
  std::vector<double> v(static_cast<size_t>(rows * cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double u = keep(rng), m = mag(rng);
      const bool empty_row = density < 1.0 && r % 3 == 2;
      if (!empty_row && (density >= 1.0 || u < density)) v[static_cast<size_t>(r * cols + c)] = (rng() & 1) ? -m : m;
    }
  }
  return from_vector(v, shape, TensorOptions(DType::kF64));
}

// Dense f64 [rows, cols] with values uniform in [-1, 1).
inline Tensor random_dense(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = u(rng);
  return from_vector(v, shape, TensorOptions(DType::kF64));
}

// The largest of 4, 2, 1 dividing n (1 for n = 0 dividing nothing else).
inline int64_t block_for(int64_t n) { return n % 4 == 0 ? 4 : (n % 2 == 0 ? 2 : 1); }

// `dense` (2-D) in `format`, converted to `dtype`: its non-zeros, except n:m
// (2:4 keeps the two largest of every group) and the block formats (whole
// blocks, explicit zeros included). Compare against to_dense(result).
inline Tensor to_format_for_test(const Tensor& dense, const std::string& format, DType dtype = DType::kF32) {
  Tensor d = dense.to(dtype);
  const int64_t rows = dense.size(0), cols = dense.size(1);
  if (format == "nm") return nm_compress(d, 2, 4);
  FormatOptions o;
  if (format == "bsr") o = FormatOptions::block(block_for(rows) == 4 ? 2 : block_for(rows), block_for(cols));
  if (format == "blocked_ell") o = FormatOptions::block(std::min(block_for(rows), block_for(cols)));
  return sparse_from_mask(d, ne(d, 0.0), format, o);
}

// |got - want| <= atol + rtol * |want| everywhere, got converted to f64.
inline ::testing::AssertionResult near(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure() << "shapes " << shape_to_string(got.shape()) << " and "
                                         << shape_to_string(want.shape());
  }
  std::vector<double> g = to_dense(got).to_vector<double>(), w = to_dense(want).to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (!(std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i]))) {
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Tolerances for results in `dtype` of sums of `k` products of values <= 2.
inline double rtol_for(DType dtype) { return dtype == DType::kF64 ? 1e-12 : (dtype == DType::kF32 ? 1e-5 : 1e-2); }
inline double atol_for(DType dtype, int64_t k) {
  const double eps = dtype == DType::kF64 ? 1e-15 : (dtype == DType::kF32 ? 1e-6 : 1e-2);
  return eps * 8.0 * static_cast<double>(k + 1);
}

// Any dense fallback throws while a test of registered kernels runs.
class NoFallback : public ::testing::Test {
 protected:
  void SetUp() override {
    Dispatcher::instance().reset_fallback_counts();
    Dispatcher::instance().set_fallback_is_error(true);
  }
  void TearDown() override {
    Dispatcher::instance().set_fallback_is_error(false);
    EXPECT_TRUE(Dispatcher::instance().fallback_counts().empty());
  }
};

}  // namespace coppice::sparse_test

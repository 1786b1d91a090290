// Helpers shared by the tests of sparse/: random matrices with a given
// density (and empty rows), exact comparison, and the error-message check.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice::testing {

// A dense tensor whose elements are non-zero with probability `density`
// (exactly 0 and 1 at the ends), values in +-[0.5, 2); rows listed in
// `empty_rows` are all zeros. Drawn on the host, so the same on every device.
inline Tensor random_sparse(const Shape& shape, double density, uint64_t seed, DType dtype = DType::kF32,
                            const std::vector<int64_t>& empty_rows = {}) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> keep(0.0, 1.0), mag(0.5, 2.0);
  const int64_t numel = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(numel), 0.0);
  for (auto& x : v) {
    const double u = keep(rng), m = mag(rng);
    const bool neg = (rng() & 1) != 0;
    if (density >= 1.0 || u < density) x = neg ? -m : m;
  }
  const int64_t cols = (shape.empty() || shape[0] == 0) ? 0 : numel / shape[0];
  for (int64_t r : empty_rows) {
    for (int64_t c = 0; c < cols; ++c) v[static_cast<size_t>(r * cols + c)] = 0.0;
  }
  return from_vector(v, shape, TensorOptions(DType::kF64)).to(dtype);
}

// The bytes of a tensor, row-major, on the host: bit-for-bit comparison that
// tells NaN payloads, -0 and +0 apart.
inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  std::vector<uint8_t> out(static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
  if (!out.empty()) std::memcpy(out.data(), c.data_ptr(), out.size());
  return out;
}

// A host tensor `x` of `dtype` with NaN, -0, -inf and 0 among its values, and
// a bool `mask` of its shape keeping each entry with probability `keep`, none
// of the rows in `empty` and all of the rows in `full` (2-D shapes).
struct MaskedInput {
  Tensor x, mask;
};
inline MaskedInput random_masked_input(const Shape& shape, double keep, uint64_t seed, DType dtype,
                                       const std::vector<int64_t>& empty = {}, const std::vector<int64_t>& full = {}) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0), v(-2.0, 2.0);
  const int64_t n = shape_numel(shape), cols = shape[1];
  std::vector<double> x(static_cast<size_t>(n)), m(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double pick = u(rng);
    x[static_cast<size_t>(i)] = pick < 0.05   ? std::numeric_limits<double>::quiet_NaN()
                                : pick < 0.1  ? -0.0
                                : pick < 0.12 ? -std::numeric_limits<double>::infinity()
                                : pick < 0.2  ? 0.0
                                              : v(rng);
    m[static_cast<size_t>(i)] = u(rng) < keep ? 1.0 : 0.0;
  }
  for (int64_t r : empty) {
    for (int64_t c = 0; c < cols; ++c) m[static_cast<size_t>(r * cols + c)] = 0.0;
  }
  for (int64_t r : full) {
    for (int64_t c = 0; c < cols; ++c) m[static_cast<size_t>(r * cols + c)] = 1.0;
  }
  return {from_vector(x, shape, TensorOptions(DType::kF64)).to(dtype),
          ne(from_vector(m, shape, TensorOptions(DType::kF64)), 0.0)};
}

inline const DType kFloatingDtypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};

// Exactly equal: same shape and dtype, every element equal (as doubles).
inline ::testing::AssertionResult exact_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) {
    return ::testing::AssertionFailure() << "shapes " << shape_to_string(a.shape()) << " and "
                                         << shape_to_string(b.shape());
  }
  if (a.dtype() != b.dtype()) {
    return ::testing::AssertionFailure() << "dtypes " << dtype_name(a.dtype()) << " and " << dtype_name(b.dtype());
  }
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    if (!(va[i] == vb[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": " << va[i] << " vs " << vb[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Same format, shape, dtype and parts (names, dtypes, shapes, values), bit for bit.
inline ::testing::AssertionResult same_parts(const Tensor& a, const Tensor& b) {
  if (a.format() != b.format()) return ::testing::AssertionFailure() << a.format() << " vs " << b.format();
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return ::testing::AssertionFailure() << "shape or dtype";
  if (a.is_dense()) return exact_equal(a, b);
  SparseParts pa = sparse_impl(a, "same_parts").parts(), pb = sparse_impl(b, "same_parts").parts();
  if (pa.size() != pb.size()) return ::testing::AssertionFailure() << "part counts differ";
  for (size_t i = 0; i < pa.size(); ++i) {
    if (pa[i].first != pb[i].first) return ::testing::AssertionFailure() << pa[i].first << " vs " << pb[i].first;
    auto r = exact_equal(pa[i].second, pb[i].second);
    if (!r) return ::testing::AssertionFailure() << "part " << pa[i].first << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

inline Tensor i32(const std::vector<int64_t>& v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return from_vector(v, shape, TensorOptions(DType::kI32));
}
inline Tensor i64(const std::vector<int64_t>& v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return from_vector(v, shape);
}
inline Tensor f32(const std::vector<float>& v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return from_vector(v, shape);
}

}  // namespace coppice::testing

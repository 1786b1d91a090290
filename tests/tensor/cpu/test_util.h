// Helpers for the CPU kernel tests: build tensors from host values and read
// them back without going through the kernels under test.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/dispatcher.h"
#include "tensor/tensor.h"
#include "tests/util/error_matchers.h"

namespace coppice::testing {

// The value of one element, as a double.
template <typename T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

// Stores a double into an element of type T (through f32 for the 16-bit floats).
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    return T(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    return static_cast<T>(v);
  }
}

// A contiguous CPU tensor holding `values` (row-major), converted to `dtype`.
inline Tensor make(const Shape& shape, const std::vector<double>& values, DType dtype = DType::kF32) {
  Tensor t = Tensor::empty(shape, dtype);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = from_double<T>(values[i]);
  });
  return t;
}

// start, start + step, ... in `shape`.
inline Tensor iota(const Shape& shape, DType dtype = DType::kF32, double start = 0, double step = 1) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + step * static_cast<double>(i);
  return make(shape, v, dtype);
}

// Deterministic pseudo-random values in [lo, hi) (a simple LCG; not the kernels' Philox).
inline std::vector<double> noise(int64_t n, uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<double> v(static_cast<size_t>(n));
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * static_cast<double>(s >> 11) * (1.0 / 9007199254740992.0);
  }
  return v;
}

// All elements in row-major order, as doubles, read through the strides.
inline std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(t.numel()));
  if (t.numel() == 0) return out;
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* base = static_cast<const T*>(t.data_ptr());
    std::vector<int64_t> idx(static_cast<size_t>(t.dim()), 0);
    for (int64_t n = 0; n < t.numel(); ++n) {
      int64_t off = 0;
      for (int64_t d = 0; d < t.dim(); ++d) off += idx[d] * t.strides()[d];
      out.push_back(as_double(base[off]));
      for (int64_t d = t.dim() - 1; d >= 0; --d) {
        if (++idx[d] < t.shape()[d]) break;
        idx[d] = 0;
      }
    }
  });
  return out;
}

// Expects equal values (NaN equals NaN) within atol + rtol * |expected|.
inline void expect_values(const Tensor& t, const std::vector<double>& expected, double rtol = 0, double atol = 0,
                          const std::string& what = "") {
  std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " element " << i << ": got " << got[i];
      continue;
    }
    if (std::isinf(expected[i])) {
      EXPECT_EQ(got[i], expected[i]) << what << " element " << i;
      continue;
    }
    EXPECT_NEAR(got[i], expected[i], atol + rtol * std::abs(expected[i])) << what << " element " << i;
  }
}

// Runs a kernel that returns one tensor.
inline Tensor call1(std::string_view op, const std::vector<Tensor>& in, const Attrs& attrs = {}) {
  std::vector<Tensor> out = dispatch(op, in, attrs);
  EXPECT_EQ(out.size(), 1u) << op;
  return out.at(0);
}

// Expects `fn` to throw coppice::Error whose message contains `needle`
// (tests/util/error_matchers.h).
using ::coppice::testing::expect_error;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace coppice::testing

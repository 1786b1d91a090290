// Tensors from and to lists of doubles, for tests of any layer: a CPU tensor
// of any dtype holding given values, deterministic pseudo-random values, and
// a tensor's elements (any device, any strides) read back as doubles.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace coppice::testing {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The value of one element, as a double.
template <typename T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

// Stores a double into an element of type T (through f32 for the 16-bit
// floats, "!= 0" for bool).
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
    for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < t.numel(); ++i) p[i] = from_double<T>(values[i]);
  });
  return t;
}

// Deterministic pseudo-random values in [lo, hi) (an LCG, independent of the
// kernels' Philox).
inline std::vector<double> lcg_values(int64_t n, uint64_t seed, double lo, double hi) {
  std::vector<double> v(static_cast<size_t>(n));
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * static_cast<double>(s >> 11) * (1.0 / 9007199254740992.0);
  }
  return v;
}

// All elements in row-major order, as doubles, read through the strides (on
// the CPU: a tensor elsewhere is copied there first).
inline std::vector<double> values(const Tensor& t_any) {
  const Tensor t = t_any.device().is_cpu() ? t_any : t_any.to(Device::cpu());
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

}  // namespace coppice::testing

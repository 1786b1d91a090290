// Helpers for the CPU kernel tests: build tensors from host values and read
// them back without going through the kernels under test (make, values,
// kInf and kNaN: tests/util/host_values.h).
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
#include "tests/util/host_values.h"

namespace coppice::testing {

// start, start + step, ... in `shape`.
inline Tensor iota(const Shape& shape, DType dtype = DType::kF32, double start = 0, double step = 1) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + step * static_cast<double>(i);
  return make(shape, v, dtype);
}

// Deterministic pseudo-random values in [lo, hi).
inline std::vector<double> noise(int64_t n, uint64_t seed, double lo = -1, double hi = 1) {
  return lcg_values(n, seed, lo, hi);
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

}  // namespace coppice::testing

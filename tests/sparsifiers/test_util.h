// Helpers shared by the sparsifier tests.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice::testing_sparsifiers {

// The mask's entries as 0/1, row-major.
inline std::vector<int> bits(const Tensor& mask) { return mask.to_vector<int>(); }

inline int64_t count(const Tensor& mask) {
  int64_t c = 0;
  for (int b : bits(mask)) c += b;
  return c;
}

// Values uniform in +-[0.5, 2) (or, with `few_values`, from a handful of
// magnitudes so that ties are common), f32 unless told.
inline Tensor random_tensor(const Shape& shape, uint64_t seed, bool few_values = false, DType dtype = DType::kF32) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mag(0.5, 2.0);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) {
    const double m = few_values ? 0.25 * static_cast<double>(rng() % 5) : mag(rng);
    x = (rng() & 1) ? -m : m;
  }
  return from_vector(v, shape, TensorOptions(DType::kF64)).to(dtype);
}

using coppice::testing::throws_with;  // tests/util/error_matchers.h

}  // namespace coppice::testing_sparsifiers

// Helpers shared by the mask-update tests (tests/optim/*mask*, growth,
// prune, gmp).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "optim/mask_change.h"
#include "sparse/convert.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice::testing_mask {

// A `format` parameter of `shape` storing `nnz` distinct positions chosen by
// `seed`, with values uniform in +-[0.5, 2) (f32 unless told).
inline Tensor random_param(const Shape& shape, int64_t nnz, uint64_t seed, const std::string& format,
                           DType dtype = DType::kF32) {
  std::mt19937_64 rng(seed);
  const int64_t numel = shape_numel(shape);
  std::vector<int64_t> perm(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) perm[static_cast<size_t>(i)] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  perm.resize(static_cast<size_t>(nnz));
  std::sort(perm.begin(), perm.end());
  std::uniform_real_distribution<double> mag(0.5, 2.0);
  std::vector<double> v(static_cast<size_t>(numel), 0.0);
  for (int64_t p : perm) v[static_cast<size_t>(p)] = (rng() & 1) ? -mag(rng) : mag(rng);
  const Tensor dense = from_vector(v, shape, TensorOptions(DType::kF64)).to(dtype);
  return sparse_from_mask(dense, mask_from_positions(shape, perm), format);
}

inline Tensor random_dense(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = n(rng);
  return from_vector(v, shape, TensorOptions(DType::kF64)).to(DType::kF32);
}

inline std::vector<int64_t> positions(const Tensor& param) { return pattern_view(param, "test").positions; }

// Value stored at each position (by bits), for bit-for-bit comparisons.
inline std::vector<uint32_t> bits_at(const Tensor& param, const std::vector<int64_t>& pos) {
  const std::vector<float> d = to_dense(param).to_vector<float>();
  std::vector<uint32_t> out;
  for (int64_t p : pos) {
    uint32_t b;
    std::memcpy(&b, &d[static_cast<size_t>(p)], 4);
    out.push_back(b);
  }
  return out;
}

using coppice::testing::throws_with;  // tests/util/error_matchers.h

}  // namespace coppice::testing_mask

// Helpers for the CUDA parity tests: inputs built on the host, the same
// kernel run on the CPU and on cuda:0, results compared element by element.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/dispatcher.h"
#include "tensor/tensor.h"
#include "tests/util/error_matchers.h"
#include "tests/util/host_values.h"

// Skips the current test, saying why, when this machine has no usable GPU.
#define COPPICE_REQUIRE_GPU()                                                                       \
  do {                                                                                              \
    if (!::coppice::cuda_available())                                                               \
      GTEST_SKIP() << "no CUDA device: this CPU-parity test needs a GPU (run it on the lent H100)"; \
  } while (0)

namespace coppice::cuda_testing {

// Host values (tests/util/host_values.h).
using ::coppice::testing::kInf;
using ::coppice::testing::kNaN;
using ::coppice::testing::make;
using ::coppice::testing::values;

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> v = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                       DType::kI32, DType::kI64, DType::kU8,   DType::kBool};
  return v;
}
inline const std::vector<DType>& floating_dtypes() {
  static const std::vector<DType> v = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};
  return v;
}

inline Device gpu() { return Device::cuda(0); }

// Deterministic pseudo-random doubles in [lo, hi).
inline std::vector<double> noise(int64_t n, uint64_t seed, double lo = -2, double hi = 2) {
  return ::coppice::testing::lcg_values(n, seed, lo, hi);
}

// Random values that suit `dtype`: floats in [lo, hi), integers in [lo, hi)
// truncated (u8: from 0), bool 0/1.
inline Tensor random(const Shape& shape, DType dtype, uint64_t seed, double lo = -2, double hi = 2) {
  std::vector<double> v = noise(shape_numel(shape), seed, lo, hi);
  for (double& x : v) {
    if (dtype == DType::kBool) {
      x = x > (lo + hi) / 2 ? 1 : 0;
    } else if (dtype == DType::kU8) {
      x = std::floor(std::abs(x) * 20);
    } else if (!is_floating(dtype)) {
      x = std::floor(x * 20);
    }
  }
  return make(shape, v, dtype);
}

// Expects `got` (any device) to match `want` (CPU) in shape, dtype and values:
// NaN matches NaN; with rtol = atol = 0 equal values must also agree in sign
// (so -0 differs from +0); otherwise |got - want| <= atol + rtol * |want|.
inline void expect_match(const Tensor& got, const Tensor& want, double rtol = 0, double atol = 0,
                         const std::string& what = "") {
  ASSERT_EQ(shape_to_string(got.shape()), shape_to_string(want.shape())) << what;
  ASSERT_EQ(dtype_name(got.dtype()), dtype_name(want.dtype())) << what;
  std::vector<double> g = values(got), w = values(want);
  ASSERT_EQ(g.size(), w.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < g.size() && reported < 10; ++i) {
    bool ok;
    if (std::isnan(w[i]) || std::isnan(g[i])) {
      ok = std::isnan(w[i]) && std::isnan(g[i]);
    } else if (rtol == 0 && atol == 0) {
      ok = g[i] == w[i] && std::signbit(g[i]) == std::signbit(w[i]);
    } else if (std::isinf(w[i])) {
      ok = g[i] == w[i];
    } else {
      ok = std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]);
    }
    if (!ok) {
      ++reported;
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << " on the GPU, " << w[i] << " on the CPU";
    }
  }
}

// Tolerances for results computed with transcendental functions, by dtype:
// a few ulp of the compute type, or one ulp of a 16-bit output.
struct Tol {
  double rtol, atol;
};
inline Tol math_tol(DType t) {
  switch (t) {
    case DType::kF32: return {2e-6, 1e-6};
    case DType::kF64: return {1e-14, 1e-15};
    case DType::kBF16: return {1e-2, 1e-3};
    case DType::kF16: return {2e-3, 1e-4};
    default: return {0, 0};
  }
}

// The inputs as CUDA tensors (contiguous copies on cuda:0; undefined stays undefined).
inline std::vector<Tensor> to_gpu(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) out.push_back(t.defined() ? t.to(gpu()) : Tensor());
  return out;
}

// Runs `op` on CPU `inputs` and on CUDA copies of them, each input seen
// through `view` on both sides (so both see the same non-contiguous or
// broadcast layout), and compares every output.
inline void expect_parity(std::string_view op, const std::vector<Tensor>& inputs, const Attrs& attrs, double rtol,
                          double atol, const std::string& what = "",
                          const std::function<Tensor(size_t, const Tensor&)>& view = nullptr) {
  std::vector<Tensor> cpu_in = inputs, gpu_in = to_gpu(inputs);
  if (view) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      cpu_in[i] = view(i, cpu_in[i]);
      gpu_in[i] = view(i, gpu_in[i]);
    }
  }
  std::vector<Tensor> want = dispatch(op, cpu_in, attrs);
  std::vector<Tensor> got = dispatch(op, gpu_in, attrs);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i].device().is_cuda()) << what << ": output " << i << " is not on the GPU";
    expect_match(got[i], want[i], rtol, atol, std::string(op) + " " + what + " output " + std::to_string(i));
  }
}

// Expects `fn` to throw coppice::Error whose message contains `needle`
// (tests/util/error_matchers.h).
using ::coppice::testing::expect_error;

// The message of the coppice::Error `fn` throws (tests/util/error_matchers.h).
using ::coppice::testing::error_of;

}  // namespace coppice::cuda_testing

// Shared helpers for the autograd tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "autograd/autograd.h"
#include "tensor/ops.h"

namespace coppice::testing {

// A deterministic stream for test inputs.
inline Generator& test_gen() {
  static Generator gen(1234);
  return gen;
}

inline Tensor randn64(const Shape& shape) { return randn(shape, DType::kF64, test_gen()); }
// Uniform in [low, high).
inline Tensor uniform64(const Shape& shape, double low, double high) {
  return add(mul(rand(shape, DType::kF64, test_gen()), high - low), low);
}
// Standard normal values pushed at least `margin` away from `point` (for kinks).
inline Tensor randn_away(const Shape& shape, double point, double margin = 0.1) {
  Tensor x = randn64(shape);
  Tensor d = sub(x, point);
  Tensor pushed = add(d, mul(sign(d), margin));
  return add(where(eq(pushed, 0.0), full_like(pushed, margin), pushed), point);
}

inline Variable param(const Tensor& t, const char* name = "") { return Variable(t, true, name); }
inline Variable constant(const Tensor& t) { return Variable(t, false); }

}  // namespace coppice::testing

// Runs gradcheck and reports its message on failure.
#define EXPECT_GRADCHECK(fn, ...)                                                 \
  do {                                                                            \
    ::coppice::GradcheckResult gc_result = ::coppice::gradcheck(fn, __VA_ARGS__); \
    EXPECT_TRUE(gc_result.passed) << gc_result.message;                           \
  } while (0)

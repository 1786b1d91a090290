// Scalar math for float and double that the CPU loops and the CUDA kernels
// both call, so one functor (tensor/unary_ops.h) computes the same thing on
// either side: host code calls libm (std::exp, ...), device code the CUDA math
// library's IEEE-accurate forms (expf or exp, ...; no intrinsics), so results
// stay within a few ulp of each other, and sqrt and division round correctly
// on both.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "tensor/half.h"  // COPPICE_HOST_DEVICE

namespace coppice::scalar_math {

#if defined(__CUDA_ARCH__)
#define COPPICE_SCALAR_MATH_1(name, f_call, d_call)                      \
  COPPICE_HOST_DEVICE inline float name(float x) { return ::f_call(x); } \
  COPPICE_HOST_DEVICE inline double name(double x) { return ::d_call(x); }
#else
#define COPPICE_SCALAR_MATH_1(name, f_call, d_call)                       \
  COPPICE_HOST_DEVICE inline float name(float x) { return std::name(x); } \
  COPPICE_HOST_DEVICE inline double name(double x) { return std::name(x); }
#endif

COPPICE_SCALAR_MATH_1(exp, expf, exp)
COPPICE_SCALAR_MATH_1(log, logf, log)
COPPICE_SCALAR_MATH_1(log1p, log1pf, log1p)
COPPICE_SCALAR_MATH_1(sqrt, sqrtf, sqrt)
COPPICE_SCALAR_MATH_1(tanh, tanhf, tanh)
COPPICE_SCALAR_MATH_1(erf, erff, erf)
COPPICE_SCALAR_MATH_1(abs, fabsf, fabs)

#undef COPPICE_SCALAR_MATH_1

COPPICE_HOST_DEVICE inline float pow(float a, float b) {
#if defined(__CUDA_ARCH__)
  return ::powf(a, b);
#else
  return std::pow(a, b);
#endif
}
COPPICE_HOST_DEVICE inline double pow(double a, double b) {
#if defined(__CUDA_ARCH__)
  return ::pow(a, b);
#else
  return std::pow(a, b);
#endif
}
COPPICE_HOST_DEVICE inline bool isnan(float x) {
#if defined(__CUDA_ARCH__)
  return ::isnan(x);
#else
  return std::isnan(x);
#endif
}
COPPICE_HOST_DEVICE inline bool isnan(double x) {
#if defined(__CUDA_ARCH__)
  return ::isnan(x);
#else
  return std::isnan(x);
#endif
}

// GELU in its erf form, x Phi(x), and its gradient g (Phi(x) + x phi(x)):
// one definition for the elementwise kernels (gelu, gelu_backward) and the
// sparse products' write-out (sparse/cuda/gelu_write_out.cuh), so a fused
// form gives the bits of the pass it replaces.
template <typename C>
COPPICE_HOST_DEVICE inline C gelu(C x) {
  return C(0.5) * x * (C(1) + erf(x * C(0.70710678118654752440)));
}
template <typename C>
COPPICE_HOST_DEVICE inline C gelu_grad(C g, C x) {
  const C cdf = C(0.5) * (C(1) + erf(x * C(0.70710678118654752440)));
  const C pdf = exp(C(-0.5) * x * x) * C(0.39894228040143267794);
  return g * (cdf + x * pdf);
}

// GELU in the tanh approximation GPT-2 trained with (PyTorch's
// gelu(approximate='tanh'), the form of cuBLASLt's GELU epilogues):
// x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3); and its gradient g
// (1/2 (1 + t) + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2)), t = tanh(u).
// One definition for the elementwise kernels and the products' write-out, as
// above.
template <typename C>
COPPICE_HOST_DEVICE inline C gelu_tanh(C x) {
  const C u = C(0.79788456080286535588) * (x + C(0.044715) * x * x * x);
  return C(0.5) * x * (C(1) + tanh(u));
}
template <typename C>
COPPICE_HOST_DEVICE inline C gelu_tanh_grad(C g, C x) {
  const C k = C(0.79788456080286535588);
  const C t = tanh(k * (x + C(0.044715) * x * x * x));
  return g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * k * (C(1) + C(0.134145) * x * x));
}

// Clamps a whole number held in a double into T's range.
template <typename T>
COPPICE_HOST_DEVICE inline T saturate(double d) {
  constexpr T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
  if (d <= static_cast<double>(lo)) return lo;
  if (d >= static_cast<double>(hi)) return hi;
  return static_cast<T>(d);
}

// Integer arithmetic in the unsigned twin, so overflow wraps instead of being undefined.
template <typename C>
COPPICE_HOST_DEVICE inline std::make_unsigned_t<C> as_unsigned(C v) {
  return static_cast<std::make_unsigned_t<C>>(v);
}

}  // namespace coppice::scalar_math

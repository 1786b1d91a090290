// Scalar math for float and double that the CPU loops and the CUDA kernels
// both call, so one functor (tensor/unary_ops.h) computes the same thing on
// either side: host code calls libm (std::exp, ...), device code the CUDA math
// library's IEEE-accurate forms (expf or exp, ...; no intrinsics), so results
// stay within a few ulp of each other, and sqrt and division round correctly
// on both. One exception, measured and bounded below: the f32 gelu and its
// gradient, whose exp and reciprocal are the GPU's approximate instructions.
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
//
// In f64, through erf. In f32, without erf: with a = |x| and
// e = exp(-x^2/2), the lower tail is Phi(-a) = e M(a), where M(a) = t (c1 +
// c2 t + ... + c6 t^5), t = 1 / (1 + 0.28 a), is a weighted minimax fit of
// Phi(-a) / e over [0, 9] (Abramowitz and Stegun 7.1.26's form, refitted:
// Phi(-a) within 4e-8 where it is above 3e-4, within 1.3e-4 of itself
// beyond). On the GPU e and t come from the special-function unit
// (ex2.approx, rcp.approx: flushing results below 2^-126 to zero), so the
// gelu is about 15 instructions, against about 27 through erff (two
// polynomials chosen by selects); that arithmetic bounds the sparse
// products that carry the gelu in their write-out. It is also closer to
// the exact values than 1 + erff(x / sqrt 2), which loses Phi's low bits to
// cancellation for x < 0 (erff's gelu is exactly 0 below -5.5): over every
// bf16 input, rounded to bf16, 76 values differ from the correctly rounded
// gelu (through glibc's erff: 197), and 2 of 261120 gradients g gelu'(x)
// (erff's: 709); relative to |x| the error stays within 2.5e-7 (erff's:
// 9e-8). tests/tensor:gelu_math_test holds these bounds.
namespace gelu_detail {
COPPICE_HOST_DEVICE inline float exp2_ftz(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return std::exp2(x);
#endif
}
COPPICE_HOST_DEVICE inline float reciprocal(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return 1.0f / x;
#endif
}
// M(|x|) (the lower tail over e), and e = exp(-x^2/2) into *e.
COPPICE_HOST_DEVICE inline float tail_ratio(float x, float* e) {
  const float t = reciprocal(abs(x) * 0.28f + 1.0f);
  float m = -0.102189104501f;
  m = m * t + 0.375215533404f;
  m = m * t - 0.213438355861f;
  m = m * t + 0.250148408418f;
  m = m * t + 0.0748996339874f;
  m = m * t + 0.115363924504f;
  *e = exp2_ftz(x * -0.72134752044448170368f * x);  // -log2(e) / 2
  return m * t;
}
}  // namespace gelu_detail

COPPICE_HOST_DEVICE inline double gelu(double x) { return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440)); }
COPPICE_HOST_DEVICE inline float gelu(float x) {
  float e;
  const float lower = gelu_detail::tail_ratio(x, &e) * e;  // Phi(-|x|)
  return x * (x < 0.0f ? lower : 1.0f - lower);
}
COPPICE_HOST_DEVICE inline double gelu_grad(double g, double x) {
  const double cdf = 0.5 * (1.0 + erf(x * 0.70710678118654752440));
  const double pdf = exp(-0.5 * x * x) * 0.39894228040143267794;
  return g * (cdf + x * pdf);
}
// Phi(x) + x phi(x) = 1 - e (M - a / sqrt(2 pi)) for x >= 0, e (M - a /
// sqrt(2 pi)) below (phi(x) = e / sqrt(2 pi)).
COPPICE_HOST_DEVICE inline float gelu_grad(float g, float x) {
  float e;
  const float m = gelu_detail::tail_ratio(x, &e);
  const float w = e * (abs(x) * 0.39894228040143267794f - m);
  return g * (x >= 0.0f ? 1.0f + w : -w);
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

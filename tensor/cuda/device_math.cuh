// Overloads of the CUDA math functions for float and double, so functors
// templated on the compute type call the right one (expf or exp, ...). Only
// IEEE-accurate forms are used (no intrinsics): results stay within a few ulp
// of the CPU's libm, and sqrt and division round correctly.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace coppice::cuda::math {

__device__ inline float exp(float x) { return ::expf(x); }
__device__ inline double exp(double x) { return ::exp(x); }
__device__ inline float log(float x) { return ::logf(x); }
__device__ inline double log(double x) { return ::log(x); }
__device__ inline float sqrt(float x) { return ::sqrtf(x); }
__device__ inline double sqrt(double x) { return ::sqrt(x); }
__device__ inline float tanh(float x) { return ::tanhf(x); }
__device__ inline double tanh(double x) { return ::tanh(x); }
__device__ inline float erf(float x) { return ::erff(x); }
__device__ inline double erf(double x) { return ::erf(x); }
__device__ inline float pow(float a, float b) { return ::powf(a, b); }
__device__ inline double pow(double a, double b) { return ::pow(a, b); }
__device__ inline float abs(float x) { return ::fabsf(x); }
__device__ inline double abs(double x) { return ::fabs(x); }
__device__ inline bool isnan(float x) { return ::isnan(x); }
__device__ inline bool isnan(double x) { return ::isnan(x); }

// GELU in its erf form, x Phi(x), and its gradient g (Phi(x) + x phi(x)):
// one definition for the elementwise kernels (gelu, gelu_backward) and the
// BSR products' write-out (sparse/cuda/bsr_mma.cu), so a fused form gives
// the bits of the pass it replaces.
template <typename C>
__device__ inline C gelu(C x) {
  return C(0.5) * x * (C(1) + erf(x * C(0.70710678118654752440)));
}
template <typename C>
__device__ inline C gelu_grad(C g, C x) {
  const C cdf = C(0.5) * (C(1) + erf(x * C(0.70710678118654752440)));
  const C pdf = exp(C(-0.5) * x * x) * C(0.39894228040143267794);
  return g * (cdf + x * pdf);
}

// Clamps a whole number held in a double into T's range (as the CPU's saturate).
template <typename T>
__device__ inline T saturate(double d) {
  constexpr T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
  if (d <= static_cast<double>(lo)) return lo;
  if (d >= static_cast<double>(hi)) return hi;
  return static_cast<T>(d);
}

// Integer arithmetic in the unsigned twin, so overflow wraps instead of being undefined.
template <typename C>
__device__ inline std::make_unsigned_t<C> as_unsigned(C v) {
  return static_cast<std::make_unsigned_t<C>>(v);
}

}  // namespace coppice::cuda::math

// Element rules shared by the CPU kernels (mask_kernels_cpu.cc) and their CUDA
// twins (cuda/mask_kernels.cu), so that both devices pick the same entries
// bit for bit (internal; host and device code).
//
// - Order keys: unsigned integers in the order of the values, NaN (any sign
//   or payload) above +inf, -0 equal to +0. Magnitude keys are the order keys
//   of |x|. f32 (and bf16/f16, widened exactly) give u32 keys, f64 u64 keys.
// - Ties (equal keys) go to the lower index, everywhere.
// - Block scores add in f64, row-major within the block, every product and
//   sum rounded on its own (never fused into an FMA).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tensor/half.h"  // COPPICE_HOST_DEVICE

namespace coppice::sparsify_detail {

COPPICE_HOST_DEVICE inline uint32_t order_key(float v) {
  if (v != v) return 0xffffffffu;
  if (v == 0.0f) v = 0.0f;
#if defined(__CUDA_ARCH__)
  const uint32_t u = __float_as_uint(v);
#else
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

COPPICE_HOST_DEVICE inline uint64_t order_key(double v) {
  if (v != v) return ~uint64_t{0};
  if (v == 0.0) v = 0.0;
#if defined(__CUDA_ARCH__)
  const uint64_t u = static_cast<uint64_t>(__double_as_longlong(v));
#else
  uint64_t u;
  std::memcpy(&u, &v, sizeof(u));
#endif
  return (u >> 63) ? ~u : (u | (uint64_t{1} << 63));
}

// |v| without a branch (signs are random: a branch mispredicts half the time).
COPPICE_HOST_DEVICE inline float abs_of(float v) {
#if defined(__CUDA_ARCH__)
  return fabsf(v);
#else
  return std::fabs(v);
#endif
}
COPPICE_HOST_DEVICE inline double abs_of(double v) {
#if defined(__CUDA_ARCH__)
  return fabs(v);
#else
  return std::fabs(v);
#endif
}

template <typename C>
COPPICE_HOST_DEVICE inline auto key_of(C v, bool magnitude) {
  return order_key(magnitude ? abs_of(v) : v);
}

COPPICE_HOST_DEVICE inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;  // the CPU library is built with -ffp-contract=off
#endif
}

COPPICE_HOST_DEVICE inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// Threshold keeping: |v| > t, compared in f64 (NaN is dropped).
COPPICE_HOST_DEVICE inline bool threshold_keeps(double v, double t) { return abs_of(v) > t; }

// The relu-into-CSR rule (fused_relu.h): relu(v) > t for t >= 0, which is
// v > t, decided as threshold_keeps decides it on relu's output (in f64, NaN
// dropped), but compared in the type C the kernel computes in: for f32 (and
// the 16-bit floats, widened exactly) v > t in f64 exactly when v > the
// largest float <= t, which the host works out once (host code).
template <typename C>
inline C relu_keep_bound(double t) {
  if constexpr (sizeof(C) == sizeof(double)) {
    return t;
  } else {
    if (t >= static_cast<double>(FLT_MAX)) return t == HUGE_VAL ? HUGE_VALF : FLT_MAX;
    float f = static_cast<float>(t);
    if (static_cast<double>(f) > t) f = std::nextafter(f, -HUGE_VALF);
    return f;
  }
}
template <typename C>
COPPICE_HOST_DEVICE inline bool relu_keeps(C v, C bound) {
  return v > bound;
}

// Keeps the n largest |x| of one group of m elements spaced `stride` apart
// (ties to the lower position): mask[j * stride] for j in [0, m).
template <typename T>
COPPICE_HOST_DEVICE inline void nm_group(const T* x, int64_t stride, int64_t n, int64_t m, bool* mask) {
  using K = decltype(key_of<T>(T(0), true));
  constexpr int64_t kCached = 16;
  if (m <= kCached) {  // the common case (2:4, 1:8, ...): keys computed once, ranks counted without branches
    K keys[kCached];
    for (int64_t j = 0; j < m; ++j) keys[j] = key_of<T>(x[j * stride], true);
    for (int64_t j = 0; j < m; ++j) {
      int64_t rank = 0;
      for (int64_t l = 0; l < m; ++l) rank += (keys[l] > keys[j]) | ((keys[l] == keys[j]) & (l < j));
      mask[j * stride] = rank < n;
    }
    return;
  }
  for (int64_t j = 0; j < m; ++j) {
    const auto kj = key_of<T>(x[j * stride], true);
    int64_t rank = 0;
    for (int64_t l = 0; l < m && rank < n; ++l) {
      const auto kl = key_of<T>(x[l * stride], true);
      if (kl > kj || (kl == kj && l < j)) ++rank;
    }
    mask[j * stride] = rank < n;
  }
}

// The score of one block (top-left element at x, rows `cols` apart): the sum
// of squares (L2, the norm's monotone square) or of magnitudes (L1), added
// row by row: each row's bw terms in order (block_row_score), then the rows'
// sums in order. The CUDA kernel gives each row a thread and adds the same
// numbers in the same order, so both devices agree bit for bit.
template <typename T>
COPPICE_HOST_DEVICE inline double block_row_score(const T* x, int64_t bw, bool l1) {
  double s = 0.0;
  for (int64_t c = 0; c < bw; ++c) {
    const double v = static_cast<double>(x[c]);
    s = add_rn(s, l1 ? abs_of(v) : mul_rn(v, v));
  }
  return s;
}

template <typename T>
COPPICE_HOST_DEVICE inline double block_score(const T* x, int64_t cols, int64_t bh, int64_t bw, bool l1) {
  double s = 0.0;
  for (int64_t r = 0; r < bh; ++r) s = add_rn(s, block_row_score(x + r * cols, bw, l1));
  return s;
}

}  // namespace coppice::sparsify_detail

// The element test of the "nonfinite_flag" kernel (optim/finite_check.h),
// shared by the CPU kernel and its CUDA twin: a floating-point value is inf
// or NaN exactly when its exponent bits are all ones, so the test reads the
// value's bits as an unsigned word of its width and needs no arithmetic that
// could round or trap. Plain C++ that nvcc also compiles.
#pragma once

#include <cstdint>
#include <cstring>

#include "optim/fused_step_math.h"  // COPPICE_OPTIM_HD

namespace coppice {

// The exponent mask of a floating-point format, as a word of its width.
inline constexpr uint16_t kF16ExponentBits = 0x7c00;
inline constexpr uint16_t kBF16ExponentBits = 0x7f80;
inline constexpr uint32_t kF32ExponentBits = 0x7f800000u;
inline constexpr uint64_t kF64ExponentBits = 0x7ff0000000000000ull;

template <typename Word>
COPPICE_OPTIM_HD inline bool is_nonfinite_bits(Word bits, Word exponent_mask) {
  return (bits & exponent_mask) == exponent_mask;
}

// The same test on a value as a fused optimizer step holds it (the gradient
// element it reads; a 16-bit gradient widened to f32 is inf or NaN exactly
// when it was): its bits, not a comparison, so no flag is raised.
COPPICE_OPTIM_HD inline bool is_nonfinite_value(float x) {
#if defined(__CUDA_ARCH__)
  const uint32_t bits = __float_as_uint(x);
#else
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
#endif
  return is_nonfinite_bits<uint32_t>(bits, kF32ExponentBits);
}

COPPICE_OPTIM_HD inline bool is_nonfinite_value(double x) {
#if defined(__CUDA_ARCH__)
  const uint64_t bits = static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
#endif
  return is_nonfinite_bits<uint64_t>(bits, kF64ExponentBits);
}

// A fused step given a clip factor (optim/clip.h, clip_grad_norm_on_device:
// min(1, max_norm / (norm + 1e-6)), NaN when the gradients' norm is not
// finite) leaves its parameter and state untouched when the factor is not
// finite: the step is skipped on the device, without a host read.
COPPICE_OPTIM_HD inline bool clip_factor_skips(float factor) { return is_nonfinite_value(factor); }

}  // namespace coppice

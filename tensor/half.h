// Storage types for the 16-bit floats: bf16 and IEEE f16.
//
// Values are stored in 16 bits and computed in f32 (on the CPU always; on the
// GPU the kernels convert too). The conversions are plain bit manipulation so
// that host and device code agree bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define COPPICE_HOST_DEVICE __host__ __device__
#else
#define COPPICE_HOST_DEVICE
#endif

namespace coppice {

namespace half_detail {
COPPICE_HOST_DEVICE inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}
COPPICE_HOST_DEVICE inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}
}  // namespace half_detail

// bfloat16: the top 16 bits of an f32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  COPPICE_HOST_DEVICE BFloat16(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a float
  COPPICE_HOST_DEVICE operator float() const { return half_detail::bits_float(uint32_t{bits} << 16); }

  COPPICE_HOST_DEVICE static uint16_t from_float(float f) {
    uint32_t u = half_detail::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>((u + rounding) >> 16);
  }
};

// IEEE 754 binary16, rounded to nearest even, with subnormals and infinities.
struct Half {
  uint16_t bits = 0;

  Half() = default;
  COPPICE_HOST_DEVICE Half(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a float
  COPPICE_HOST_DEVICE operator float() const { return to_float(bits); }

  COPPICE_HOST_DEVICE static uint16_t from_float(float f) {
    uint32_t u = half_detail::float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
    if (abs < 0x38800000u) {                                               // subnormal or zero in f16
      if (abs < 0x33000000u) return static_cast<uint16_t>(sign);           // rounds to zero
      // value = mant * 2^(exp - 150); an f16 subnormal counts units of 2^-24.
      uint32_t exp = abs >> 23;
      uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
      uint32_t shift = 126 - exp;
      uint32_t half_mant = mant >> shift;
      uint32_t rem = mant & ((1u << shift) - 1u);
      uint32_t halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
      return static_cast<uint16_t>(sign | half_mant);
    }
    uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }

  COPPICE_HOST_DEVICE static float to_float(uint16_t h) {
    uint32_t sign = uint32_t{h & 0x8000u} << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
      if (mant == 0) return half_detail::bits_float(sign);
      // Subnormal: value = mant * 2^-24.
      float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    if (exp == 31) return half_detail::bits_float(sign | 0x7f800000u | (mant << 13));
    return half_detail::bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  }
};

}  // namespace coppice

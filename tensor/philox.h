// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
//
// Counter-based: the numbers for element i depend only on (seed, offset, i),
// so the CPU and every CUDA kernel produce the same stream bit for bit, and a
// tensor can be filled in parallel in any order. Host and device share this
// header.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/half.h"  // COPPICE_HOST_DEVICE

namespace coppice {
namespace philox {

struct U32x4 {
  uint32_t x, y, z, w;
};

COPPICE_HOST_DEVICE inline void mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// Ten rounds of Philox4x32 on `counter` under `key` (two 32-bit words of the seed).
COPPICE_HOST_DEVICE inline U32x4 philox4x32_10(U32x4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kM0, c.x, &hi0, &lo0);
    mulhilo(kM1, c.z, &hi1, &lo1);
    c = U32x4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// The four 32-bit random words of block `block` in the stream (seed, offset).
COPPICE_HOST_DEVICE inline U32x4 block(uint64_t seed, uint64_t offset, uint64_t block_index) {
  U32x4 counter{static_cast<uint32_t>(block_index), static_cast<uint32_t>(block_index >> 32),
                static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)};
  return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

COPPICE_HOST_DEVICE inline uint32_t lane(const U32x4& v, uint64_t i) {
  switch (i & 3u) {
    case 0: return v.x;
    case 1: return v.y;
    case 2: return v.z;
    default: return v.w;
  }
}

// Element i's 32-bit random word: lane i%4 of block i/4.
COPPICE_HOST_DEVICE inline uint32_t word(uint64_t seed, uint64_t offset, uint64_t i) {
  return lane(block(seed, offset, i / 4), i);
}

// Uniform in [0, 1) with 24 random bits: exact in f32 and identical on every device.
COPPICE_HOST_DEVICE inline float uniform_f32(uint32_t w) { return static_cast<float>(w >> 8) * 5.9604644775390625e-8f; }
// Uniform in [0, 1) with 32 random bits, for f64 tensors.
COPPICE_HOST_DEVICE inline double uniform_f64(uint32_t w) { return static_cast<double>(w) * 2.3283064365386963e-10; }

// Element i of a standard normal stream: Box-Muller on the first two words of
// block i/2; even elements take the cosine, odd ones the sine.
COPPICE_HOST_DEVICE inline double normal(uint64_t seed, uint64_t offset, uint64_t i) {
  U32x4 v = block(seed, offset, i / 2);
  double u1 = (static_cast<double>(v.x) + 1.0) * 2.3283064365386963e-10;  // (0, 1]
  double u2 = static_cast<double>(v.y) * 2.3283064365386963e-10;
  double r = ::sqrt(-2.0 * ::log(u1));  // global: coppice::log(Tensor) would hide them
  double theta = 6.283185307179586 * u2;
  return (i & 1u) ? r * ::sin(theta) : r * ::cos(theta);
}

}  // namespace philox
}  // namespace coppice

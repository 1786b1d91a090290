// Warp and block building blocks for the row reductions (device code only).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace coppice::cuda {

constexpr int kWarp = 32;

// __shfl_down_sync for every value type the reductions carry.
template <typename V>
__device__ inline V shfl_down(V v, int delta) {
  if constexpr (sizeof(V) == 8) {
    return __shfl_down_sync(0xffffffffu, v, delta);
  } else if constexpr (std::is_floating_point_v<V>) {
    return __shfl_down_sync(0xffffffffu, v, delta);
  } else {
    return static_cast<V>(__shfl_down_sync(0xffffffffu, static_cast<int>(v), delta));
  }
}

// The sum of v over the warp, on every lane (a butterfly of __shfl_xor_sync:
// the same order, so the same bits, on every lane and every run).
template <typename C>
__device__ inline C warp_sum(C v) {
#pragma unroll
  for (int d = kWarp / 2; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

}  // namespace coppice::cuda

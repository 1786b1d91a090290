// Launch helpers shared by the .cu files (device code only).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/dtype.h"

namespace coppice::cuda {

constexpr int kThreads = 256;
// Grid-stride loops cover any size with at most this many blocks.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

inline unsigned grid_for(int64_t n, int threads = kThreads) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + threads - 1) / threads, 1, kMaxBlocks));
}

// for (int64_t i : grid-stride range [0, n))
#define COPPICE_KERNEL_LOOP(i, n)                                                        \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// Calls f(TypeTag<U>{}) with an unsigned type of t's size, for kernels that
// only move elements (one instantiation serves every dtype of that size).
template <typename F>
void by_element_size(DType t, F f) {
  switch (dtype_size(t)) {
    case 1: f(TypeTag<uint8_t>{}); break;
    case 2: f(TypeTag<uint16_t>{}); break;
    case 4: f(TypeTag<uint32_t>{}); break;
    default: f(TypeTag<uint64_t>{}); break;
  }
}

}  // namespace coppice::cuda

// Launch helpers shared by the .cu files (device code only).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

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

// Calls f(TypeTag<U>{}) with the widest unsigned type, up to 16 bytes (uint4),
// whose size divides `run_bytes` and on whose boundary every pointer of
// `ptrs` starts: kernels that only move runs of run_bytes contiguous bytes
// (the rows an index_select copies) move them in as few loads and stores as
// they can. That is at least an element's size for runs of whole elements of
// naturally aligned tensors. A row of a bf16 [V, 1024] table moves in 128
// uint4 where it took 1024 uint16 (the GPT's token lookup: 118 -> about 15 us
// on an H100).
template <typename F>
void by_run_width(int64_t run_bytes, std::initializer_list<const void*> ptrs, F f) {
  auto fits = [&](int64_t width) {
    if (run_bytes % width != 0) return false;
    for (const void* p : ptrs) {
      if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(width) != 0) return false;
    }
    return true;
  };
  if (fits(16)) {
    f(TypeTag<uint4>{});
  } else if (fits(8)) {
    f(TypeTag<uint64_t>{});
  } else if (fits(4)) {
    f(TypeTag<uint32_t>{});
  } else if (fits(2)) {
    f(TypeTag<uint16_t>{});
  } else {
    f(TypeTag<uint8_t>{});
  }
}

}  // namespace coppice::cuda

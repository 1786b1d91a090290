// One templated elementwise kernel for every pointwise primitive (fill_,
// copy_, the unary and binary ops, where).
//
// The host side builds a StridedIndexer over the output shape (operands
// broadcast, adjacent contiguous dimensions merged); when every operand turns
// out to be contiguous the kernel skips the index arithmetic.
#pragma once

#include <string_view>
#include <vector>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/strided_indexer.h"
#include "tensor/tensor.h"

namespace coppice::cuda {

// `f(offsets)` is called once per output element with the element offsets of
// every operand (output first).
template <typename F>
__global__ void elementwise_kernel(int64_t n, StridedIndexer ix, bool contiguous, F f) {
  COPPICE_KERNEL_LOOP(i, n) {
    int64_t off[kMaxIndexerOperands];
    if (contiguous) {
#pragma unroll
      for (int k = 0; k < kMaxIndexerOperands; ++k) off[k] = i;
    } else {
      ix.offsets(i, off);
    }
    f(off);
  }
}

// Every operand contiguous: no index arithmetic at all, and each thread
// takes kIlp elements a block apart, so that its loads are independent and
// every warp's accesses stay coalesced.
constexpr int kIlp = 4;

template <typename F>
__global__ void contiguous_kernel(int64_t n, F f) {
  const int64_t tile = static_cast<int64_t>(blockDim.x) * kIlp;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * tile; base < n; base += tile * gridDim.x) {
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int64_t i = base + threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (i < n) {
        int64_t off[kMaxIndexerOperands];
#pragma unroll
        for (int k = 0; k < kMaxIndexerOperands; ++k) off[k] = i;
        f(off);
      }
    }
  }
}

// Runs `f` over `shape` on `device`'s stream; operands[0] is the output.
template <typename F>
void launch_elementwise(std::string_view op, int device, const Shape& shape,
                        const std::vector<const Tensor*>& operands, F f) {
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  StridedIndexer ix = make_indexer(shape, operands);
  bool contiguous = ix.ndim == 1;
  for (int k = 0; k < ix.noperands && contiguous; ++k) contiguous = ix.strides[k][0] == 1;
  DeviceGuard guard(device);
  if (contiguous) {
    contiguous_kernel<<<grid_for((n + kIlp - 1) / kIlp), kThreads, 0, current_stream(device)>>>(n, f);
  } else {
    elementwise_kernel<<<grid_for(n), kThreads, 0, current_stream(device)>>>(n, ix, false, f);
  }
  check_launch(op);
}

}  // namespace coppice::cuda

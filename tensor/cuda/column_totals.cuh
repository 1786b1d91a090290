// The second pass of the two-pass column sums (reduce_sum_cols and the
// relu/bias gradient in reduce.cu, LayerNorm's weight and bias gradients in
// layer_norm.cu): partial [chunks, inner] holds one row of sums per chunk of
// rows, and each column's chunk sums are added in a fixed order, so the
// result is the same on every run. A block is kTotalCols columns by
// kTotalLanes lanes: lane y adds chunks y, y + lanes, ... in order, then
// lane 0 adds the lanes' sums in order. With a thread per column alone, a
// [16384, 1024] gradient's 256 chunks were 256 dependent loads on 4 blocks
// (a third of the GPT step's bias-gradient time on an H200).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/cuda/convert.h"
#include "tensor/cuda/grid_dependency.cuh"

namespace coppice::cuda {

inline constexpr int kTotalCols = 32, kTotalLanes = 16;

template <typename A, typename T>
__global__ void column_totals(const A* __restrict__ partial, int64_t chunks, int64_t inner, T* __restrict__ out) {
  wait_for_prerequisite_grids();  // launched to overlap the kernel before it (launch_column_totals)
  allow_dependent_launch();
  __shared__ A lanes[kTotalLanes][kTotalCols];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTotalCols + threadIdx.x;
  A s = 0;
  if (c < inner) {
    for (int64_t k = threadIdx.y; k < chunks; k += kTotalLanes) s += partial[k * inner + c];
  }
  lanes[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= inner) return;
  A total = 0;
  for (int y = 0; y < kTotalLanes; ++y) total += lanes[y][threadIdx.x];
  out[c] = convert<T>(total);
}

// Launches column_totals over `inner` columns on `stream`.
template <typename A, typename T>
void launch_column_totals(const A* partial, int64_t chunks, int64_t inner, T* out, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((inner + kTotalCols - 1) / kTotalCols);
  launch_overlapping_on_sm90(current_device("column totals"), column_totals<A, T>, dim3(blocks),
                             dim3(kTotalCols, kTotalLanes), 0, stream, "column totals", partial, chunks, inner, out);
}

}  // namespace coppice::cuda

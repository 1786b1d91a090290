// Own SpMM kernels (block_spmm.h): one thread per output element, threads of
// a warp on consecutive output columns so that reads of X and writes of Y
// coalesce; accumulation in T (f32 or f64), in stored order like the CPU.
#include "sparse/cuda/block_spmm.h"

namespace coppice::sparse_cuda {
namespace {

constexpr int kThreads = 256;

int grid_for(int64_t total) {
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

template <typename T>
__global__ void bsr_kernel(const int32_t* __restrict__ crow, const int32_t* __restrict__ bcol,
                           const T* __restrict__ values, int64_t rows, int64_t bh, int64_t bw, const T* __restrict__ x,
                           int64_t n, T* __restrict__ y) {
  const int64_t total = rows * n;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < total;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = o / n, c = o % n, br = r / bh, i = r % bh;
    T acc = T(0);
    for (int64_t k = crow[br]; k < crow[br + 1]; ++k) {
      const T* blk = values + (k * bh + i) * bw;
      const T* xc = x + static_cast<int64_t>(bcol[k]) * bw * n + c;
      for (int64_t j = 0; j < bw; ++j) acc += blk[j] * xc[j * n];
    }
    y[o] = acc;
  }
}

template <typename T>
__global__ void nm_kernel(const T* __restrict__ values, const uint8_t* __restrict__ positions, int64_t rows,
                          int64_t groups, int64_t keep, int64_t group, const T* __restrict__ x, int64_t n,
                          T* __restrict__ y) {
  const int64_t total = rows * n, per_row = groups * keep;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < total;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = o / n, c = o % n;
    T acc = T(0);
    for (int64_t q = 0; q < per_row; ++q) {
      const int64_t slot = r * per_row + q;
      const int64_t col = (q / keep) * group + positions[slot];
      acc += values[slot] * x[col * n + c];
    }
    y[o] = acc;
  }
}

}  // namespace

template <typename T>
void bsr_spmm(const int32_t* crow, const int32_t* bcol, const T* values, int64_t rows, int64_t bh, int64_t bw,
              const T* x, int64_t n, T* y, cudaStream_t stream) {
  if (rows * n <= 0) return;
  bsr_kernel<T><<<grid_for(rows * n), kThreads, 0, stream>>>(crow, bcol, values, rows, bh, bw, x, n, y);
}

template <typename T>
void nm_spmm(const T* values, const uint8_t* positions, int64_t rows, int64_t groups, int64_t keep, int64_t group,
             const T* x, int64_t n, T* y, cudaStream_t stream) {
  if (rows * n <= 0) return;
  nm_kernel<T><<<grid_for(rows * n), kThreads, 0, stream>>>(values, positions, rows, groups, keep, group, x, n, y);
}

template void bsr_spmm<float>(const int32_t*, const int32_t*, const float*, int64_t, int64_t, int64_t, const float*,
                              int64_t, float*, cudaStream_t);
template void bsr_spmm<double>(const int32_t*, const int32_t*, const double*, int64_t, int64_t, int64_t, const double*,
                               int64_t, double*, cudaStream_t);
template void nm_spmm<float>(const float*, const uint8_t*, int64_t, int64_t, int64_t, int64_t, const float*, int64_t,
                             float*, cudaStream_t);
template void nm_spmm<double>(const double*, const uint8_t*, int64_t, int64_t, int64_t, int64_t, const double*, int64_t,
                              double*, cudaStream_t);

}  // namespace coppice::sparse_cuda

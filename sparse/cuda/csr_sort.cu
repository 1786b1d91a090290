// Per-row sort of CSR entries (csr_sort.h).
#include "sparse/cuda/csr_sort.h"

namespace coppice::sparse_cuda {
namespace {

template <typename T>
__global__ void sort_rows_kernel(const int32_t* __restrict__ crow, int64_t rows, int32_t* __restrict__ col,
                                 T* __restrict__ values) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t begin = crow[r], end = crow[r + 1];
    for (int32_t i = begin + 1; i < end; ++i) {
      const int32_t c = col[i];
      if (col[i - 1] <= c) continue;  // sorted so far: the common case costs one compare
      const T v = values[i];
      int32_t j = i;
      for (; j > begin && col[j - 1] > c; --j) {
        col[j] = col[j - 1];
        values[j] = values[j - 1];
      }
      col[j] = c;
      values[j] = v;
    }
  }
}

}  // namespace

void sort_csr_rows(const int32_t* crow, int64_t rows, int32_t* col, void* values, bool f64, cudaStream_t stream) {
  if (rows <= 0) return;
  constexpr int kThreads = 128;
  const int64_t blocks = (rows + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  if (f64) {
    sort_rows_kernel<double><<<grid, kThreads, 0, stream>>>(crow, rows, col, static_cast<double*>(values));
  } else {
    sort_rows_kernel<float><<<grid, kThreads, 0, stream>>>(crow, rows, col, static_cast<float*>(values));
  }
}

}  // namespace coppice::sparse_cuda

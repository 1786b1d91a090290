// COO index narrowing for cuSPARSE (coo_indices.h): one pass writes both i32
// arrays, instead of two strided selects and two conversions.
#include "sparse/cuda/coo_indices.h"

namespace coppice::sparse_cuda {
namespace {

__global__ void narrow_kernel(const int64_t* __restrict__ indices, int64_t nnz, int32_t* __restrict__ rows,
                              int32_t* __restrict__ cols) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < nnz;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    rows[e] = static_cast<int32_t>(indices[e]);
    cols[e] = static_cast<int32_t>(indices[nnz + e]);
  }
}

}  // namespace

void coo_indices_to_i32(const int64_t* indices, int64_t nnz, int32_t* rows, int32_t* cols, cudaStream_t stream) {
  if (nnz <= 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (nnz + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  narrow_kernel<<<grid, kThreads, 0, stream>>>(indices, nnz, rows, cols);
}

}  // namespace coppice::sparse_cuda

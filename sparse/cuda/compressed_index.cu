// Index arrays of compressed patterns (compressed_index.h).
#include "sparse/cuda/compressed_index.h"

namespace coppice::sparse_cuda {
namespace {

constexpr int kThreads = 256;

int grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

// One thread per row; rows of a relu output hold thousands of entries, so
// the writes of a warp are strided but every row is short work.
__global__ void expand_pointers_kernel(const int32_t* __restrict__ pointers, int64_t outer, int64_t* __restrict__ out) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < outer;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    for (int32_t k = pointers[r]; k < pointers[r + 1]; ++k) out[k] = r;
  }
}

template <typename T>
__global__ void iota_kernel(T* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = static_cast<T>(i);
  }
}

}  // namespace

void expand_pointers(const int32_t* pointers, int64_t outer, int64_t* out, cudaStream_t stream) {
  if (outer <= 0) return;
  expand_pointers_kernel<<<grid_for(outer), kThreads, 0, stream>>>(pointers, outer, out);
}

void iota(int64_t* out, int64_t n, cudaStream_t stream) {
  if (n > 0) iota_kernel<int64_t><<<grid_for(n), kThreads, 0, stream>>>(out, n);
}

void iota(double* out, int64_t n, cudaStream_t stream) {
  if (n > 0) iota_kernel<double><<<grid_for(n), kThreads, 0, stream>>>(out, n);
}

}  // namespace coppice::sparse_cuda

// Index arrays of compressed patterns (compressed_index.h).
#include "sparse/cuda/compressed_index.h"
#include "tensor/cuda/launch.cuh"

namespace coppice::sparse_cuda {
namespace {

using cuda::grid_for;
using cuda::kThreads;

// One thread per row: a row's entries are written by one thread, so a
// warp's writes are strided, but each row is short work.
__global__ void expand_pointers_kernel(const int32_t* __restrict__ pointers, int64_t outer, int64_t* __restrict__ out) {
  COPPICE_KERNEL_LOOP(r, outer) {
    for (int32_t k = pointers[r]; k < pointers[r + 1]; ++k) out[k] = r;
  }
}

template <typename T>
__global__ void iota_kernel(T* __restrict__ out, int64_t n) {
  COPPICE_KERNEL_LOOP(i, n) { out[i] = static_cast<T>(i); }
}

}  // namespace

void expand_pointers(const int32_t* pointers, int64_t outer, int64_t* out, cudaStream_t stream) {
  if (outer > 0) expand_pointers_kernel<<<grid_for(outer), kThreads, 0, stream>>>(pointers, outer, out);
}

void iota(int64_t* out, int64_t n, cudaStream_t stream) {
  if (n > 0) iota_kernel<int64_t><<<grid_for(n), kThreads, 0, stream>>>(out, n);
}

void iota(double* out, int64_t n, cudaStream_t stream) {
  if (n > 0) iota_kernel<double><<<grid_for(n), kThreads, 0, stream>>>(out, n);
}

}  // namespace coppice::sparse_cuda

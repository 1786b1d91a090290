// Index arrays of compressed (CSR, CSC) patterns made on the device
// (internal; compressed_index.cu): each entry's outer index, and the entry
// numbers themselves. csr_view.cc and compressed_transpose.cc form a
// compressed pattern's view and positions from them without a host walk.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace coppice::sparse_cuda {

// out[k] = r for every k in [pointers[r], pointers[r + 1]), r < outer: the
// row of each CSR entry (the column of each CSC entry).
void expand_pointers(const int32_t* pointers, int64_t outer, int64_t* out, cudaStream_t stream);

// out[i] = i for i < n.
void iota(int64_t* out, int64_t n, cudaStream_t stream);
void iota(double* out, int64_t n, cudaStream_t stream);

}  // namespace coppice::sparse_cuda

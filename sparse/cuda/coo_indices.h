// COO's i64 [2, nnz] indices as the two i32 arrays cuSPARSE reads (internal).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace coppice::sparse_cuda {

// rows[e] = indices[e], cols[e] = indices[nnz + e], narrowed to i32 (the
// caller checked that every index fits), queued on `stream`.
void coo_indices_to_i32(const int64_t* indices, int64_t nnz, int32_t* rows, int32_t* cols, cudaStream_t stream);

}  // namespace coppice::sparse_cuda

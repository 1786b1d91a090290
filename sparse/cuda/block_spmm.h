// Own SpMM kernels for the formats cuSPARSE has no SpMM for (internal):
// Y [rows, n] = A @ X with A in BSR (any block shape) or n:m, X [cols, n]
// dense row-major, all on the device, T float or double.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace coppice::sparse_cuda {

// BSR: crow i32 [rows/bh + 1], bcol i32 [nblocks], values [nblocks, bh, bw].
template <typename T>
void bsr_spmm(const int32_t* crow, const int32_t* bcol, const T* values, int64_t rows, int64_t bh, int64_t bw,
              const T* x, int64_t n, T* y, cudaStream_t stream);

// n:m along rows: values and positions [rows, groups * keep] (slot q of a row
// holds the element at column (q / keep) * group + positions[q]).
template <typename T>
void nm_spmm(const T* values, const uint8_t* positions, int64_t rows, int64_t groups, int64_t keep, int64_t group,
             const T* x, int64_t n, T* y, cudaStream_t stream);

}  // namespace coppice::sparse_cuda

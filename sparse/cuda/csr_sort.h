// Sorting the entries of each CSR row by column, on the device (internal).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace coppice::sparse_cuda {

// Sorts each row's (column, value) pairs by column in place, one thread per
// row (insertion sort: rows are expected short or already sorted, as
// cusparseSpGEMM's output is). `values` holds float, or double when `f64`.
void sort_csr_rows(const int32_t* crow, int64_t rows, int32_t* col, void* values, bool f64, cudaStream_t stream);

}  // namespace coppice::sparse_cuda

// The CSR arrays of a compressed matrix's transpose, made on the device by
// cuSPARSE's csr2csc, with where each entry came from (internal). From a
// CSR's arrays it gives the transpose's CSR, and so each entry's row; from a
// CSC's (the CSR arrays of its transpose) the matrix's own CSR. csr_view.cc
// forms a CSR's or CSC's view and positions from it without a host walk.
#pragma once

#include <cstdint>
#include <string_view>

#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

struct CompressedTranspose {
  Tensor pointers, indices;  // i32 [cols + 1], [nnz]: the CSR of the [cols, rows] transpose
  Tensor source;             // i64 [nnz]: for each of its entries, the input's entry it came from
};

// `pointers` (i32 [rows + 1]) and `indices` (i32 [nnz]) are the CSR arrays
// of a [rows, cols] matrix on a CUDA device; the result is on it too.
CompressedTranspose transpose_compressed_arrays(const Tensor& pointers, const Tensor& indices, int64_t rows,
                                                int64_t cols, std::string_view op);

}  // namespace coppice::sparse_cuda

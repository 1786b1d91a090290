// The rows of a CSR pattern by decreasing length (ties in row order), for
// the load balance of the own SpMM kernels (csr_spmm.h): the longest rows
// start first and each row tile holds rows of similar length. Computed on the
// device (a stable radix sort, no host round trip) once per pattern version
// and device, and cached while the pattern lives (pattern_cache.h); equal
// versions mean equal patterns (sparse_impl.h).
#pragma once

#include <string_view>

#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// i32 [rows] on csr's device: a permutation of 0..rows-1. `csr` is a CSR
// tensor on a CUDA device.
Tensor csr_row_order(const Tensor& csr, std::string_view op);

}  // namespace coppice::sparse_cuda

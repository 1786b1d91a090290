// A @ X by the own kernels of block_spmm.cu (internal): the SpMM planner's
// "block_kernels" route (spmm.cc), for BSR of any block shape and n:m, which
// cuSPARSE has no SpMM for (its BSR SpMM wants square blocks).
#pragma once

#include <string_view>

#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// a (BSR or n:m [rows, cols], CUDA) @ x_in (dense [cols, n], same device and
// floating dtype); bf16/f16 compute in f32 and round once.
Tensor block_kernel_spmm(const Tensor& a, const Tensor& x_in, std::string_view op);

}  // namespace coppice::sparse_cuda

// cuSPARSE's SpMM in the one form the SpMM routes use (internal; spmm.cc):
// Y = S @ X with S in CSR or Blocked-ELL, not transposed, and X, Y dense
// row-major. cuSPARSE runs a transposed sparse operand or column-major dense
// operands 4-20x slower on training shapes, and a transposed operand makes it
// scatter with atomics in the output's type, so the routes bring every
// product to this form instead (spmm.cc has the measurements).
//
// f32 and f64 compute in their own type, bf16/f16 in f32 with one rounding
// of the output. Descriptors and workspace are cached per pattern version
// (cusparse_context.h). Algorithm: CUSPARSE_SPMM_ALG_DEFAULT.
#pragma once

#include <string_view>

#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// s (CSR or Blocked-ELL, CUDA) @ x (dense [s cols, n], same device and dtype;
// any strides) in s's dtype. Throws coppice::Error naming
// CUSPARSE_STATUS_NOT_SUPPORTED where cuSPARSE refuses the dtype (bf16/f16 on
// some versions): kernel_routes.h's unless_refused tells that apart.
Tensor cusparse_spmm(const Tensor& s, const Tensor& x, std::string_view op);

// The same for CSR `csr`, computing in f32 and rounding once where cuSPARSE
// refuses a bf16/f16 product.
Tensor cusparse_csr_spmm(const Tensor& csr, const Tensor& x, std::string_view op);

}  // namespace coppice::sparse_cuda

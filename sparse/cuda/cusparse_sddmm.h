// cuSPARSE's SDDMM (internal): the SDDMM planner's routes at a CSR pattern
// (sddmm.cc; CSC and the other formats come to it as CSR).
//
// cusparseSDDMM computes C = alpha (op(A) op(B)) o spy(C) + beta C with A, B
// dense row-major and C CSR; C's values start at zero (beta = 0 would not
// read them, but a zero start keeps garbage out whatever cuSPARSE does).
// f32 and f64 compute in their own type; bf16/f16 operands are converted to
// f32 (cuSPARSE's SDDMM has no bf16 input on every version) and the values
// rounded once, as on the CPU. A transposed view b (x.t() in the gradient of
// SpMM) is made contiguous first. Descriptors and workspace are cached per
// pattern version (cusparse_context.h).
#pragma once

#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// (a [m, k] @ b [k, n]) at the stored positions of `pattern` (CSR [m, n]):
// the values, in the pattern's order and dtype. The operands are checked by
// the caller (one CUDA device, one floating dtype, 32-bit sizes).
Tensor cusparse_csr_sddmm(const Tensor& a, const Tensor& b, const Tensor& pattern);

}  // namespace coppice::sparse_cuda

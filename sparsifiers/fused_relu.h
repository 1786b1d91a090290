// A fused inline sparsifier, as an example for kernels to follow: relu whose
// output goes straight into CSR, keeping relu(x) > threshold (no dense
// relu(x), no mask, no separate conversion).
//
//   SparsifiedOp op = sparsified_relu({threshold_sparsifier, {"csr"}, nullptr, {"csr"}});
//
// runs relu_to_csr when x is a dense 2-D floating tensor on the CPU or a CUDA
// device and the inline sparsifier is null or fusable with a threshold t >= 0
// (fusable.h), and the generic path (relu, then the sparsifier, then the
// conversion) otherwise; both give the same value and gradient.
//
// relu_to_csr is the dispatcher op "relu_to_csr": input x (dense, contiguous,
// 2-D, f32/f64/bf16/f16, fewer than 2^31 elements), attribute threshold
// (double, >= 0); outputs crow_indices i32 [rows + 1], col_indices i32 [nnz]
// and values [nnz] in x's dtype, each row's entries in ascending columns. An
// entry is kept when x > threshold, decided as the threshold sparsifier
// decides |relu(x)| > threshold (in f64; mask_keys.h, relu_keeps), so the
// fused and generic paths store the same entries, exact ties included. The CPU
// kernel (fused_relu.cc) makes one pass; its CUDA twin
// (sparsifiers/cuda/relu_to_csr.cu) makes two, count then write, because a
// row's entries start where the rows before it end and nnz is unknown until
// every row is counted (a CUB scan of the counts gives the row pointers, and
// nnz is read back once to allocate the outputs). That read-back is why the
// CUDA op refuses to run inside a CUDA graph capture (the step runs eagerly).
//
// NaN: relu(NaN) is NaN, which no threshold keeps (NaN > t is false), so
// relu_to_csr drops it, as the threshold sparsifier does. With a null inline
// sparsifier the generic path instead stores every non-zero of relu(x), NaN
// included: the two differ there, and only there.
#pragma once

#include "autograd/variable.h"
#include "sparsifiers/sparsified_op.h"

namespace coppice {

// relu(x) at the entries where it exceeds `threshold` (>= 0), as CSR on x's
// device. x: a dense 2-D f32, f64, bf16 or f16 tensor (CPU or CUDA; any
// strides). The gradient of x is the incoming gradient at the stored entries
// (where relu' is 1), zero elsewhere, on x's device. Throws coppice::Error
// naming relu_to_csr for anything else (a sparse or 3-D x, an integer dtype, a
// negative threshold).
Variable relu_to_csr(const Variable& x, double threshold = 0.0);

// The FusedForward of relu for SparsifiedOp: declines (the generic path runs)
// what relu_to_csr cannot do, and a threshold below 0.
FusedForward fused_relu();

// relu as a sparsified op with the fused kernel; `output` as in SparsifiedOp.
SparsifiedOp sparsified_relu(ValueSparsity output, ValueSparsity input_grad = {});

}  // namespace coppice

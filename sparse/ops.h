// Sparse ops: the calls tensor/ops.h has no name for (sddmm, transpose,
// spgemm, the CSR row softmax).
//
// A sparse tensor goes through the same frontends as a dense one (matmul,
// linear, add, mul, relu, sum, ... in tensor/ops.h): with a sparse operand
// they skip their dense-only checks and dispatch by the operands' formats.
// Which ops take sparse operands, in which inputs, with which attributes,
// what format their outputs take and which cells each promises on every
// device is declared once, in the op table (tensor/op_table.h; the
// elementwise ops in tensor/unary_ops.h and binary_ops.h); sparse/cpu and
// sparse/cuda register their kernels under its names. A combination with no
// kernel converts to dense, runs the dense kernel and is counted
// (Dispatcher::fallback_counts). Operands share one dtype (the frontends
// promote dense operands; convert a sparse one with to_dtype) and one
// device; bf16/f16 compute in f32.
//
// What the table's rules mean for sparse operands, beyond what it says:
//   matmul, linear  dense results; linear's x [.., in] is flattened to 2-D.
//                   (csr, csr) is SpGEMM: CSR with a fresh pattern version.
//                   linear with a bias, linear_relu, linear_gelu ({gelu(z),
//                   z}) and matmul_gelu_backward are a format's fused kernels
//                   (CUDA bsr, nm): the frontends ask for them when
//                   registered and compose the ops otherwise.
//   sddmm           (a @ b) at the pattern's stored entries, in the pattern's
//                   format and version; its values unread (an uncoalesced
//                   COO's duplicates each get the product).
//   sddmm_row_sums  sddmm's output and a's row sums (dense): a format's fused
//                   kernel (CUDA bsr); the frontend composes it otherwise.
//   linear_grads    a sparse linear's gradients {weight (its pattern), input,
//                   bias (or undefined)} from one kernel, or declined: all
//                   undefined (linear_grads_fused below).
//   transpose       the same format; free for CSR <-> CSC (same arrays and
//                   version).
//   unary ops       with f(0) = 0 (tensor/unary_ops.h): the same pattern and
//                   version, op(values); the others fall back to dense.
//   mul, div, pow   the sparse operand's pattern: values times (divided by,
//                   to the power of) the dense operand at stored positions
//                   (pow: a 0-D exponent > 0; others throw, 0 ** e != 0).
//   add, sub        with a dense operand: dense; (csr, csr): CSR over the
//                   union of both patterns; (coo, coo): uncoalesced COO.
//   sum             dense, the stored values summed over dims (normalized,
//                   sorted) in f64.
//   csr_row_softmax(_backward)  on a CSR's arrays (below).
//   dense_mask_to_csr  (values [rows, cols], bool mask [rows, cols], both
//                   dense, contiguous, < 2^31 elements) -> {crow i32
//                   [rows + 1], col i32 [nnz], values [nnz]}: the entries
//                   where mask holds, row by row in ascending columns, values
//                   copied bit for bit; sparse_from_mask's csr / csc path (on
//                   CUDA: no host round trip, one nnz read back, not
//                   capturable in a CUDA graph).
#pragma once

#include <utility>

#include "tensor/ops.h"  // GeluForm
#include "tensor/tensor.h"

namespace coppice {

// (a @ b) sampled at the stored positions of `pattern` (sparse, [m, n]), in
// the pattern's format and pattern version: a [m, k] and b [k, n] dense. The
// gradient of SpMM with respect to the sparse values: sddmm(dy, x.t(), w).
Tensor sddmm(const Tensor& a, const Tensor& b, const Tensor& pattern);

// {sddmm(a, b, pattern), a's row sums ([m], a's dtype)}: a linear's weight
// and bias gradients (a = dy^T) in one pass over a where a kernel does both
// (CUDA BSR on the mma.sync SDDMM), else the two ops.
std::pair<Tensor, Tensor> sddmm_row_sums(const Tensor& a, const Tensor& b, const Tensor& pattern);

// Whether sddmm_row_sums has a fused kernel for dense a and b at `pattern`'s
// format and device, rather than composing sddmm and sum: a caller whose
// other pass could form the row sums as cheaply (a relu's gradient) asks first.
bool sddmm_row_sums_fused(const Tensor& pattern);

// A sparse linear's gradients, y = x W^T (+ b) with y's gradient g: the
// weight's, sddmm(g^T, x, W) at W's pattern; the input's, g W, or with z
// (the pre-activation of the gelu that made x: an MLP's second linear)
// gelu_backward_of_form(g W, z, form); and with `bias` the bias's, g's
// column sums. g [N, out], x [N, in], z [N, in] dense; W sparse [out, in].
// From one kernel that reads g and x once for all three, where a format has
// one that takes the operands (CUDA BSR of 32x32 blocks on Hopper); else
// every field undefined, and the caller forms them apart. The same bits on
// every run.
struct LinearGrads {
  Tensor weight, input, bias;
};
LinearGrads linear_grads_fused(const Tensor& g, const Tensor& x, const Tensor& weight, bool bias,
                               const Tensor& z = Tensor(), GeluForm form = GeluForm::kErf);

// The transpose of a 2-D tensor of any format, in the same format; for CSR
// and CSC the same arrays reinterpreted (CSR [m, n] -> CSC [n, m]).
Tensor transpose(const Tensor& t);

// CSR x CSR -> CSR (the "matmul" kernel for two CSR operands).
Tensor spgemm(const Tensor& a, const Tensor& b);

// The softmax of each row's stored values of a CSR pattern, on the values'
// device: `crow` is the pattern's row pointers (i32 [rows + 1]), `values` its
// value array (floating, [nnz]); the result is a new value array for the same
// pattern (with_values). Operates on the arrays rather than on a CSR tensor so
// that callers with several value arrays of one pattern (the forward's y and
// the backward's g) pass the pointers once. The max propagates NaN; a row of
// only -inf is NaN; bf16/f16 compute in f32 and round once. The pointers are
// trusted to be a valid CSR's on CUDA (reading them back would synchronize;
// the CPU kernels check them).
Tensor csr_row_softmax(const Tensor& crow, const Tensor& values);

// Its gradient: gx = y * (g - sum(g * y)) per row, y the softmax's output and
// g the gradient of its values (both [nnz], one dtype).
Tensor csr_row_softmax_backward(const Tensor& crow, const Tensor& y, const Tensor& g);

}  // namespace coppice

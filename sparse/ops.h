// Sparse ops: the calls tensor/ops.h has no name for (sddmm, transpose,
// spgemm), and the table of every kernel that sparse/ registers.
//
// A sparse tensor goes through the same frontends as a dense one (matmul,
// linear, add, mul, relu, sum, ... in tensor/ops.h): with a sparse operand
// they skip their dense-only checks and dispatch by the operands' formats, so
// each device registers kernels under the names below (sparse/cpu;
// sparse/cuda registers twins under the same names and formats). A
// combination with no kernel converts to dense, runs the dense kernel and is
// counted (Dispatcher::fallback_counts). Operands share one dtype (the
// frontends promote dense operands; convert a sparse one with to_dtype) and
// one device; bf16/f16 compute in f32.
//
// <fmt> is any format of sparse/: coo csr csc bsr blocked_ell nm masked
// (matrix ops take 2-D tensors; masked dense computes densely by design).
//
// name       inputs (formats)                 attrs                  outputs
// ---------  -------------------------------  ---------------------  --------------------------------------------
// matmul     (<fmt>, dense), (dense, <fmt>)   -                      dense a @ b [m, n]
// matmul     (csr, csr)                       -                      CSR a @ b (SpGEMM; fresh pattern version)
// linear     (dense, <fmt>), (<fmt>, dense)   -                      dense x @ weight^T (the frontend adds the
//                                                                    bias); x [.., in] is flattened to 2-D
// linear     (dense, <fmt>, dense bias)       -                      optional, a format's fused kernel (CUDA bsr):
//                                                                    x @ weight^T + bias in one pass; the
//                                                                    frontend asks for it when registered
// linear_relu (dense, <fmt>[, dense bias])    -                      optional likewise: relu(x @ weight^T [+ bias])
//                                                                    in one pass; else the frontend computes
//                                                                    relu(linear(...))
// sddmm      (dense a [m, k], dense b [k, n], -                      (a @ b) at pattern's stored entries:
//            <fmt> pattern [m, n])                                   with_values(pattern, ...), so the pattern's
//                                                                    format and version; pattern's values unread
//                                                                    (an uncoalesced COO's duplicates each get
//                                                                    the product; unstored slots get 0)
// transpose  (<fmt>), (dense)                 -                      2-D transpose in the same format: free for
//                                                                    CSR <-> CSC (same arrays and version)
// <unary>    (<fmt>)                          -                      with_values(x, op(values(x))): same pattern
//                                                                    and version, for the ops of
//                                                                    tensor/unary_ops.h with f(0) = 0 (neg,
//                                                                    relu, gelu, ...; exp, ... fall back to dense)
// mul        (<fmt>, dense), (dense, <fmt>)   -                      sparse pattern and version: values times the
//                                                                    dense operand (broadcast to the sparse shape)
//                                                                    at the stored positions; a scalar is 0-D
// div        (<fmt>, dense)                   -                      the same with values / dense
// pow        (<fmt>, dense 0-D > 0)           -                      with_values(x, values ** e); other exponents
//                                                                    throw (0 ** e != 0)
// add sub    (<fmt>, dense), (dense, <fmt>)   -                      dense (the dense operand must broadcast to
//                                                                    the sparse shape)
// add sub    (csr, csr)                       -                      CSR over the union of both patterns (fresh
//                                                                    version; the same version: with_values)
// add sub    (coo, coo)                       -                      uncoalesced COO of both entry lists
// sum        (<fmt>)                          dims (normalized,      dense, x's dtype: the stored values summed
//                                             sorted; all for a      over dims (f64 accumulation)
//                                             full sum), keepdim
// csr_row_softmax                             -                      values [nnz]: per row r, the softmax of
//            (dense i32 crow [rows + 1],                             values[crow[r], crow[r + 1]) (NaN-propagating
//            dense values [nnz])                                     max; f64 sum on the CPU, f32 (f64 for f64) on
//                                                                    CUDA); empty rows have no entries to write
// csr_row_softmax_backward                    -                      gx [nnz] = y * (g - sum(g * y)) per row
//            (dense crow, dense y [nnz], dense g [nnz])
// dense_mask_to_csr                           -                      {crow i32 [rows + 1], col i32 [nnz], values
//            (dense values [rows, cols],                             [nnz]}: the entries where mask holds, row by
//            dense bool mask [rows, cols],                           row in ascending columns, values copied bit
//            both contiguous, < 2^31 elements)                       for bit; sparse_from_mask's csr / csc path
//                                                                    (on CUDA: no host round trip, one nnz read
//                                                                    back, not capturable in a CUDA graph)
#pragma once

#include "tensor/tensor.h"

namespace coppice {

// (a @ b) sampled at the stored positions of `pattern` (sparse, [m, n]), in
// the pattern's format and pattern version: a [m, k] and b [k, n] dense. The
// gradient of SpMM with respect to the sparse values: sddmm(dy, x.t(), w).
Tensor sddmm(const Tensor& a, const Tensor& b, const Tensor& pattern);

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

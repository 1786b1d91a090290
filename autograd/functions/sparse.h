// Differentiable sparse values (docs/architecture.md, "Compact training state").
//
// A Variable may hold a sparse tensor of any format of sparse/. Its gradient
// has the same format, pattern and pattern version: an nnz-sized values array
// aligned with the pattern (with_values), never a dense matrix. Gradients of
// one pattern accumulate by adding values; gradients of two different pattern
// versions for one variable throw coppice::Error (remap the state, or
// set_grad(Tensor()) after a mask change). A dense gradient that reaches a
// sparse variable (from a user function) is projected onto its pattern
// (sampled at the stored positions); hooks always see the sparse gradient.
//
// The frontends in linalg.h, elementwise.h and reduce.h route sparse operands
// here, so matmul/linear/mul/add/relu/abs/neg/sum(Variable) just work:
//
//   op                         sparse operand's gradient        dense operand's gradient
//   matmul(S [m,k], X [k,n])   sddmm(G, X^T, S)                 matmul(transpose(S), G)
//   matmul(X [m,k], S [k,n])   sddmm(X^T, G, S)                 matmul(G, transpose(S))
//   linear(x, S [out,in], b)   sddmm(G2^T, x2, S)               matmul(G, S); bias: sum of G
//   mul(S, D), mul(D, S)       G's values * D at the pattern    dense scatter of G's values * S's values
//   add(S, D), add(D, S)       G sampled at the pattern         G (summed to D's shape)
//   relu/abs/neg(S)            with_values(S, f'(values) * g)   -
//   sum(S[, dims])             G broadcast, sampled             -
//
// The three products also hand their sparse operand's SDDMM factors to an
// open GradientProbe (gradient_probe.h) that watches it. A sparse operand
// made by straight_through (straight_through.h) gets its gradient whole
// instead, from the products and from to_dense: g^T x, not its SDDMM at the
// pattern.
// Sparse-by-sparse products and sums (matmul, linear, mul, add of two sparse
// operands) give each operand the gradient at its own stored positions:
// g B^T and A^T g (SpMMs) sampled, for mul g B and g A through the dense
// forms, for add g itself; a sparse g (SpGEMM's CSR) is read dense.
// A dense variable may receive a sparse gradient: embedding and embedding_bag
// with sparse_grad (nn.h) give a dense weight a row-sparse one
// (sparse/row_sparse.h: a BSR of [1, d] blocks, the rows used). The rule:
// the variable keeps it sparse (hooks see it so, and optim/ steps only its
// rows); two row-sparse gradients of different rows accumulate to their
// union (autograd/sparse_grad.h), and a sparse and a dense one to the dense
// sum. Nothing projects it: a dense variable has no pattern to project onto.
// values() and with_values() let users write any function of the values.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "sparse/entry_remap.h"
#include "sparse/ops.h"

namespace coppice {

// The stored values of sparse `x` as a dense Variable (values()' shape,
// [nnz] for most formats); its gradient flows back as with_values(x, g).
// A dense x is returned unchanged.
Variable values(const Variable& x);
// A sparse Variable with `pattern`'s format, pattern and version and the
// values of `v` (values(pattern)'s shape); the gradient of v is the values of
// the sparse gradient.
Variable with_values(const Tensor& pattern, const Variable& v);
// The dense form of sparse x; the gradient is the dense gradient sampled at
// x's stored positions.
Variable to_dense(const Variable& x);
// (a @ b) at sparse `pattern`'s stored positions (a [m, k], b [k, n] dense;
// pattern [m, n], any format): a sparse Variable of pattern's format and
// pattern. Its gradient G (on that pattern) gives da = G b^T and
// db = a^T G, two SpMMs: a block-sparse product whose topology is known
// before its values (MegaBlocks' SDD), e.g. a mixture of experts' first layer.
Variable sddmm(const Variable& a, const Variable& b, const Tensor& pattern);
// Sparse x's stored entries at the coordinates `axes` gives, in `format`
// ("coo", or "csr" for 2-D): sparse/entry_remap.h's pattern holding x's
// values, taken by index_select, so the gradient reaches x's values (an
// entry repeated along a new axis gets the sum of its copies' gradients).
// What einsum and rearrange do to a sparse operand. Errors name `op`.
Variable remap_entries(const Variable& x, const EntryAxes& axes, std::string_view format, std::string_view op);
// r.pattern holding x's values (flattened) taken at r.take, differentiably:
// what remap_entries and a selection of rows (select_rows) give.
Variable taken_values(const Variable& x, const RemappedPattern& r);

namespace autograd_detail {

// The sparse routes of the frontends (at least one operand sparse).
Variable sparse_matmul(const Variable& a, const Variable& b);
// relu: linear_relu's form (linalg.h), one node that saves its output.
Variable sparse_linear(const Variable& x, const Variable& weight, const Variable& bias, bool relu = false);
// h + linear(x, weight, bias), x dense and the weight sparse, as one node
// whose forward is tensor's linear_add_fused (h's gradient: the output's);
// undefined, with nothing run, where that has no kernel for the operands.
Variable sparse_linear_add(const Variable& h, const Variable& x, const Variable& weight, const Variable& bias);
Variable sparse_mul(const Variable& a, const Variable& b);
Variable sparse_add(const Variable& a, const Variable& b);
Variable sparse_sum(const Variable& x, const std::vector<int64_t>& dims, bool keepdim, bool all);

// The gradient of a sparse operand `pattern` of a product whose gradient
// there is a @ b: the SDDMM at its pattern, offered to GradientProbe; or,
// when `dense_grad` (a straight-through projection), a @ b whole.
Tensor pattern_grad(const Tensor& a, const Tensor& b, const Tensor& pattern, bool dense_grad);

// A sparse linear's weight and bias gradients from g2, the gradient at its
// output as rows [N, out], and x2, its input as rows [N, in]: pattern_grad
// of g2^T x2 at the weight's pattern, and the sum of g2's rows, in one pass
// over g2 where a kernel does both (sddmm_row_sums, sparse/ops.h).
std::pair<Tensor, Tensor> weight_and_bias_grads(const Tensor& g2, const Tensor& x2, const Tensor& weight);

// A sparse linear's input, weight and (with `bias`) bias gradients from one
// kernel (sparse/ops.h's linear_grads_fused; with z, the input's through
// gelu's gradient at z), the weight's offered to GradientProbe; every field
// undefined where no kernel takes them.
LinearGrads input_and_weight_grads(const Tensor& g2, const Tensor& x2, const Tensor& weight, bool bias,
                                   const Tensor& z = Tensor(), GeluForm form = GeluForm::kErf);
}  // namespace autograd_detail
}  // namespace coppice

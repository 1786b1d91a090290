// Row-sparse tensors: a [v, d] matrix of which only some whole rows are
// stored, the gradient of an embedding's weight with sparse_grad
// (autograd/functions/nn.h) and what optim/'s row-sparse steps read.
//
// The form is a BSR of [1, d] blocks (sparse/bsr.h), so that the rest of the
// library (to_dense, with_values, add, accumulation in autograd, hooks,
// safetensors) takes it as any BSR. Why BSR: its stored unit is a block, and
// a [1, d] block is a whole row, so the values are the [k, 1, d] rows
// themselves, sorted by row, one block column, and a row costs one column
// index; COO or CSR would store a coordinate (or two) per element, d of them
// per row. The block-row pointers cost v + 1 integers, not v * d values.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace coppice {

// True for a BSR [v, d] whose blocks are [1, d] (whole rows).
bool is_row_sparse(const Tensor& t);

// The row-sparse [num_rows, d] sum of `rows` [n, d] by `indices` [n]
// (integers in [0, num_rows)): the stored rows are the distinct indices,
// sorted; each is the sum of its rows in entry order, in the compute type,
// rounded once (embedding_backward's ordered segment sum over the distinct
// indices), so the result is the same bits on every run and device. The
// indices are read to the host (n integers) to find the distinct ones.
// Entries whose index is `skip` (an embedding's padding_idx) are left out:
// that row is not stored.
Tensor row_sparse_sum(const Tensor& rows, const Tensor& indices, int64_t num_rows, int64_t skip = -1);

// The stored rows of row-sparse `t`: i64 [k], sorted, on t's device.
Tensor row_sparse_rows(const Tensor& t);
// Their values, [k, d] (a view of the BSR's [k, 1, d] values).
Tensor row_sparse_values(const Tensor& t);

// a + b for row-sparse a and b of one shape: the union of their rows, a
// row stored in both the sum of a's and then b's (row_sparse_sum's order).
Tensor row_sparse_add(const Tensor& a, const Tensor& b);

}  // namespace coppice

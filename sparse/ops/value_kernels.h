// The sparse kernels that do not depend on the device: they act on values()
// or on the index parts through tensor ops, so sparse/cpu and sparse/cuda
// register the same functions (sparse/ops.h has the table).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tensor/dispatcher.h"
#include "tensor/tensor.h"

namespace coppice::sparse_kernels {

// The unary ops of tensor/unary_ops.h with kZeroPreserving (f(0) = 0): they
// act on the stored values and keep the pattern and its version. Ops with
// f(0) != 0 are not registered (they take the counted dense fallback).
const std::vector<std::string>& zero_preserving_unary_ops();
Kernel unary_on_values(std::string op);

// A (sparse, dense) operand pair in either order. Checked: two defined
// operands of one floating dtype, and a dense one that broadcasts to the
// sparse one's shape (sparse operands never broadcast). Devices are the
// caller's to check.
struct SparseDensePair {
  Tensor sparse, dense;
  bool sparse_first;
};
SparseDensePair sparse_dense_pair(const std::vector<Tensor>& in, std::string_view op);

// "pow" (sparse, 0-D dense > 0): values ** e, same pattern.
std::vector<Tensor> pow_on_values(const std::vector<Tensor>& in, const Attrs& attrs);

// COO +- COO: both entry lists, one after the other (an uncoalesced COO with
// a fresh pattern version).
std::vector<Tensor> coo_concat(const std::vector<Tensor>& in, bool subtract, std::string_view op);

// "transpose" of any format (sparse_transpose).
std::vector<Tensor> transpose(const std::vector<Tensor>& in, const Attrs& attrs);

}  // namespace coppice::sparse_kernels

// Differentiable linear algebra.
#pragma once

#include "autograd/variable.h"

namespace coppice {

// NumPy matmul (1-D operands promoted, batch dims broadcast); batch
// broadcasting is undone in the backward pass by summing.
Variable matmul(const Variable& a, const Variable& b);
// [b, m, k] x [b, k, n]; a sparse operand (a 3-D COO) runs as one SpMM
// over its block-diagonal form (einsum.h), its gradient in its format.
Variable bmm(const Variable& a, const Variable& b);
// x [..., in] times weight [out, in] transposed, plus bias [out] when defined.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias = Variable());
// relu(linear(x, weight, bias)) as one node, computed by tensor's linear_relu
// (one kernel where it has one). The node saves the output y, not the
// pre-activation (no extra tensor kept alive): backward is linear's applied
// to relu_backward(g, y). Gradients equal those of the composite.
Variable linear_relu(const Variable& x, const Variable& weight, const Variable& bias = Variable());

}  // namespace coppice

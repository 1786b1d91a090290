// The straight-through projection of a dense weight onto a sparse pattern
// (the STE of SR-STE, optim/sr_ste.h): forward sees the sparse tensor P that
// holds the dense W's values at the pattern's positions, so the products run
// on P's format (n:m kernels for an n:m pattern); backward hands W the
// gradient with respect to P as if P were dense, at every position, pruned
// ones included.
//
// The products of functions/sparse.h (linear, linear_relu, matmul) and
// to_dense give a sparse operand that came from here its gradient densely
// (g^T x instead of the SDDMM at the pattern); this node passes that gradient
// on to W unchanged. Any other op (mul, add, values, ...) gives a sparse
// operand its gradient at the stored positions only, which would be no
// straight-through estimate: such a gradient reaching the node throws,
// naming the op that can give it densely.
#pragma once

#include "autograd/variable.h"

namespace coppice {

// with_values(pattern, W at pattern's positions), recorded so that W's
// gradient is the dense gradient of the result. `dense` must be dense and of
// pattern's shape, dtype and device; `pattern` sparse (its values unused).
Variable straight_through(const Variable& dense, const Tensor& pattern);

// Whether `v` is the result of straight_through (its gradient must be dense).
bool wants_dense_gradient(const Variable& v);

}  // namespace coppice

// A fused inline sparsifier, as an example for kernels to follow: relu whose
// output goes straight into CSR, keeping relu(x) > threshold, in one pass over
// x (no dense relu(x), no mask, no separate conversion).
//
//   SparsifiedOp op = sparsified_relu({threshold_sparsifier, {"csr"}, nullptr, {"csr"}});
//
// runs relu_to_csr when x is a 2-D f32/f64 CPU tensor and the inline
// sparsifier is null or ThresholdFusable (fusable.h), and the generic path
// (relu, then the sparsifier) otherwise; both give the same value and gradient.
#pragma once

#include "autograd/variable.h"
#include "sparsifiers/sparsified_op.h"

namespace coppice {

// relu(x) at the entries where it exceeds `threshold` (>= 0), as CSR. x: a
// dense 2-D f32 or f64 tensor on the CPU. The gradient of x is the incoming
// gradient at the stored entries (where relu' is 1), zero elsewhere.
Variable relu_to_csr(const Variable& x, double threshold = 0.0);

// The FusedForward of relu for SparsifiedOp (declines what relu_to_csr cannot do).
FusedForward fused_relu();

// relu as a sparsified op with the fused kernel; `output` as in SparsifiedOp.
SparsifiedOp sparsified_relu(ValueSparsity output, ValueSparsity input_grad = {});

}  // namespace coppice

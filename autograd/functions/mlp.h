// A transformer's MLP, linear -> gelu -> linear, as one differentiable node,
// so that the gelu and its gradient can run inside the products around them.
#pragma once

#include "autograd/functions/residual.h"
#include "autograd/variable.h"
#include "tensor/ops.h"

namespace coppice {

// linear(gelu(linear(x, w1, b1)), w2, b2) as one node. Forward: tensor's
// linear_gelu (the pre-activation z and gelu(z) from one kernel where one
// exists: a BSR w1 on CUDA), then linear. Backward: the gradient at z from
// matmul_gelu_backward (gelu's gradient in the product's write-out where one
// exists: a BSR w2 on CUDA), then each layer's gradients as linear gives
// them: a sparse weight's at its pattern (the SDDMM, offered to
// GradientProbe), a straight-through projection's whole. It saves what the
// three nodes would (x, z, gelu(z)). x dense (a sparse x takes the three
// nodes), the weights in any format; values and gradients equal the
// composite's. `form`: gelu (kErf) or gelu_tanh (kTanh) as the activation.
Variable gelu_mlp(const Variable& x, const Variable& w1, const Variable& b1, const Variable& w2, const Variable& b2,
                  GeluForm form = GeluForm::kErf);
// h + gelu_mlp(x, ...) as a residual stream (residual.h): {the sum,
// undefined} with h added in w2's product's write-out where a kernel does
// (linear_add_fused; the node then passes its output's gradient on to h),
// else {h, gelu_mlp(x, ...)}, the add left pending.
ResidualStream gelu_mlp_residual(const Variable& h, const Variable& x, const Variable& w1, const Variable& b1,
                                 const Variable& w2, const Variable& b2, GeluForm form = GeluForm::kErf);

}  // namespace coppice

// Training in bf16/f16 (precision.dtype): the model's parameters and
// activations in 16 bits, the loss in f32 (as torch's autocast computes
// cross-entropy), the optimizer on f32 master weights (optim/optimizer.h)
// and, for f16, a loss scale (optim/loss_scaler.h).
//
// The activations' dtype is the model's: the loop casts floating inputs to
// the dtype of the model's parameters and the logits to f32, so an f32 model
// runs exactly as before.
#pragma once

#include "autograd/variable.h"
#include "models/module.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace coppice {

// Casts every floating parameter (dense values, or the values of a sparse
// one: its pattern and pattern version are kept) and floating buffer of
// `model` to `dtype`, as new leaves with the same names and requires_grad.
// Call it before an optimizer or a mask updater takes the parameters.
void cast_parameters(Module& model, DType dtype);

// The dtype of the model's first floating parameter (f32 when it has none).
DType model_dtype(const Module& model);

// `inputs` in `dtype` when both are floating (integer token ids stay; a
// sparse input keeps its pattern, its values cast).
Tensor cast_inputs(const Tensor& inputs, DType dtype);

// A gradient (any format) divided by a loss scale (itself when scale is 1);
// dense ones in f32 for a 16-bit gradient.
Tensor unscale_gradient(const Tensor& grad, double scale);

// Logits in f32 for the loss and the metrics (differentiable).
Variable logits_for_loss(const Variable& logits);

}  // namespace coppice

#include "train/mixed_precision.h"

#include "autograd/functions/shape.h"
#include "autograd/no_grad.h"
#include "optim/optimizer.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"

namespace coppice {

void cast_parameters(Module& model, DType dtype) {
  NoGradGuard no_grad;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!is_floating(p.dtype()) || p.dtype() == dtype) continue;
    const Tensor& v = p.value();
    const Tensor cast = v.is_dense() ? v.to(dtype).contiguous() : with_values(v, values(v).to(dtype).contiguous());
    model.set_parameter(name, Variable(cast, p.requires_grad(), name));
  }
  for (const auto& [name, b] : model.named_buffers()) {
    if (is_floating(b.dtype()) && b.dtype() != dtype) model.set_buffer(name, b.to(dtype));
  }
}

DType model_dtype(const Module& model) {
  for (const auto& [name, p] : model.named_parameters()) {
    if (is_floating(p.dtype())) return p.dtype();
  }
  return DType::kF32;
}

Tensor cast_inputs(const Tensor& inputs, DType dtype) {
  if (!is_floating(inputs.dtype()) || !is_floating(dtype) || inputs.dtype() == dtype) return inputs;
  // Sparse inputs (a graph's CSR features) keep their pattern; only the
  // stored values change type.
  if (inputs.is_sparse()) return with_values(inputs, values(inputs).to(dtype));
  return inputs.to(dtype);
}

Tensor unscale_gradient(const Tensor& grad, double scale) {
  if (scale == 1.0) return grad;
  if (grad.is_dense()) return mul(grad.to(optimizer_state_dtype(grad.dtype())), 1.0 / scale);
  return with_values(grad, mul(values(grad), 1.0 / scale));
}

Variable logits_for_loss(const Variable& logits) {
  if (logits.dtype() == DType::kBF16 || logits.dtype() == DType::kF16) return to_dtype(logits, DType::kF32);
  return logits;
}

}  // namespace coppice

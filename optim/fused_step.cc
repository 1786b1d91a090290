#include "optim/fused_step.h"

namespace coppice {

bool fused_step_applies(std::string_view op, const Tensor& p, std::initializer_list<const Tensor*> others) {
  if (!p.defined() || (p.dtype() != DType::kF32 && p.dtype() != DType::kF64)) return false;
  if (!p.is_dense() || !p.is_contiguous()) return false;
  for (const Tensor* t : others) {
    if (!t->defined() || !t->is_dense() || !t->is_contiguous() || t->dtype() != p.dtype() ||
        t->device() != p.device() || t->shape() != p.shape()) {
      return false;
    }
  }
  return Dispatcher::instance().has_kernel(op, p.device().type);
}

void run_fused_step(std::string_view op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  dispatch(op, inputs, attrs);
}

}  // namespace coppice

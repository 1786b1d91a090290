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

void run_fused_step(std::string_view op, std::vector<Tensor> inputs, const Attrs& attrs, const Tensor& nonfinite) {
  if (nonfinite.defined()) {
    COPPICE_CHECK(nonfinite.dtype() == DType::kF32 && nonfinite.numel() == 1 && nonfinite.is_dense() &&
                      nonfinite.device() == inputs[0].device(),
                  op, ": the non-finite flag must be one f32 element on ", inputs[0].device().to_string(), ", got ",
                  dtype_name(nonfinite.dtype()), " ", shape_to_string(nonfinite.shape()), " on ",
                  nonfinite.device().to_string());
  }
  inputs.push_back(nonfinite);
  dispatch(op, inputs, attrs);
}

FusedStepRegistrar::FusedStepRegistrar(const std::string& op, DeviceType device, std::vector<std::string> formats,
                                       Kernel kernel) {
  for (const char* flag : {"dense", "none"}) {
    std::vector<std::string> f = formats;
    f.push_back(flag);
    Dispatcher::instance().register_kernel(op, device, std::move(f), kernel);
  }
}

}  // namespace coppice

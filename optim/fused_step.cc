#include "optim/fused_step.h"

#include <utility>

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

void run_fused_step(std::string_view op, std::vector<Tensor> inputs, const Attrs& attrs, const Tensor& nonfinite,
                    const Tensor& factor) {
  const std::pair<const char*, const Tensor*> extras[] = {{"non-finite flag", &nonfinite}, {"clip factor", &factor}};
  for (const auto& [what, t] : extras) {
    if (!t->defined()) continue;
    COPPICE_CHECK(t->dtype() == DType::kF32 && t->numel() == 1 && t->is_dense() && t->device() == inputs[0].device(),
                  op, ": the ", what, " must be one f32 element on ", inputs[0].device().to_string(), ", got ",
                  dtype_name(t->dtype()), " ", shape_to_string(t->shape()), " on ", t->device().to_string());
  }
  inputs.push_back(nonfinite);
  inputs.push_back(factor);
  dispatch(op, inputs, attrs);
}

FusedStepRegistrar::FusedStepRegistrar(const std::string& op, DeviceType device, std::vector<std::string> formats,
                                       Kernel kernel) {
  for (const char* flag : {"dense", "none"}) {
    for (const char* factor : {"dense", "none"}) {
      std::vector<std::string> f = formats;
      f.push_back(flag);
      f.push_back(factor);
      Dispatcher::instance().register_kernel(op, device, std::move(f), kernel);
    }
  }
}

}  // namespace coppice

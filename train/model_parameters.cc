#include "train/model_parameters.h"

#include "autograd/sparse_grad.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"
#include "train/mixed_precision.h"

namespace coppice {

std::vector<std::string> sparse_parameter_names(const Module& model) {
  std::vector<std::string> names;
  for (const auto& [name, p] : model.named_parameters())
    if (p.value().is_sparse()) names.push_back(name);
  return names;
}

Tensor ModelParameters::value(const std::string& name) const { return model_.parameter(name).value(); }

Tensor ModelParameters::unscaled_gradient(const std::string& name, double loss_scale) const {
  const Variable& w = model_.parameter(name);
  return w.grad().defined() ? unscale_gradient(w.grad(), loss_scale) : Tensor();
}

// The first of the optimizers' momentum-like states (SGD's momentum buffer,
// Adam's first moment) that the parameter has, scattered to its dense shape.
Tensor ModelParameters::dense_momentum(const std::string& name) const {
  const Variable param = model_.parameter(name);
  const ParamState* st = optimizer_.state(param);
  const Tensor* m = nullptr;
  if (st != nullptr) {
    for (const char* key : {"momentum_buffer", "exp_avg"}) {
      auto it = st->tensors.find(key);
      if (it != st->tensors.end()) {
        m = &it->second;
        break;
      }
    }
  }
  if (m == nullptr) return zeros(param.shape(), {param.dtype(), param.device()});
  return param.value().is_dense() ? *m : to_dense(with_values(param.value(), *m));
}

void ModelParameters::add_to_gradient(const std::string& name, const Tensor& delta) {
  const Variable& w = model_.parameter(name);
  w.set_grad(w.grad().defined() ? accumulate_grads(w.grad(), delta, "add_to_gradient") : delta);
}

void ModelParameters::replace(const std::string& name, const Tensor& new_param, const Tensor& keep_from) {
  // In place: the model's slot, the optimizer's group and every other holder keep the same Variable.
  optimizer_.set_value(model_.parameter(name), new_param, keep_from);
}

}  // namespace coppice

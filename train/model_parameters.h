// The ParameterStore (optim/parameter_store.h) of a training run: the model's
// parameters by name, with the optimizer that holds their state, so that a
// mask schedule can change a pattern in both at once.
#pragma once

#include <string>
#include <vector>

#include "models/module.h"
#include "optim/optimizer.h"
#include "optim/parameter_store.h"

namespace coppice {

// The names of the model's sparse parameters, in its order (what
// TrainComponents::densify_step makes dense).
std::vector<std::string> sparse_parameter_names(const Module& model);

class ModelParameters : public ParameterStore {
 public:
  ModelParameters(Module& model, Optimizer& optimizer) : model_(model), optimizer_(optimizer) {}

  Tensor value(const std::string& name) const override;
  Tensor unscaled_gradient(const std::string& name, double loss_scale) const override;
  Tensor dense_momentum(const std::string& name) const override;
  void add_to_gradient(const std::string& name, const Tensor& delta) override;
  void replace(const std::string& name, const Tensor& new_param, const Tensor& keep_from) override;

 private:
  Module& model_;
  Optimizer& optimizer_;
};

}  // namespace coppice

// What a mask schedule (optim/mask_schedule.h) may read and change of the
// parameters being trained: a narrow view of the model and the optimizer
// that hold them, so that optim/ needs neither (the trainer implements it
// over its Module and Optimizer). Parameters are named as in the model.
#pragma once

#include <string>

#include "tensor/tensor.h"

namespace coppice {

class ParameterStore {
 public:
  virtual ~ParameterStore() = default;

  // The parameter's current value (sparse ones in their format).
  virtual Tensor value(const std::string& name) const = 0;
  // Its gradient divided by `loss_scale` (the scale backward ran with);
  // undefined when backward left none.
  virtual Tensor unscaled_gradient(const std::string& name, double loss_scale) const = 0;
  // The optimizer's momentum-like state of the parameter as a dense tensor of
  // its shape (zeros before the first step).
  virtual Tensor dense_momentum(const std::string& name) const = 0;
  // Adds `delta` (the parameter's shape, dense) to its gradient, or makes it
  // the gradient when backward left none (terms a method adds to what
  // backward gave, such as SR-STE's sparse-refined decay, sr_ste.h).
  virtual void add_to_gradient(const std::string& name, const Tensor& delta) = 0;
  // Gives the parameter the value `new_param` (a new pattern, or dense after
  // densify.h) in the model and in the optimizer, whose state for each new
  // slot comes from old slot keep_from[i] (-1: fresh), as MaskChange
  // describes. The trainer's store (train/model_parameters.h) does it in
  // place (Optimizer::set_value): the parameter stays the same Variable, so
  // whoever holds it sees the new value and the optimizer needs no rebuild.
  virtual void replace(const std::string& name, const Tensor& new_param, const Tensor& keep_from) = 0;
};

}  // namespace coppice

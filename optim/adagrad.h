// Adagrad, as torch.optim.Adagrad (maximize and foreach aside):
//   g = grad + weight_decay * p
//   clr = lr / (1 + (step - 1) * lr_decay)
//   sum = sum + g * g
//   p = p - clr * g / (sqrt(sum) + eps)
// State: "sum", starting at initial_accumulator_value. Dense parameters, the
// values of sparse ones (optim/optimizer.h), and dense parameters with a
// row-sparse gradient (an embedding's sparse_grad): Optimizer::step_rows
// steps only the rows the gradient holds, so a row's sum grows only on the
// steps that use it (torch's sparse Adagrad does the same), the step count
// and so clr's decay are the parameter's (every step), and weight decay
// reaches only those rows. Tensor ops, no fused kernel: the same ops on
// every device.
#pragma once

#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace coppice {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;

  // As hyperparameters: "lr", "lr_decay", "weight_decay",
  // "initial_accumulator_value", "eps".
  Hyperparameters to_hyperparameters() const;
};

class Adagrad final : public Optimizer {
 public:
  Adagrad(std::vector<Variable> params, const AdagradOptions& options);
  Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& defaults);

  std::vector<std::string> state_names(const Hyperparameters& options) const override;

 protected:
  Tensor update(const Tensor& p, const Tensor& g, const Hyperparameters& options, ParamState& state,
                bool in_place) override;
  void validate(const Hyperparameters& options, size_t group) const override;
  // "sum" at initial_accumulator_value, whole, so rows a row-sparse step
  // leaves alone keep it.
  void init_state(const Tensor& p, const Hyperparameters& options, ParamState& state) const override;
};

}  // namespace coppice

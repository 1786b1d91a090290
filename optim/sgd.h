// Stochastic gradient descent with momentum, dampening, Nesterov momentum and
// weight decay, as torch.optim.SGD (maximize and foreach aside):
//   g = grad + weight_decay * p
//   buf = g                                  (first step)
//   buf = momentum * buf + (1 - dampening) * g (later steps)
//   g = nesterov ? g + momentum * buf : buf  (when momentum != 0)
//   p = p - lr * g
// State: "momentum_buffer" (only when momentum != 0). Sparse parameters: see
// optim/optimizer.h. Contiguous f32/f64 values (dense parameters, the values
// of sparse ones but masked, and the f32 master weights of bf16/f16
// parameters) take one fused kernel (optim/sgd_step.h, CPU twin and CUDA)
// that updates them and the buffer in place, bit for bit as the chain of
// tensor ops (mul, add, sub, each a launch and a temporary) it replaces.
#pragma once

#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace coppice {

struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;

  // As hyperparameters: "lr", "momentum", "dampening", "weight_decay",
  // "nesterov" (0 or 1).
  Hyperparameters to_hyperparameters() const;
};

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<Variable> params, const SgdOptions& options);
  Sgd(std::vector<ParamGroup> groups, const SgdOptions& defaults);

  std::vector<std::string> state_names(const Hyperparameters& options) const override;

 protected:
  Tensor update(const Tensor& p, const Tensor& g, const Hyperparameters& options, ParamState& state,
                bool in_place) override;
  // One pass over the f32 master, the buffer and the 16-bit gradient and
  // parameter: fused_sgd_step_mixed (optim/sgd_step.h).
  bool update_mixed(const Tensor& master, const Tensor& g16, const Tensor& p16, const Hyperparameters& options,
                    ParamState& state) override;
  // Into one launch with the others of its group (optim/multi_tensor.h).
  bool queue_multi(const MultiCandidate& c, const Hyperparameters& options, ParamState& state,
                   MultiStepQueue& queue) override;
  void validate(const Hyperparameters& options, size_t group) const override;
};

}  // namespace coppice

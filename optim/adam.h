// Adam and AdamW, as torch.optim.Adam / AdamW (amsgrad, maximize and
// capturable aside). With t = state.step after its increment:
//   Adam:  g = grad + weight_decay * p           (L2, coupled)
//   AdamW: p = p * (1 - lr * weight_decay)       (decoupled, before the step)
//   m = beta1 * m + (1 - beta1) * g              (exp_avg)
//   v = beta2 * v + (1 - beta2) * g * g          (exp_avg_sq)
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps    (eps outside the sqrt, after bias correction)
//   p = p - (lr / (1 - beta1^t)) * m / denom
// State: "exp_avg", "exp_avg_sq", zeros before the first step. Sparse
// parameters: see optim/optimizer.h. Dense contiguous f32/f64 parameters
// (and sparse ones but masked) run one fused kernel (optim/cuda/adam_step.h,
// CPU twin and CUDA) instead of a chain of tensor ops; on CUDA the f32 ones
// and the 16-bit ones with f32 master weights step together, one launch a
// group (optim/multi_tensor.h).
#pragma once

#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace coppice {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // AdamW's default is 1e-2 (AdamWOptions)

  // As hyperparameters: "lr", "beta1", "beta2", "eps", "weight_decay".
  Hyperparameters to_hyperparameters() const;
};

struct AdamWOptions : AdamOptions {
  AdamWOptions() { weight_decay = 1e-2; }
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Variable> params, const AdamOptions& options);
  Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults);

  std::vector<std::string> state_names(const Hyperparameters& options) const override;

 protected:
  Adam(std::string name, std::vector<ParamGroup> groups, const AdamOptions& defaults, bool decoupled);
  Tensor update(const Tensor& p, const Tensor& g, const Hyperparameters& options, ParamState& state,
                bool in_place) override;
  // Into one launch with the others of its group and step count
  // (optim/multi_tensor.h).
  bool queue_multi(const MultiCandidate& c, const Hyperparameters& options, ParamState& state,
                   MultiStepQueue& queue) override;
  void validate(const Hyperparameters& options, size_t group) const override;

 private:
  bool decoupled_;
};

class AdamW final : public Adam {
 public:
  AdamW(std::vector<Variable> params, const AdamWOptions& options = {});
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& defaults);
};

}  // namespace coppice

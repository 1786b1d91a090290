// Gradient clipping by the global norm, as torch.nn.utils.clip_grad_norm_.
#pragma once

#include <string>
#include <vector>

#include "autograd/variable.h"

namespace coppice {

// The p-norm (norm_type 2, 1, ... or infinity) of all gradients of `params`
// together, as if concatenated; sparse gradients count their stored values
// only (a masked gradient its mask-true values). Parameters without a
// gradient are skipped. When the norm exceeds max_norm, every gradient is
// scaled by max_norm / (norm + 1e-6) (torch's formula; it is replaced, not
// written in place, keeping its pattern). Returns the norm before clipping.
// As in torch (error_if_nonfinite=False), an infinite norm scales every
// gradient by 0 and a NaN norm makes every gradient NaN.
double clip_grad_norm(const std::vector<Variable>& params, double max_norm, double norm_type = 2.0);

// The same norm, without clipping.
double grad_norm(const std::vector<Variable>& params, double norm_type = 2.0);

// The norm, and what the host reads that make it tell for free: the name of
// the first parameter (Variable::name(), "parameter <i>" when unnamed) whose
// gradient's own norm is not finite, "" when every one is. Exact for finite
// norm types (an inf or a NaN makes a p-norm inf or NaN); the trainer's
// per-step check of non-finite gradients when it clips (optim/finite_check.h).
struct GradNorm {
  double total = 0.0;
  std::string first_nonfinite;
};
GradNorm grad_norm_checked(const std::vector<Variable>& params, double norm_type = 2.0);
// clip_grad_norm, returning the same.
GradNorm clip_grad_norm_checked(const std::vector<Variable>& params, double max_norm, double norm_type = 2.0);

}  // namespace coppice

// Gradient clipping by the global norm, as torch.nn.utils.clip_grad_norm_:
// read to the host (clip_grad_norm, the gradients rescaled in place), or
// kept on the device (clip_grad_norm_on_device: the norm and the factor that
// the optimizer's fused kernels multiply each gradient by as they read it,
// Optimizer::step's grad_factor), so that a step clips without a host read.
#pragma once

#include <string>
#include <vector>

#include "autograd/variable.h"
#include "optim/finite_check.h"
#include "tensor/tensor.h"

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

// The same norm and clipping decision on the device, with no host read:
// `norm` is the global p-norm (grad_norm's, in f32: the partial norms
// accumulated in f64, each parameter's, summed on the device) and `factor`
// is min(1, max_norm / (norm + 1e-6)) (torch's formula; f32: the scalar that
// clip_grad_norm's mul rounds its coefficient to for f32 gradients), or NaN
// when the norm is not finite: hand it to Optimizer::step as grad_factor and
// the step is skipped on the device. Both are f32 0-d tensors on the
// gradients' device (all gradients on one; the first parameter's device
// when none has a gradient: norm 0, factor 1). The gradients are not
// touched. With `nonfinite` (slots in the order of `params`), a parameter
// whose own gradient norm is not finite has its slot set, as
// grad_norm_checked names it, so the caller's one host read of the flags
// names it. On CUDA, a launch or two for every 64 gradients and one more
// (optim/multi_tensor.h); on the CPU, the partial norms in f64 on the host.
struct DeviceClip {
  Tensor norm;
  Tensor factor;
};
DeviceClip clip_grad_norm_on_device(const std::vector<Variable>& params, double max_norm, double norm_type = 2.0,
                                    NonfiniteFlag* nonfinite = nullptr);

}  // namespace coppice

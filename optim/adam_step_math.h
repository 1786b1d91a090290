// The per-element arithmetic of the fused Adam/AdamW step (optim/adam_step.h),
// shared by the CPU twin and the CUDA kernel (optim/cuda/adam_step.cu);
// plain C++ that nvcc also compiles, so it includes no tensor headers.
#pragma once

#include <cmath>
#include <cstdint>

#include "optim/fused_step_math.h"

namespace coppice {

struct AdamStepArgs {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled = false;  // AdamW
  int64_t step = 1;        // after its increment

  // Every field with its name: the dispatcher's attributes (optim/fused_step.h).
  template <typename F>
  void for_each_field(F&& f) {
    f("lr", lr);
    f("beta1", beta1);
    f("beta2", beta2);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("decoupled", decoupled);
    f("step", step);
  }
};

// The per-element constants, rounded to T as the tensor-op path rounds them.
template <typename T>
struct AdamStepConstants {
  T decay_keep;    // 1 - lr * weight_decay (decoupled)
  T weight_decay;  // coupled
  T one_minus_beta1, beta2, one_minus_beta2;
  T bias_correction2_sqrt, eps, step_size;
  bool decoupled, has_decay;

  static AdamStepConstants make(const AdamStepArgs& a) {
    const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
    const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
    AdamStepConstants c;
    c.decay_keep = static_cast<T>(1.0 - a.lr * a.weight_decay);
    c.weight_decay = static_cast<T>(a.weight_decay);
    c.one_minus_beta1 = static_cast<T>(1.0 - a.beta1);
    c.beta2 = static_cast<T>(a.beta2);
    c.one_minus_beta2 = static_cast<T>(1.0 - a.beta2);
    c.bias_correction2_sqrt = static_cast<T>(std::sqrt(bc2));
    c.eps = static_cast<T>(a.eps);
    c.step_size = static_cast<T>(a.lr / bc1);
    c.decoupled = a.decoupled;
    c.has_decay = a.weight_decay != 0.0;
    return c;
  }
};

COPPICE_OPTIM_HD inline float adam_sqrt(float x) { return ::sqrtf(x); }
COPPICE_OPTIM_HD inline double adam_sqrt(double x) { return ::sqrt(x); }

// One element: p, m, v updated in place. Every product and sum rounded on
// its own (fused_step_math.h), so that nvcc contracts nothing into a fused
// multiply-add: the CUDA kernels agree with the CPU twin bit for bit, and a
// kernel that inlines this elsewhere (the multi-tensor step,
// optim/cuda/multi_step.cu) with the per-parameter kernel.
template <typename T>
COPPICE_OPTIM_HD inline void adam_step_element(T& p, T g, T& m, T& v, const AdamStepConstants<T>& c) {
  if (c.has_decay) {
    if (c.decoupled) {
      p = mul_rn(p, c.decay_keep);
    } else {
      g = add_rn(g, mul_rn(p, c.weight_decay));
    }
  }
  m = add_rn(m, mul_rn(sub_rn(g, m), c.one_minus_beta1));
  v = add_rn(mul_rn(v, c.beta2), mul_rn(mul_rn(g, c.one_minus_beta2), g));
  const T denom = add_rn(adam_sqrt(v) / c.bias_correction2_sqrt, c.eps);
  p = sub_rn(p, mul_rn(m / denom, c.step_size));
}

}  // namespace coppice

// The fused Adam/AdamW step over a flat array of values (one pass instead of
// a chain of tensor ops), registered with the dispatcher as "adam_step" on
// the CPU (here) and on CUDA (optim/cuda/adam_step.cu, the CPU being its
// twin). Each element follows optim/adam.h's formulas with the scalars
// rounded to the values' dtype first, exactly as the tensor-op path rounds
// them, so on the CPU the two agree bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/tensor.h"

#if defined(__CUDACC__)
#define COPPICE_OPTIM_HD __host__ __device__
#else
#define COPPICE_OPTIM_HD
#endif

namespace coppice {

struct AdamStepArgs {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled = false;  // AdamW
  int64_t step = 1;        // after its increment
};

// The per-element constants, rounded to T as the tensor-op path rounds them.
template <typename T>
struct AdamStepConstants {
  T decay_keep;           // 1 - lr * weight_decay (decoupled)
  T weight_decay;         // coupled
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

COPPICE_OPTIM_HD inline float adam_sqrt(float x) { return sqrtf(x); }
COPPICE_OPTIM_HD inline double adam_sqrt(double x) { return sqrt(x); }

// One element: p, m, v updated in place.
template <typename T>
COPPICE_OPTIM_HD inline void adam_step_element(T& p, T g, T& m, T& v, const AdamStepConstants<T>& c) {
  if (c.has_decay) {
    if (c.decoupled) {
      p = p * c.decay_keep;
    } else {
      g = g + p * c.weight_decay;
    }
  }
  m = m + (g - m) * c.one_minus_beta1;
  v = v * c.beta2 + (g * c.one_minus_beta2) * g;
  const T denom = adam_sqrt(v) / c.bias_correction2_sqrt + c.eps;
  p = p - (m / denom) * c.step_size;
}

// The CPU twin over n contiguous elements.
template <typename T>
void adam_step_cpu(T* p, const T* g, T* m, T* v, int64_t n, const AdamStepArgs& args);

// Runs the fused step in place when a kernel "adam_step" is registered for
// the tensors' device and all four are dense, contiguous, f32 or f64, of one
// dtype, shape and device; returns false (touching nothing) otherwise.
bool fused_adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamStepArgs& args);

// Dispatcher attributes <-> AdamStepArgs (for the kernels).
class Attrs;
AdamStepArgs adam_step_args(const Attrs& attrs);

}  // namespace coppice

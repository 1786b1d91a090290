// The kernel variants of a fused step (optim/fused_step.h): with or without
// the non-finite test of the gradient, with or without the clip factor. Each
// is a template argument of the kernels, so a step without them pays
// nothing for them; with_step_variant picks the instance once per launch.
#pragma once

#include <type_traits>

#include "optim/finite_check_math.h"

namespace coppice::optim_cuda {

// Calls f(check, scale) with std::bool_constant values for the two.
template <typename F>
void with_step_variant(bool check, bool scale, F&& f) {
  if (check) {
    if (scale) {
      f(std::true_type{}, std::true_type{});
    } else {
      f(std::true_type{}, std::false_type{});
    }
  } else if (scale) {
    f(std::false_type{}, std::true_type{});
  } else {
    f(std::false_type{}, std::false_type{});
  }
}

#if defined(__CUDACC__)
// In a kernel: the clip factor as T, or false when the step is to be skipped
// (the factor is not finite: the gradients' norm was not). Every thread
// reads the same word (one transaction, cached). Without kScale, 1.
template <bool kScale, typename T>
__device__ inline bool read_clip_factor(const float* factor, T* f) {
  if constexpr (kScale) {
    const float v = *factor;
    if (clip_factor_skips(v)) return false;
    *f = static_cast<T>(v);
  } else {
    *f = T(1);
  }
  return true;
}

// g times the factor under kScale (one rounding), g otherwise.
template <bool kScale, typename T>
__device__ inline T scale_gradient(T g, T f) {
  if constexpr (kScale) {
    return mul_rn(g, f);
  } else {
    return g;
  }
}
#endif

}  // namespace coppice::optim_cuda

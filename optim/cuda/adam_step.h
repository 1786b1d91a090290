// The fused Adam/AdamW step on CUDA (the CPU twin is adam_step_cpu in
// optim/adam_step.h): n contiguous elements of p, g, m, v on the device;
// nonfinite is null (no test) or a device flag set to NaN when an element of
// g is inf or NaN; factor is null or the device clip factor (optim/fused_step.h):
// each g read multiplied by it, the step skipped when it is not finite.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "optim/adam_step_math.h"

namespace coppice::optim_cuda {

template <typename T>
void adam_step(T* p, const T* g, T* m, T* v, int64_t n, const AdamStepArgs& args, float* nonfinite, const float* factor,
               cudaStream_t stream);

}  // namespace coppice::optim_cuda

// The fused SGD step on CUDA (the CPU twin is sgd_step_cpu in
// optim/sgd_step.h): n contiguous elements of p, g and buf on the device;
// buf is null when there is no momentum; nonfinite is null (no test) or a
// device flag set to NaN when an element of g is inf or NaN; factor is null
// or the device clip factor (optim/fused_step.h): each g read multiplied by
// it, the step skipped when it is not finite.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "optim/sgd_step_math.h"
#include "tensor/half.h"

namespace coppice::optim_cuda {

template <typename T>
void sgd_step(T* p, const T* g, T* buf, int64_t n, const SgdStepArgs& args, float* nonfinite, const float* factor,
              cudaStream_t stream);

// The mixed-precision step (sgd_step_mixed_cpu in optim/sgd_step.h is the
// twin): f32 master and buf, 16-bit gradient and parameter, G BFloat16 or Half.
template <typename G>
void sgd_step_mixed(float* master, const G* g16, float* buf, G* p16, int64_t n, const SgdStepArgs& args,
                    float* nonfinite, const float* factor, cudaStream_t stream);

}  // namespace coppice::optim_cuda

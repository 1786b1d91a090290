// The fused Adam/AdamW step over a flat array of values (one pass instead of
// a chain of tensor ops), registered with the dispatcher as "adam_step" on
// the CPU (here) and on CUDA (optim/cuda/adam_step.cu, the CPU being its
// twin). Each element follows optim/adam.h's formulas with the scalars
// rounded to the values' dtype first, exactly as the tensor-op path rounds
// them, so on the CPU the two agree bit for bit (on CUDA, nvcc's fused
// multiply-adds may differ in the last bit; the parity test allows for it).
#pragma once

#include <cstdint>

#include "optim/adam_step_math.h"
#include "tensor/tensor.h"

namespace coppice {

// The CPU twin over n contiguous elements.
template <typename T>
void adam_step_cpu(T* p, const T* g, T* m, T* v, int64_t n, const AdamStepArgs& args);

// Runs the fused step in place when a kernel "adam_step" is registered for
// the tensors' device and all four are dense, contiguous, f32 or f64, of one
// dtype, shape and device; returns false (touching nothing) otherwise.
bool fused_adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamStepArgs& args);

}  // namespace coppice

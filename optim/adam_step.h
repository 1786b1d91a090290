// The fused Adam/AdamW step over a flat array of values (one pass instead of
// a chain of tensor ops), registered with the dispatcher as "adam_step" on
// the CPU (here) and on CUDA (optim/cuda/adam_step.cu, the CPU being its
// twin). Each element follows optim/adam.h's formulas with the scalars
// rounded to the values' dtype first, exactly as the tensor-op path rounds
// them, and every product and sum rounded on its own (adam_step_math.h), so
// the CPU twin, the CUDA kernel and the CPU tensor-op path agree bit for bit.
//
// Both take an optional non-finite flag (optim/fused_step.h): the kernel
// tests every gradient element it reads (bitwise, optim/finite_check_math.h)
// and sets the flag to NaN when one is inf or NaN; what it writes is the
// same bits with the flag or without (Optimizer::step's `nonfinite`). And an
// optional clip factor (optim/fused_step.h): each gradient element is
// multiplied by it as it is read, and a factor that is not finite skips the
// step (nothing written).
#pragma once

#include <cstdint>

#include "optim/adam_step_math.h"
#include "tensor/tensor.h"

namespace coppice {

// The CPU twin over n contiguous elements.
template <typename T>
void adam_step_cpu(T* p, const T* g, T* m, T* v, int64_t n, const AdamStepArgs& args, float* nonfinite = nullptr,
                   const float* factor = nullptr);

// Runs the fused step in place when a kernel "adam_step" is registered for
// the tensors' device and all four are dense, contiguous, f32 or f64, of one
// dtype, shape and device; returns false (touching nothing) otherwise.
// `nonfinite`: undefined, or the flag (one f32 element on p's device);
// `factor`: undefined, or the clip factor (the same).
bool fused_adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamStepArgs& args,
                     const Tensor& nonfinite = Tensor(), const Tensor& factor = Tensor());

}  // namespace coppice

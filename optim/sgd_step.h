// The fused SGD step over a flat array of values (one pass instead of
// Sgd::update's chain of mul/add/sub, each allocating a temporary),
// registered with the dispatcher as "sgd_step" on the CPU (here) and on CUDA
// (optim/cuda/sgd_step.cu, the CPU being its twin). Each element follows
// optim/sgd.h's formulas with the scalars rounded to the values' dtype and
// every product and sum rounded on its own, exactly as the tensor-op path
// does, so the CPU twin, the CUDA kernel and the op path agree bit for bit.
//
// Each takes an optional non-finite flag (optim/fused_step.h): the kernel
// tests every gradient element it reads (bitwise, optim/finite_check_math.h)
// and sets the flag to NaN when one is inf or NaN, leaving it alone
// otherwise; the parameter and buffer it writes are the same bits with the
// flag or without. This is the trainer's per-step gradient check at no pass
// of its own (Optimizer::step's `nonfinite`). And an optional clip factor
// (optim/fused_step.h): each gradient element is multiplied by it as it is
// read (one rounding, as clip_grad_norm's mul), and a factor that is not
// finite skips the step (nothing written).
#pragma once

#include <cstdint>

#include "optim/sgd_step_math.h"
#include "tensor/half.h"
#include "tensor/tensor.h"

namespace coppice {

// The CPU twin over n contiguous elements; buf is null when there is no
// momentum; nonfinite is null (no test) or the flag.
template <typename T>
void sgd_step_cpu(T* p, const T* g, T* buf, int64_t n, const SgdStepArgs& args, float* nonfinite = nullptr,
                  const float* factor = nullptr);

// Runs the fused step in place (p, and buf when args.momentum != 0) when a
// kernel "sgd_step" is registered for p's device and p, g (and buf when
// used) are dense, contiguous, f32 or f64, of one dtype, shape and device;
// returns false (touching nothing) otherwise. With args.first, buf must
// still be allocated (e.g. empty()): the step writes g into it. Without
// momentum, buf is ignored. `nonfinite`: undefined, or the flag (one f32
// element on p's device) set to NaN when an element of g is inf or NaN;
// `factor`: undefined, or the clip factor (the same).
bool fused_sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStepArgs& args,
                    const Tensor& nonfinite = Tensor(), const Tensor& factor = Tensor());

// The step of a 16-bit parameter on its f32 master weights in one pass
// ("sgd_step_mixed"): the 16-bit gradient g16 widened, the master (and buf)
// stepped as sgd_step_cpu steps f32 values, and the master rounded into the
// parameter p16 — the bits of casting g up, stepping, and copying the master
// back (Optimizer::step_param's path otherwise), without the two casts'
// passes. G is BFloat16 or Half.
template <typename G>
void sgd_step_mixed_cpu(float* master, const G* g16, float* buf, G* p16, int64_t n, const SgdStepArgs& args,
                        float* nonfinite = nullptr, const float* factor = nullptr);

// Runs it when a kernel "sgd_step_mixed" is registered for the master's
// device, master (and buf when args.momentum != 0) are dense contiguous f32,
// g16 and p16 dense contiguous of one 16-bit dtype, all of one shape and
// device; returns false (touching nothing) otherwise. `nonfinite` and
// `factor` as for fused_sgd_step, the flag tested on g16's elements and the
// factor applied to them widened to f32.
bool fused_sgd_step_mixed(const Tensor& master, const Tensor& g16, const Tensor& buf, const Tensor& p16,
                          const SgdStepArgs& args, const Tensor& nonfinite = Tensor(), const Tensor& factor = Tensor());

}  // namespace coppice

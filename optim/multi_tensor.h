// Multi-tensor launches: one kernel (or a few, in chunks) over the flat
// arrays of many parameters at once, where a per-parameter loop would
// launch a kernel or more per parameter. Two of them:
//
//   MultiStep   the fused SGD or Adam/AdamW step of many dense contiguous
//               parameters of one optimizer group, dtype and step
//               (Optimizer::step batches them): the same per-element
//               arithmetic as the per-parameter kernels (sgd_step_math.h,
//               adam_step_math.h), so the same bits, each parameter's
//               non-finite flag set as the per-parameter kernel sets it, and
//               the clip factor applied the same way (optim/fused_step.h).
//   MultiNorm   the partial p-norms of many gradients summed into the
//               global norm and the clip factor, on the device
//               (clip_grad_norm_on_device, optim/clip.h).
//
// The kernels take raw device pointers (the tables travel as kernel
// parameters: no copy to the device, nothing to keep alive between steps,
// capture-safe). They exist on CUDA only (optim/cuda registers them at
// start-up); the CPU's twin is the per-parameter path, so a device without
// them takes it.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "optim/adam_step_math.h"
#include "optim/sgd_step_math.h"
#include "tensor/tensor.h"

namespace coppice {

// One parameter of a multi-tensor step.
struct MultiStepEntry {
  float* param = nullptr;      // the f32 values, or a 16-bit parameter's f32 master weights
  const void* grad = nullptr;  // of MultiStep::grad_dtype
  float* state1 = nullptr;     // SGD: the momentum buffer (null without momentum); Adam: exp_avg
  float* state2 = nullptr;     // Adam: exp_avg_sq; SGD: null
  void* param16 = nullptr;     // a 16-bit parameter's own values, the master rounded into them; else null
  float* flag = nullptr;       // its non-finite flag (f32, on the device), or null
  int64_t n = 0;               // elements
};

enum class MultiStepKind { kSgd, kAdam };

struct MultiStep {
  MultiStepKind kind = MultiStepKind::kSgd;
  // kF32: f32 parameters and gradients; kBF16 or kF16: 16-bit parameters and
  // gradients with f32 master weights and state.
  DType grad_dtype = DType::kF32;
  SgdStepArgs sgd;                // kSgd: every entry's (`first` included)
  AdamStepArgs adam;              // kAdam: every entry's (`step` included)
  const float* factor = nullptr;  // the clip factor (f32 on the device), or null
  Device device = Device::cpu();
  std::vector<MultiStepEntry> entries;
};

// One gradient of a multi-tensor norm: n contiguous values of `dtype` (f32,
// f64, bf16 or f16) on the device.
struct MultiNormEntry {
  const void* values = nullptr;
  DType dtype = DType::kF32;
  int64_t n = 0;
  float* flag = nullptr;  // set to NaN when this gradient's own norm is not finite; or null
};

struct MultiNorm {
  Device device = Device::cpu();
  double norm_type = 2.0;  // > 0, or infinity
  double max_norm = 1.0;
  std::vector<MultiNormEntry> entries;
  float* norm = nullptr;    // out: the global norm (f32 on the device)
  float* factor = nullptr;  // out: min(1, max_norm / (norm + 1e-6)), NaN when norm is not finite
};

// The parameters an optimizer queues during one step() for multi-tensor
// launches (Optimizer::step): one MultiStep per (group, device, gradient
// dtype, and what else must agree within a launch: Adam's step count, SGD's
// first step), launched after every parameter was visited.
struct MultiStepQueue {
  std::map<std::tuple<size_t, int, DType, int64_t>, MultiStep> batches;
  // Tensors the queued entries point into that nothing else holds (a
  // gradient made dense for the step), alive until the launches are enqueued.
  std::vector<Tensor> keep;

  // The batch for that key (made empty, for `device`, on first use).
  MultiStep& batch(size_t group, Device device, DType grad_dtype, int64_t key) {
    MultiStep& b = batches[std::make_tuple(group, static_cast<int>(device.index), grad_dtype, key)];
    b.device = device;
    b.grad_dtype = grad_dtype;
    return b;
  }
};

struct MultiTensorKernels {
  void (*step)(const MultiStep&) = nullptr;
  void (*norm)(const MultiNorm&) = nullptr;
};

// At start-up, by the device's kernel library (optim/cuda/register.cc).
void register_multi_tensor_kernels(DeviceType device, MultiTensorKernels kernels);
// The kernels for `device`, or null when it has none (the CPU).
const MultiTensorKernels* multi_tensor_kernels(DeviceType device);

}  // namespace coppice

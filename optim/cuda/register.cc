// Registers the CUDA fused optimizer steps, "adam_step", "sgd_step" and "sgd_step_mixed"
// (optim/adam_step.h and optim/sgd_step.h call them through the dispatcher
// for CUDA tensors), the non-finite check "nonfinite_flag"
// (optim/finite_check.h), and the multi-tensor step and norm
// (optim/multi_tensor.h), cut here into tables of the kernels' size.
#include <algorithm>
#include <cmath>
#include <vector>

#include "optim/adam_step.h"
#include "optim/cuda/adam_step.h"
#include "optim/cuda/finite_check.h"
#include "optim/cuda/multi_tensor.h"
#include "optim/cuda/sgd_step.h"
#include "optim/finite_check_math.h"
#include "optim/fused_step.h"
#include "optim/multi_tensor.h"
#include "optim/sgd_step.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/dispatcher.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"

namespace coppice::optim_cuda {
namespace {

// Runs launch(T{}, stream) on the current stream of p's device, T the
// values' type, and checks the launch.
template <typename Launch>
void launch_fused_step(const char* op, const Tensor& p, Launch&& launch) {
  const int device = p.device().index;
  cuda::DeviceGuard guard(device);
  const cudaStream_t stream = cuda::current_stream(device);
  with_fused_step_type(p.dtype(), [&](auto zero) { launch(zero, stream); });
  COPPICE_CUDA_CHECK(cudaGetLastError(), op);
}

std::vector<Tensor> adam_step_cuda_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const auto args = fused_step_args<AdamStepArgs>(attrs);
  launch_fused_step(op::kAdamStep, in[0], [&](auto zero, cudaStream_t stream) {
    using T = decltype(zero);
    adam_step<T>(in[0].data<T>(), in[1].data<T>(), in[2].data<T>(), in[3].data<T>(), in[0].numel(), args,
                 fused_step_flag(in), fused_step_factor(in), stream);
  });
  return {};
}

std::vector<Tensor> sgd_step_cuda_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const auto args = fused_step_args<SgdStepArgs>(attrs);
  launch_fused_step(op::kSgdStep, in[0], [&](auto zero, cudaStream_t stream) {
    using T = decltype(zero);
    sgd_step<T>(in[0].data<T>(), in[1].data<T>(), in[2].defined() ? in[2].data<T>() : nullptr, in[0].numel(), args,
                fused_step_flag(in), fused_step_factor(in), stream);
  });
  return {};
}

// Inputs master, g16, buf (or none), p16, flag (or none), factor (or none)
// (optim/sgd_step.h).
std::vector<Tensor> sgd_step_mixed_cuda_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const auto args = fused_step_args<SgdStepArgs>(attrs);
  const int device = in[0].device().index;
  cuda::DeviceGuard guard(device);
  const cudaStream_t stream = cuda::current_stream(device);
  float* buf = in[2].defined() ? in[2].data<float>() : nullptr;
  float* flag = fused_step_flag(in);
  const float* factor = fused_step_factor(in);
  if (in[1].dtype() == DType::kBF16) {
    sgd_step_mixed<BFloat16>(in[0].data<float>(), in[1].data<BFloat16>(), buf, in[3].data<BFloat16>(), in[0].numel(),
                             args, flag, factor, stream);
  } else {
    sgd_step_mixed<Half>(in[0].data<float>(), in[1].data<Half>(), buf, in[3].data<Half>(), in[0].numel(), args, flag,
                         factor, stream);
  }
  COPPICE_CUDA_CHECK(cudaGetLastError(), op::kSgdStepMixed);
  return {};
}

// Inputs: the values (dense, contiguous, floating) and the flag (an f32
// scalar on the same device), set to NaN on the device when a value is inf or NaN.
std::vector<Tensor> nonfinite_flag_cuda_kernel(const std::vector<Tensor>& in, const Attrs&) {
  const Tensor& v = in[0];
  const int device = v.device().index;
  cuda::DeviceGuard guard(device);
  const cudaStream_t stream = cuda::current_stream(device);
  const void* data = v.data_ptr();
  float* flag = in[1].data<float>();
  switch (v.dtype()) {
    case DType::kF32:
      flag_nonfinite<uint32_t>(static_cast<const uint32_t*>(data), v.numel(), kF32ExponentBits, flag, stream);
      break;
    case DType::kF64:
      flag_nonfinite<uint64_t>(static_cast<const uint64_t*>(data), v.numel(), kF64ExponentBits, flag, stream);
      break;
    case DType::kBF16:
      flag_nonfinite<uint16_t>(static_cast<const uint16_t*>(data), v.numel(), kBF16ExponentBits, flag, stream);
      break;
    case DType::kF16:
      flag_nonfinite<uint16_t>(static_cast<const uint16_t*>(data), v.numel(), kF16ExponentBits, flag, stream);
      break;
    default: fail("nonfinite_flag: values must be f32, f64, bf16 or f16, got ", dtype_name(v.dtype()));
  }
  COPPICE_CUDA_CHECK(cudaGetLastError(), op::kNonfiniteFlag);
  return {};
}

// ---- multi-tensor ----------------------------------------------------------

// Blocks of kMultiChunk elements for n elements.
int64_t chunks_of(int64_t n) { return (n + kMultiChunk - 1) / kMultiChunk; }

StepGrad step_grad(DType dtype) {
  switch (dtype) {
    case DType::kF32: return StepGrad::kF32;
    case DType::kBF16: return StepGrad::kBF16;
    case DType::kF16: return StepGrad::kF16;
    default: fail("multi-tensor step: gradients must be f32, bf16 or f16, got ", dtype_name(dtype));
  }
}

// The entries a table at a time, kMaxStepEntries each.
void multi_step_cuda(const MultiStep& work) {
  const int device = work.device.index;
  cuda::DeviceGuard guard(device);
  const cudaStream_t stream = cuda::current_stream(device);
  const StepGrad grad = step_grad(work.grad_dtype);
  for (size_t first = 0; first < work.entries.size(); first += kMaxStepEntries) {
    StepTable t{};
    bool check = false;
    int64_t blocks = 0;
    for (size_t i = first; i < work.entries.size() && t.count < kMaxStepEntries; ++i) {
      const MultiStepEntry& e = work.entries[i];
      const int k = t.count++;
      t.param[k] = e.param;
      t.grad[k] = e.grad;
      t.state1[k] = e.state1;
      t.state2[k] = e.state2;
      t.param16[k] = e.param16;
      t.flag[k] = e.flag;
      t.n[k] = e.n;
      blocks += chunks_of(e.n);
      t.block_end[k] = blocks;
      check = check || e.flag != nullptr;
    }
    if (work.kind == MultiStepKind::kSgd) {
      multi_sgd_step(t, grad, work.sgd, check, work.factor, stream);
    } else {
      multi_adam_step(t, grad, work.adam, check, work.factor, stream);
    }
    COPPICE_CUDA_CHECK(cudaGetLastError(), "multi-tensor step");
  }
}

NormDType norm_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return NormDType::kF32;
    case DType::kF64: return NormDType::kF64;
    case DType::kBF16: return NormDType::kBF16;
    case DType::kF16: return NormDType::kF16;
    default: fail("multi-tensor norm: gradients must be f32, f64, bf16 or f16, got ", dtype_name(dtype));
  }
}

NormKind norm_kind(double p) {
  if (std::isinf(p)) return NormKind::kInf;
  if (p == 2.0) return NormKind::kTwo;
  if (p == 1.0) return NormKind::kOne;
  return NormKind::kPower;
}

// Every table's block values into one scratch array and its entries' into
// one partials array (f64, from the caching allocator: stream-ordered, so
// freed here once enqueued), then the finish over all partials.
void multi_norm_cuda(const MultiNorm& work) {
  const int device = work.device.index;
  cuda::DeviceGuard guard(device);
  const cudaStream_t stream = cuda::current_stream(device);
  const NormKind kind = norm_kind(work.norm_type);
  int64_t blocks = 0;
  for (const MultiNormEntry& e : work.entries) blocks += chunks_of(e.n);
  const TensorOptions f64(DType::kF64, work.device);
  const Tensor scratch = empty({std::max<int64_t>(blocks, 1)}, f64);
  const auto count = static_cast<int64_t>(work.entries.size());
  const Tensor partials = empty({std::max<int64_t>(count, 1)}, f64);
  int64_t block_base = 0;
  for (size_t first = 0; first < work.entries.size(); first += kMaxNormEntries) {
    NormTable t{};
    t.block_base = block_base;
    t.entry_base = static_cast<int64_t>(first);
    int64_t local = 0;
    for (size_t i = first; i < work.entries.size() && t.count < kMaxNormEntries; ++i) {
      const MultiNormEntry& e = work.entries[i];
      const int k = t.count++;
      t.values[k] = e.values;
      t.flag[k] = e.flag;
      t.n[k] = e.n;
      t.dtype[k] = norm_dtype(e.dtype);
      local += chunks_of(e.n);
      t.block_end[k] = local;
    }
    multi_norm_partials(t, kind, work.norm_type, scratch.data<double>(), partials.data<double>(), stream);
    COPPICE_CUDA_CHECK(cudaGetLastError(), "multi-tensor norm");
    block_base += local;
  }
  multi_norm_finish(partials.data<double>(), count, kind, work.norm_type, work.max_norm, work.norm, work.factor,
                    stream);
  COPPICE_CUDA_CHECK(cudaGetLastError(), "multi-tensor norm");
}

struct MultiTensorRegistrar {
  MultiTensorRegistrar() { register_multi_tensor_kernels(DeviceType::kCuda, {multi_step_cuda, multi_norm_cuda}); }
};
const MultiTensorRegistrar kMulti;

const KernelRegistrar kNonfinite(op::kNonfiniteFlag, DeviceType::kCuda, {"dense", "dense"}, nonfinite_flag_cuda_kernel);
// Each fused step with its non-finite flag as a last input and without
// (optim/fused_step.h).
const FusedStepRegistrar kAdam(op::kAdamStep, DeviceType::kCuda, {"dense", "dense", "dense", "dense"},
                               adam_step_cuda_kernel);
// Without momentum the buffer is an undefined input ("none").
const FusedStepRegistrar kSgd(op::kSgdStep, DeviceType::kCuda, {"dense", "dense", "dense"}, sgd_step_cuda_kernel);
const FusedStepRegistrar kSgdNoMomentum(op::kSgdStep, DeviceType::kCuda, {"dense", "dense", "none"},
                                        sgd_step_cuda_kernel);
const FusedStepRegistrar kSgdMixed(op::kSgdStepMixed, DeviceType::kCuda, {"dense", "dense", "dense", "dense"},
                                   sgd_step_mixed_cuda_kernel);
const FusedStepRegistrar kSgdMixedNoMomentum(op::kSgdStepMixed, DeviceType::kCuda, {"dense", "dense", "none", "dense"},
                                             sgd_step_mixed_cuda_kernel);

}  // namespace
}  // namespace coppice::optim_cuda

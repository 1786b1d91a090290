// Registers the CUDA fused optimizer steps, "adam_step", "sgd_step" and "sgd_step_mixed"
// (optim/adam_step.h and optim/sgd_step.h call them through the dispatcher
// for CUDA tensors), and the non-finite check "nonfinite_flag"
// (optim/finite_check.h).
#include <vector>

#include "optim/adam_step.h"
#include "optim/cuda/adam_step.h"
#include "optim/cuda/finite_check.h"
#include "optim/cuda/sgd_step.h"
#include "optim/finite_check_math.h"
#include "optim/fused_step.h"
#include "optim/sgd_step.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/dispatcher.h"

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
  launch_fused_step("adam_step", in[0], [&](auto zero, cudaStream_t stream) {
    using T = decltype(zero);
    adam_step<T>(in[0].data<T>(), in[1].data<T>(), in[2].data<T>(), in[3].data<T>(), in[0].numel(), args,
                 fused_step_flag(in), stream);
  });
  return {};
}

std::vector<Tensor> sgd_step_cuda_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const auto args = fused_step_args<SgdStepArgs>(attrs);
  launch_fused_step("sgd_step", in[0], [&](auto zero, cudaStream_t stream) {
    using T = decltype(zero);
    sgd_step<T>(in[0].data<T>(), in[1].data<T>(), in[2].defined() ? in[2].data<T>() : nullptr, in[0].numel(), args,
                fused_step_flag(in), stream);
  });
  return {};
}

// Inputs master, g16, buf (or none), p16, flag (or none) (optim/sgd_step.h).
std::vector<Tensor> sgd_step_mixed_cuda_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const auto args = fused_step_args<SgdStepArgs>(attrs);
  const int device = in[0].device().index;
  cuda::DeviceGuard guard(device);
  const cudaStream_t stream = cuda::current_stream(device);
  float* buf = in[2].defined() ? in[2].data<float>() : nullptr;
  float* flag = fused_step_flag(in);
  if (in[1].dtype() == DType::kBF16) {
    sgd_step_mixed<BFloat16>(in[0].data<float>(), in[1].data<BFloat16>(), buf, in[3].data<BFloat16>(), in[0].numel(),
                             args, flag, stream);
  } else {
    sgd_step_mixed<Half>(in[0].data<float>(), in[1].data<Half>(), buf, in[3].data<Half>(), in[0].numel(), args, flag,
                         stream);
  }
  COPPICE_CUDA_CHECK(cudaGetLastError(), "sgd_step_mixed");
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
  COPPICE_CUDA_CHECK(cudaGetLastError(), "nonfinite_flag");
  return {};
}

const KernelRegistrar kNonfinite("nonfinite_flag", DeviceType::kCuda, {"dense", "dense"}, nonfinite_flag_cuda_kernel);
// Each fused step with its non-finite flag as a last input and without
// (optim/fused_step.h).
const FusedStepRegistrar kAdam("adam_step", DeviceType::kCuda, {"dense", "dense", "dense", "dense"},
                               adam_step_cuda_kernel);
// Without momentum the buffer is an undefined input ("none").
const FusedStepRegistrar kSgd("sgd_step", DeviceType::kCuda, {"dense", "dense", "dense"}, sgd_step_cuda_kernel);
const FusedStepRegistrar kSgdNoMomentum("sgd_step", DeviceType::kCuda, {"dense", "dense", "none"},
                                        sgd_step_cuda_kernel);
const FusedStepRegistrar kSgdMixed("sgd_step_mixed", DeviceType::kCuda, {"dense", "dense", "dense", "dense"},
                                   sgd_step_mixed_cuda_kernel);
const FusedStepRegistrar kSgdMixedNoMomentum("sgd_step_mixed", DeviceType::kCuda, {"dense", "dense", "none", "dense"},
                                             sgd_step_mixed_cuda_kernel);

}  // namespace
}  // namespace coppice::optim_cuda

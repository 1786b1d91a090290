// Registers the CUDA fused optimizer steps, "adam_step" and "sgd_step"
// (optim/adam_step.h and optim/sgd_step.h call them through the dispatcher
// for CUDA tensors).
#include <vector>

#include "optim/adam_step.h"
#include "optim/cuda/adam_step.h"
#include "optim/cuda/sgd_step.h"
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
    adam_step<T>(in[0].data<T>(), in[1].data<T>(), in[2].data<T>(), in[3].data<T>(), in[0].numel(), args, stream);
  });
  return {};
}

std::vector<Tensor> sgd_step_cuda_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const auto args = fused_step_args<SgdStepArgs>(attrs);
  launch_fused_step("sgd_step", in[0], [&](auto zero, cudaStream_t stream) {
    using T = decltype(zero);
    sgd_step<T>(in[0].data<T>(), in[1].data<T>(), in[2].defined() ? in[2].data<T>() : nullptr, in[0].numel(), args,
                stream);
  });
  return {};
}

const KernelRegistrar kAdam("adam_step", DeviceType::kCuda, {"dense", "dense", "dense", "dense"},
                            adam_step_cuda_kernel);
// Without momentum the buffer is an undefined input ("none").
const KernelRegistrar kSgd("sgd_step", DeviceType::kCuda, {"dense", "dense", "dense"}, sgd_step_cuda_kernel);
const KernelRegistrar kSgdNoMomentum("sgd_step", DeviceType::kCuda, {"dense", "dense", "none"}, sgd_step_cuda_kernel);

}  // namespace
}  // namespace coppice::optim_cuda

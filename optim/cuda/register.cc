// Registers the CUDA "adam_step" kernel (optim/adam_step.h calls it through
// the dispatcher for CUDA tensors).
#include <vector>

#include "optim/adam_step.h"
#include "optim/cuda/adam_step.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/dispatcher.h"

namespace coppice::optim_cuda {
namespace {

std::vector<Tensor> adam_step_cuda_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  const AdamStepArgs args = adam_step_args(attrs);
  const int64_t n = in[0].numel();
  const int device = in[0].device().index;
  cuda::DeviceGuard guard(device);
  const cudaStream_t stream = cuda::current_stream(device);
  if (in[0].dtype() == DType::kF64) {
    adam_step<double>(in[0].data<double>(), in[1].data<double>(), in[2].data<double>(), in[3].data<double>(), n,
                      args, stream);
  } else {
    adam_step<float>(in[0].data<float>(), in[1].data<float>(), in[2].data<float>(), in[3].data<float>(), n, args,
                     stream);
  }
  COPPICE_CUDA_CHECK(cudaGetLastError(), "adam_step");
  return {};
}

const KernelRegistrar kCuda("adam_step", DeviceType::kCuda, {"dense", "dense", "dense", "dense"},
                            adam_step_cuda_kernel);

}  // namespace
}  // namespace coppice::optim_cuda

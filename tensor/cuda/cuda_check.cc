#include "tensor/cuda/cuda_check.h"

#include "tensor/error.h"

namespace coppice::cuda {

void check_cuda(cudaError_t err, std::string_view op, std::string_view what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // reset a non-sticky error so later checks see their own
  fail(op, ": CUDA error ", cudaGetErrorName(err), ": ", cudaGetErrorString(err), " (in ", what, ")");
}

void check_launch(std::string_view op) {
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return;
  fail(op, ": CUDA kernel launch failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

}  // namespace coppice::cuda

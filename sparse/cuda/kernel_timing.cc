#include "sparse/cuda/kernel_timing.h"

#include <cuda_runtime_api.h>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"

namespace coppice::sparse_cuda {

double time_on_device_ms(const std::function<Tensor()>& run, int device, Tensor& out, std::string_view op) {
  cuda::DeviceGuard guard(device);
  out = run();
  const cudaStream_t stream = cuda::current_stream(device);
  cudaEvent_t start = nullptr, stop = nullptr;
  COPPICE_CUDA_CHECK(cudaEventCreate(&start), op);
  const cudaError_t made = cudaEventCreate(&stop);
  if (made != cudaSuccess) cudaEventDestroy(start);
  COPPICE_CUDA_CHECK(made, op);
  float ms = 0.0f;
  try {
    constexpr int kRuns = 2;
    COPPICE_CUDA_CHECK(cudaEventRecord(start, stream), op);
    for (int i = 0; i < kRuns; ++i) out = run();
    COPPICE_CUDA_CHECK(cudaEventRecord(stop, stream), op);
    COPPICE_CUDA_CHECK(cudaEventSynchronize(stop), op);
    COPPICE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop), op);
    ms /= kRuns;
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

}  // namespace coppice::sparse_cuda

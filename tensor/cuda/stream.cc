#include "tensor/cuda/stream.h"

#include "tensor/cuda/cuda_check.h"

namespace coppice::cuda {

cudaStream_t current_stream(int /*device*/) {
  return nullptr;  // the legacy default stream of whichever device is current (see stream.h)
}

DeviceGuard::DeviceGuard(int device) {
  int current = -1;
  COPPICE_CUDA_CHECK(cudaGetDevice(&current), "cuda device guard");
  if (current != device) {
    COPPICE_CUDA_CHECK(cudaSetDevice(device), "cuda device guard");
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);  // cannot throw from a destructor; best effort
}

int device_count() {
  static int count = [] {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {  // no driver, no device, driver too old: no GPU, not an error
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

}  // namespace coppice::cuda

#include "tensor/cuda/stream.h"

#include "tensor/cuda/cuda_check.h"

namespace coppice::cuda {

namespace {
// The capturing thread's stream and its device (-1: not capturing).
thread_local int capture_device = -1;
thread_local cudaStream_t capture_stream = nullptr;
}  // namespace

cudaStream_t current_stream(int device) {
  if (device == capture_device) return capture_stream;
  return nullptr;  // the legacy default stream of whichever device is current (see stream.h)
}

void set_capture_stream(int device, cudaStream_t stream) {
  capture_device = stream != nullptr ? device : -1;
  capture_stream = stream;
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

int sm_count(int device, std::string_view op) {
  int sms = 0;
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), op,
             "cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount)");
  return sms;
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

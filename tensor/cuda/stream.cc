#include "tensor/cuda/stream.h"

#include <atomic>

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

StreamOverride::StreamOverride(int device, cudaStream_t stream)
    : previous_device_(capture_device), previous_stream_(capture_stream) {
  capture_device = device;
  capture_stream = stream;
}

StreamOverride::~StreamOverride() {
  capture_device = previous_device_;
  capture_stream = previous_stream_;
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

int current_device(std::string_view op) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), op, "cudaGetDevice");
  return device;
}

int sm_count(int device, std::string_view op) {
  int sms = 0;
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), op,
             "cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount)");
  return sms;
}

bool runs_sm90a(int device, std::string_view op) {
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices] = {};  // 0 unknown, 1 yes, 2 no
  if (device >= 0 && device < kDevices && known[device].load(std::memory_order_relaxed) != 0) {
    return known[device].load(std::memory_order_relaxed) == 1;
  }
  int major = 0, minor = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), op,
             "cudaDeviceGetAttribute(cudaDevAttrComputeCapabilityMajor)");
  check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), op,
             "cudaDeviceGetAttribute(cudaDevAttrComputeCapabilityMinor)");
  const bool yes = major == 9 && minor == 0;
  if (device >= 0 && device < kDevices) known[device].store(yes ? 1 : 2, std::memory_order_relaxed);
  return yes;
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

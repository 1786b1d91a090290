// Range checks for index arguments: kernels skip an out-of-range index and
// record it in a device slot; the host reads the slot back after the launch
// and throws coppice::Error naming the op, the index and the valid range.
// Costs one small device-to-host copy (a synchronization) per call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/tensor.h"

namespace coppice::cuda {

// Records `value` as the offending index unless an earlier one was recorded.
__device__ inline void report_bad_index(int64_t* slot, int64_t value) {
  if (atomicCAS(reinterpret_cast<unsigned long long*>(slot), 0ull, 1ull) == 0ull) slot[1] = value;
}

class BadIndexSlot {
 public:
  explicit BadIndexSlot(Device device)
      : device_(device.index), buf_(Tensor::empty({2}, TensorOptions(DType::kI64, device))) {
    COPPICE_CUDA_CHECK(cudaMemsetAsync(buf_.data_ptr(), 0, 2 * sizeof(int64_t), current_stream(device_)),
                       "index check");
  }
  int64_t* ptr() const { return static_cast<int64_t*>(buf_.data_ptr()); }

  // Throws "<op>: index <v> is out of range for dim <dim> of size <size>" when a kernel reported one.
  void check(std::string_view op, int64_t dim, int64_t size) const {
    int64_t host[2] = {0, 0};
    cudaStream_t stream = current_stream(device_);
    COPPICE_CUDA_CHECK(cudaMemcpyAsync(host, buf_.data_ptr(), sizeof(host), cudaMemcpyDeviceToHost, stream), op);
    COPPICE_CUDA_CHECK(cudaStreamSynchronize(stream), op);
    COPPICE_CHECK(host[0] == 0, op, ": index ", host[1], " is out of range for dim ", dim, " of size ", size,
                  " (valid: 0 to ", size - 1, ")");
  }

 private:
  int device_;
  Tensor buf_;
};

}  // namespace coppice::cuda

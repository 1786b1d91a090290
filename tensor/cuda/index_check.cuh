// Range checks for index arguments: kernels skip an out-of-range index and
// record its position in a device slot (the lowest position wins, so the
// report is deterministic); the host reads the slot back and throws
// coppice::Error naming the op, the index, its position and the valid range,
// as the CPU twins do. Costs one small device-to-host copy (a synchronization)
// per call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/graph_capture.h"
#include "tensor/cuda/stream.h"
#include "tensor/tensor.h"

namespace coppice::cuda {

// cudaMemsetAsync with this byte makes the "nothing reported" sentinel,
// larger than any position.
constexpr int kNoBadIndexByte = 0x7f;
constexpr int64_t kNoBadIndex = 0x7f7f7f7f7f7f7f7fll;

__device__ inline void report_bad_index(int64_t* slot, int64_t position) {
  atomicMin(reinterpret_cast<long long*>(slot), static_cast<long long>(position));
}

class BadIndexSlot {
 public:
  // Call with `device` current.
  explicit BadIndexSlot(Device device)
      : device_(device.index), buf_(Tensor::empty({1}, TensorOptions(DType::kI64, device))) {
    COPPICE_CUDA_CHECK(cudaMemsetAsync(buf_.data_ptr(), kNoBadIndexByte, sizeof(int64_t), current_stream(device_)),
                       "index check");
  }
  int64_t* ptr() const { return static_cast<int64_t*>(buf_.data_ptr()); }

  // Throws "<op>: index <v> (at position <p>) is out of range for dim <d> of
  // size <s>" when a kernel reported a position of the i64 `index`. In a
  // graph capture the read-back cannot happen now: it runs after each replay.
  void check(std::string_view op, const Tensor& index, int64_t dim, int64_t size) const {
    after_each_replay(device_,
                      [slot = *this, op = std::string(op), index, dim, size] { slot.read_back(op, index, dim, size); });
  }

 private:
  void read_back(std::string_view op, const Tensor& index, int64_t dim, int64_t size) const {
    int64_t position = kNoBadIndex;
    // After a replay this is the legacy stream, which waits for the graph's.
    cudaStream_t stream = current_stream(device_);
    COPPICE_CUDA_CHECK(cudaMemcpyAsync(&position, buf_.data_ptr(), sizeof(position), cudaMemcpyDeviceToHost, stream),
                       op);
    COPPICE_CUDA_CHECK(cudaStreamSynchronize(stream), op);
    if (position == kNoBadIndex) return;
    int64_t value = 0;
    COPPICE_CUDA_CHECK(cudaMemcpyAsync(&value, static_cast<const int64_t*>(index.data_ptr()) + position, sizeof(value),
                                       cudaMemcpyDeviceToHost, stream),
                       op);
    COPPICE_CUDA_CHECK(cudaStreamSynchronize(stream), op);
    fail(op, ": index ", value, " (at position ", position, ") is out of range for dim ", dim, " of size ", size);
  }

  int device_;
  Tensor buf_;
};

}  // namespace coppice::cuda

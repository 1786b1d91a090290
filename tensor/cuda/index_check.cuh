// Range checks for index arguments: kernels skip an out-of-range index and
// record its position in a device slot (the lowest position wins, so the
// report is deterministic); the slot is read back without the host waiting
// (deferred_checks.h), and a position found there throws coppice::Error
// naming the op, the index, its position and the valid range, as the CPU
// twins do, at the next synchronization or read of a result.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/deferred_checks.h"
#include "tensor/cuda/graph_capture.h"
#include "tensor/cuda/stream.h"
#include "tensor/error_context.h"
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
  // size <s>" when a kernel reported a position of the i64 `index`: at the
  // next synchronization of the device or read of a result
  // (deferred_checks.h), inside the ErrorContexts open now. In
  // a graph capture the slot's copy is queued after each replay instead.
  void check(std::string_view op, const Tensor& index, int64_t dim, int64_t size) const {
    after_each_replay(device_, [slot = *this, op = std::string(op), index, dim, size,
                                contexts = ErrorContext::current()] {
      defer_check(slot.device_, slot.ptr(), kNoBadIndex,
                  [device = slot.device_, op, index, dim, size, contexts](int64_t position) {
                    if (position == kNoBadIndex) return;
                    fail(ErrorContext::wrap(
                        contexts, str_cat(op, ": index ", index_value(device, index, position, op), " (at position ",
                                          position, ") is out of range for dim ", dim, " of size ", size)));
                  });
    });
  }

 private:
  // index[position], read now (a failure's message only).
  static int64_t index_value(int device, const Tensor& index, int64_t position, std::string_view op) {
    int64_t value = 0;
    DeviceGuard guard(device);
    cudaStream_t stream = current_stream(device);
    COPPICE_CUDA_CHECK(cudaMemcpyAsync(&value, static_cast<const int64_t*>(index.data_ptr()) + position, sizeof(value),
                                       cudaMemcpyDeviceToHost, stream),
                       op);
    COPPICE_CUDA_CHECK(cudaStreamSynchronize(stream), op);
    return value;
  }

  int device_;
  Tensor buf_;
};

}  // namespace coppice::cuda

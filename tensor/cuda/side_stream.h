// A second stream per device, for a kernel that may run beside the next one
// on the current stream: two independent kernels (attention's dq and dk/dv
// passes read the same inputs and write apart) whose thread blocks then
// share the GPU, each filling the other's tail and fixed costs, instead of
// the second waiting for the first to drain.
//
//   SideBranch side(device, stream, op);  // fork: side.stream() waits for `stream`'s work so far
//   kernel_a<<<..., stream>>>(...);
//   kernel_b<<<..., side.stream()>>>(...);
//   side.join();  // `stream` waits for kernel_b
//
// After the join everything queued on `stream` is ordered after the side
// stream's work, so the caching allocator's one-stream rule (stream.h: a block
// freed on the host is reused only by work queued later) still holds. The side
// stream is non-blocking (the legacy default stream does not order it; the
// fork and join events do), one per device, made on first use. A SideBranch
// holds its device's lock from fork to join, so two threads never interleave
// their events. Under graph capture the fork and join are the graph's edges
// (the side stream joins the capture through the fork event).
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <string_view>

namespace coppice::cuda {

// Whether `stream` is `device`'s side stream (false before one is made):
// for a library handle that must not be shared by work on both streams at
// once (gemm.cc's cuBLAS handle, whose default workspace is the handle's).
bool is_side_stream(int device, cudaStream_t stream);

class SideBranch {
 public:
  // Forks from `stream` on `device`; `op` names the caller in errors.
  SideBranch(int device, cudaStream_t stream, std::string_view op);
  // Joins unless join() did (best effort: a destructor does not throw).
  ~SideBranch();
  SideBranch(const SideBranch&) = delete;
  SideBranch& operator=(const SideBranch&) = delete;

  cudaStream_t stream() const { return side_; }
  // `stream` waits for the work queued on stream() so far; throws on a CUDA error.
  void join();

 private:
  std::unique_lock<std::mutex> lock_;
  cudaStream_t main_ = nullptr;
  cudaStream_t side_ = nullptr;
  cudaEvent_t join_ = nullptr;
  std::string op_;
  bool joined_ = false;
};

}  // namespace coppice::cuda

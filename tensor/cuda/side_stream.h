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
// fork and join events do), one per device, made on first use. The fork and
// the join each take the device's lock, so two threads never interleave the
// record and the wait of an event; a join orders `stream` after all the side
// stream's work so far, another thread's too. Under graph capture the fork
// and join are the graph's edges (the side stream joins the capture through
// the fork event).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

namespace coppice::cuda {

// Devices a side stream serves: indices 0 .. kSideStreamDevices - 1.
inline constexpr int kSideStreamDevices = 64;

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
  // Marks the end of this branch's work: join() then waits for the side
  // stream's work up to here, not for what is queued there later.
  void end();
  // `stream` waits for the work queued on stream() so far (up to end(),
  // where it was called); throws on a CUDA error.
  void join();

 private:
  int device_ = 0;
  cudaStream_t main_ = nullptr;
  cudaStream_t side_ = nullptr;
  std::string op_;
  cudaEvent_t end_ = nullptr;  // this branch's own, made by end()
  bool joined_ = false;
};

}  // namespace coppice::cuda

// The stream every Coppice kernel, copy and library call on a device runs on.
//
// Coppice uses ONE stream per device, and that stream is the legacy default
// stream (stream 0). Why: with a single stream, a separate non-default stream
// buys no concurrency, while the legacy default stream keeps every piece of
// CUDA code in the process ordered with ours even when it names no stream
// (a cudaMemcpy, a kernel launched with <<<g, b>>>, a library left on its
// default stream). That makes the caching allocator safe without events: a
// block freed on the host is only reused by work queued after the work that
// last used it. Code that wants to overlap with Coppice's work (NCCL, copies)
// creates its own cudaStreamNonBlocking stream and orders it with events.
// The nvcc rule does not pass --default-stream per-thread; do not add it.
//
// The one exception is graph capture (graph_capture.h): the legacy stream
// cannot be captured, so while a thread captures, current_stream returns the
// capturing stream for that thread and device. That stream is a blocking one,
// which the legacy stream orders with, so replays stay in the same order.
// Work may also run on a second stream forked from this one (side_stream.h):
// run_beside's branches (tensor/backend.h), which are joined back before
// anything reads what they wrote, and before a synchronize, a copy to or from
// the host, or a capture's start and end.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

namespace coppice::cuda {

// The stream kernels and cuBLAS use on `device` (the legacy default stream).
cudaStream_t current_stream(int device);

// While set (not null), current_stream(device) returns `stream` on the
// calling thread: the stream a graph capture records.
void set_capture_stream(int device, cudaStream_t stream);

// While alive, current_stream(device) returns `stream` on the calling
// thread (run_beside's side stream); then whatever it returned before,
// a capture's stream included.
class StreamOverride {
 public:
  StreamOverride(int device, cudaStream_t stream);
  ~StreamOverride();
  StreamOverride(const StreamOverride&) = delete;
  StreamOverride& operator=(const StreamOverride&) = delete;

 private:
  int previous_device_;
  cudaStream_t previous_stream_;
};

// Makes `device` current for the calling thread and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// The calling thread's current device (the one a launch without a tensor at
// hand goes to); throws naming `op` on error.
int current_device(std::string_view op);

// Number of visible CUDA devices; 0 (never an error) without a GPU or driver.
int device_count();

// Number of SMs of `device` (for sizing grids); throws naming `op` on error.
int sm_count(int device, std::string_view op);

// Whether `device` runs code built for sm_90a (Hopper's wgmma and
// setmaxnreg): compute capability 9.0 exactly. Asked once per device;
// throws naming `op` on error.
bool runs_sm90a(int device, std::string_view op);

}  // namespace coppice::cuda

#include "tensor/cuda/side_stream.h"

#include <atomic>
#include <mutex>

#include "tensor/cuda/cuda_check.h"

namespace coppice::cuda {

namespace {

// A device's side stream and its two events, made once under `lock`.
struct Side {
  std::mutex lock;
  std::atomic<cudaStream_t> stream{nullptr};  // made once, under `lock`; read by is_side_stream without it
  cudaEvent_t fork = nullptr;
  cudaEvent_t join = nullptr;
};

Side& side_of(int device, std::string_view op) {
  if (device < 0 || device >= kSideStreamDevices) {
    check_cuda(cudaErrorInvalidDevice, op, "side stream: device index out of range");
  }
  static Side sides[kSideStreamDevices];
  return sides[device];
}

}  // namespace

bool is_side_stream(int device, cudaStream_t stream) {
  return stream != nullptr && device >= 0 && device < kSideStreamDevices &&
         stream == side_of(device, "side stream").stream.load();
}

SideBranch::SideBranch(int device, cudaStream_t stream, std::string_view op) : device_(device), main_(stream), op_(op) {
  Side& s = side_of(device, op);
  const std::lock_guard<std::mutex> lock(s.lock);
  if (s.stream.load() == nullptr) {
    check_cuda(cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming), op, "side stream: cudaEventCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming), op, "side stream: cudaEventCreateWithFlags");
    cudaStream_t made = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking), op, "side stream: cudaStreamCreateWithFlags");
    s.stream.store(made);
  }
  side_ = s.stream.load();
  check_cuda(cudaEventRecord(s.fork, main_), op, "side stream: fork (cudaEventRecord)");
  check_cuda(cudaStreamWaitEvent(side_, s.fork, 0), op, "side stream: fork (cudaStreamWaitEvent)");
}

void SideBranch::end() {
  if (end_ == nullptr) {
    check_cuda(cudaEventCreateWithFlags(&end_, cudaEventDisableTiming), op_, "side stream: cudaEventCreateWithFlags");
  }
  check_cuda(cudaEventRecord(end_, side_), op_, "side stream: end (cudaEventRecord)");
}

void SideBranch::join() {
  if (joined_) return;
  joined_ = true;
  if (end_ != nullptr) {
    check_cuda(cudaStreamWaitEvent(main_, end_, 0), op_, "side stream: join (cudaStreamWaitEvent)");
    return;
  }
  Side& s = side_of(device_, op_);
  const std::lock_guard<std::mutex> lock(s.lock);
  check_cuda(cudaEventRecord(s.join, side_), op_, "side stream: join (cudaEventRecord)");
  check_cuda(cudaStreamWaitEvent(main_, s.join, 0), op_, "side stream: join (cudaStreamWaitEvent)");
}

SideBranch::~SideBranch() {
  try {
    join();
  } catch (...) {  // best effort: a destructor does not throw
  }
  if (end_ != nullptr) cudaEventDestroy(end_);  // the waits already made keep their order
}

}  // namespace coppice::cuda

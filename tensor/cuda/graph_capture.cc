#include "tensor/cuda/graph_capture.h"

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/error.h"

namespace coppice::cuda {
namespace {

// The capture in progress on this thread.
struct Recording {
  int device = -1;
  std::vector<std::function<void()>> checks;
};
thread_local Recording* recording = nullptr;

class CudaGraph final : public CapturedWork {
 public:
  CudaGraph(int device, int pool, cudaStream_t stream, cudaGraphExec_t exec, std::vector<std::function<void()>> checks)
      : device_(device), pool_(pool), stream_(stream), exec_(exec), checks_(std::move(checks)) {}

  ~CudaGraph() override {
    // The last replay may still run: the pool's blocks go back only after it.
    DeviceGuard guard(device_);
    cudaStreamSynchronize(stream_);
    cudaGraphExecDestroy(exec_);
    cudaStreamDestroy(stream_);
    cudaGetLastError();
    caching_allocator(device_).release_pool(pool_);
  }

  void replay() override {
    DeviceGuard guard(device_);
    COPPICE_CUDA_CHECK(cudaGraphLaunch(exec_, stream_), "graph replay");
    for (const auto& check : checks_) check();
  }

 private:
  int device_;
  int pool_;
  cudaStream_t stream_;
  cudaGraphExec_t exec_;
  std::vector<std::function<void()>> checks_;
};

std::string cuda_error_text(cudaError_t err) {
  return str_cat(cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

}  // namespace

bool capturing(int device) { return recording != nullptr && recording->device == device; }

void after_each_replay(int device, std::function<void()> check) {
  if (capturing(device)) {
    recording->checks.push_back(std::move(check));
  } else {
    check();
  }
}

std::unique_ptr<CapturedWork> capture_graph(int device, const std::function<void()>& fn, std::string* why_not) {
  COPPICE_CHECK(recording == nullptr, "graph capture: this thread is already capturing for cuda:", recording->device,
                "; captures do not nest");
  DeviceGuard guard(device);
  CachingAllocator& allocator = caching_allocator(device);
  // A blocking stream: the legacy stream, which every other piece of work
  // uses, waits for it and it for the legacy stream (stream.h).
  cudaStream_t stream = nullptr;
  COPPICE_CUDA_CHECK(cudaStreamCreate(&stream), "graph capture");
  const cudaError_t begin = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (begin != cudaSuccess) {
    cudaGetLastError();
    cudaStreamDestroy(stream);
    *why_not = str_cat("beginning the capture: ", cuda_error_text(begin));
    return nullptr;
  }
  const int pool = allocator.new_pool();
  Recording rec{device, {}};
  std::string failure;
  cudaGraph_t graph = nullptr;
  recording = &rec;
  set_capture_stream(device, stream);
  allocator.begin_pool(pool);
  try {
    fn();
  } catch (const std::exception& e) { failure = e.what(); }
  allocator.end_pool();
  set_capture_stream(device, nullptr);
  recording = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  cudaGetLastError();  // a capture error is not sticky; clear it for the next caller
  if (failure.empty() && end != cudaSuccess) failure = str_cat("ending the capture: ", cuda_error_text(end));
  cudaGraphExec_t exec = nullptr;
  if (failure.empty()) {
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGetLastError();
    if (inst != cudaSuccess) failure = str_cat("instantiating the graph: ", cuda_error_text(inst));
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!failure.empty()) {
    cudaStreamDestroy(stream);
    allocator.release_pool(pool);
    *why_not = failure;
    return nullptr;
  }
  return std::make_unique<CudaGraph>(device, pool, stream, exec, std::move(rec.checks));
}

}  // namespace coppice::cuda

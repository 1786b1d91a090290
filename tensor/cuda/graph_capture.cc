#include "tensor/cuda/graph_capture.h"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
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

// While alive, this thread records rec's device work on `stream`, its
// allocations from graph pool `pool`. The pool is taken first, so a refusal
// (another pool active) leaves nothing set.
class RecordingScope {
 public:
  RecordingScope(Recording& rec, cudaStream_t stream, CachingAllocator& allocator, int pool)
      : allocator_(allocator), device_(rec.device) {
    allocator.begin_pool(pool);
    recording = &rec;
    set_capture_stream(device_, stream);
  }
  ~RecordingScope() {
    allocator_.end_pool();
    set_capture_stream(device_, nullptr);
    recording = nullptr;
  }
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;

 private:
  CachingAllocator& allocator_;
  int device_;
};

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

// The graph pool of each foreign capture (run_in_foreign_capture) by device
// and capture id. An entry outlives its capture (ids are never reused), and is
// dropped when the graph's user object lets the pool go.
struct ForeignPool {
  int device;
  int pool;
  unsigned long long capture;
};
std::mutex foreign_mu;
std::map<std::pair<int, unsigned long long>, int> foreign_pools;

// The user object's destructor, on a CUDA thread once the captured graph and
// its executable graphs are gone: no CUDA calls, no allocator lock.
void release_foreign_pool(void* p) {
  const ForeignPool* fp = static_cast<ForeignPool*>(p);
  {
    std::lock_guard<std::mutex> lock(foreign_mu);
    foreign_pools.erase({fp->device, fp->capture});
  }
  caching_allocator(fp->device).release_pool_later(fp->pool);
  delete fp;
}

// The pool of the capture on `stream` (made, and held by its graph, on the
// capture's first call); throws naming `stream` when it is not capturing.
int foreign_capture_pool(int device, cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long capture = 0;
  cudaGraph_t graph = nullptr;
  COPPICE_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &capture, &graph), "graph capture");
  COPPICE_CHECK(status == cudaStreamCaptureStatusActive, "graph capture: stream ", static_cast<const void*>(stream),
                " of cuda:", device, " is not capturing",
                status == cudaStreamCaptureStatusInvalidated ? " (its capture was invalidated)" : "");
  std::unique_lock<std::mutex> lock(foreign_mu);
  auto it = foreign_pools.find({device, capture});
  if (it != foreign_pools.end()) return it->second;
  CachingAllocator& allocator = caching_allocator(device);
  auto* fp = new ForeignPool{device, allocator.new_pool(), capture};
  cudaUserObject_t object = nullptr;
  cudaError_t err = cudaUserObjectCreate(&object, fp, release_foreign_pool, 1, cudaUserObjectNoDestructorSync);
  if (err == cudaSuccess) err = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove);
  if (err != cudaSuccess) {
    lock.unlock();  // the destructor, which the release may run on this thread, takes foreign_mu
    if (object == nullptr) {
      allocator.release_pool(fp->pool);
      delete fp;
    } else {
      cudaUserObjectRelease(object, 1);  // runs release_foreign_pool
    }
    check_cuda(err, "graph capture", "holding the capture's memory pool in its graph (cudaGraphRetainUserObject)");
  }
  foreign_pools[{device, capture}] = fp->pool;
  return fp->pool;
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
  {
    RecordingScope scope(rec, stream, allocator, pool);
    try {
      fn();
    } catch (const std::exception& e) { failure = e.what(); }
  }
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

void run_in_foreign_capture(int device, cudaStream_t stream, const std::function<void()>& fn) {
  COPPICE_CHECK(recording == nullptr, "graph capture: this thread is already capturing for cuda:", recording->device,
                "; captures do not nest");
  DeviceGuard guard(device);
  const int pool = foreign_capture_pool(device, stream);
  Recording rec{device, {}};
  RecordingScope scope(rec, stream, caching_allocator(device), pool);
  fn();
  COPPICE_CHECK(rec.checks.empty(), "graph capture: this work checks its results on the host after its kernels run ",
                "(", rec.checks.size(), " checks, such as an index range), which a graph captured by another library ",
                "cannot do at each replay; run it outside the capture");
}

}  // namespace coppice::cuda

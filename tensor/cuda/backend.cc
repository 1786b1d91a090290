// The CUDA DeviceBackend: registered at start-up, it asks the driver nothing
// until first used, so a CUDA build starts (and runs on the CPU) on machines
// without a GPU or driver.
#include "tensor/backend.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/copy_pieces.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/deferred_checks.h"
#include "tensor/cuda/graph_capture.h"
#include "tensor/cuda/side_stream.h"
#include "tensor/cuda/stream.h"
#include "tensor/error.h"

namespace coppice::cuda {
namespace {

class CudaBackend final : public DeviceBackend {
 public:
  int device_count() const override { return cuda::device_count(); }

  Allocator& allocator(int index) override { return caching_allocator(index); }

  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) override {
    if (nbytes == 0) return;
    if (dst_device.is_cpu() && src_device.is_cpu()) {
      std::memcpy(dst, src, nbytes);
      return;
    }
    const char* op = "cuda copy";
    if (dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index) {
      // Peer copy: ordered after the source device's work, then both drained.
      synchronize(dst_device.index);
      DeviceGuard guard(src_device.index);
      cudaStream_t stream = current_stream(src_device.index);
      COPPICE_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, stream), op);
      COPPICE_CUDA_CHECK(cudaStreamSynchronize(stream), op);
      return;
    }
    const int device = dst_device.is_cuda() ? dst_device.index : src_device.index;
    cudaMemcpyKind kind = dst_device.is_cpu()   ? cudaMemcpyDeviceToHost
                          : src_device.is_cpu() ? cudaMemcpyHostToDevice
                                                : cudaMemcpyDeviceToDevice;
    DeviceGuard guard(device);
    cudaStream_t stream = current_stream(device);
    // Queued on the device's stream, behind the kernels that produced `src`;
    // the synchronize makes the copy synchronous from the caller's view (the
    // host buffer may be reused or read as soon as this returns). A copy
    // within the device involves no host memory and needs none, which also
    // lets a graph capture record it.
    COPPICE_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, stream), op);
    if (kind == cudaMemcpyDeviceToDevice) return;
    COPPICE_CUDA_CHECK(cudaStreamSynchronize(stream), op);
    settle_checks(device, true);  // the host waited anyway: a bad index queued before surfaces here
  }

  void copy_pieces(int index, const PieceCopy& copy) override { cuda::copy_pieces(index, copy); }

  void synchronize(int index) override {
    DeviceGuard guard(index);
    COPPICE_CUDA_CHECK(cudaStreamSynchronize(current_stream(index)), "cuda synchronize");
    settle_checks(index, true);
  }

  std::unique_ptr<CapturedWork> capture(int index, const std::function<void()>& fn, std::string* why_not) override {
    return capture_graph(index, fn, why_not);
  }

  void run_in_foreign_capture(int index, void* stream, const std::function<void()>& fn) override {
    cuda::run_in_foreign_capture(index, static_cast<cudaStream_t>(stream), fn);
  }

  // `second`'s work goes to the device's side stream, forked before first's
  // work is queued (the two are independent) and joined before anything
  // queued later. Until the join, blocks freed on the host are held back:
  // either stream's work may still be using them. Calls do not nest (the
  // side stream's branch holds its lock from fork to join).
  void run_beside(int index, const std::function<void()>& first, const std::function<void()>& second) override {
    DeviceGuard guard(index);
    CachingAllocator& memory = caching_allocator(index);
    const cudaStream_t main = current_stream(index);
    memory.hold_frees();
    struct Release {
      CachingAllocator& memory;
      ~Release() { memory.release_held(); }
    } release{memory};
    SideBranch side(index, main, "run_beside");
    first();
    {
      StreamOverride on_side(index, side.stream());
      second();
    }
    side.join();
  }
};

const bool registered = [] {
  static CudaBackend* backend = new CudaBackend();  // never destroyed (see caching_allocator.h)
  register_backend(DeviceType::kCuda, backend);
  return true;
}();

}  // namespace
}  // namespace coppice::cuda

// The CUDA DeviceBackend: registered at start-up, it asks the driver nothing
// until first used, so a CUDA build starts (and runs on the CPU) on machines
// without a GPU or driver.
#include "tensor/backend.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

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
    join_beside(device);  // the copy may read what work beside the stream writes
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
    join_beside(index);
    COPPICE_CUDA_CHECK(cudaStreamSynchronize(current_stream(index)), "cuda synchronize");
    settle_checks(index, true);
  }

  // A capture ends with the side stream joined (an unjoined stream fails it).
  // It also starts with the side stream joined: a capture records no wait on
  // work queued before it.
  std::unique_ptr<CapturedWork> capture(int index, const std::function<void()>& fn, std::string* why_not) override {
    join_beside(index);
    return capture_graph(index, joined_after(index, fn), why_not);
  }

  void run_in_foreign_capture(int index, void* stream, const std::function<void()>& fn) override {
    join_beside(index);
    cuda::run_in_foreign_capture(index, static_cast<cudaStream_t>(stream), joined_after(index, fn));
  }

  // `second`'s work goes to the device's side stream, forked before first's
  // work is queued (the two are independent), and its branch stays open, so
  // that it also runs beside what is queued after the call: it is joined
  // when a branch opens two calls later, or by join_beside (a synchronize, a
  // copy, a capture's start or end). Until then, blocks freed on the host are
  // held back: either stream's work may still be using them. Calls do not nest.
  void run_beside(int index, const std::function<void()>& first, const std::function<void()>& second) override {
    DeviceGuard guard(index);
    Open& open = open_of(index);
    COPPICE_CHECK(open.owner.load() != std::this_thread::get_id(),
                  "run_beside: called from inside run_beside's own functions (calls do not nest)");
    const std::lock_guard<std::mutex> lock(open.lock);
    while (open.branches.size() >= kOpenBranches) join_oldest(index, open);
    open.owner.store(std::this_thread::get_id());
    struct Owned {
      Open& open;
      ~Owned() { open.owner.store(std::thread::id()); }
    } owned{open};
    try {
      auto side = std::make_unique<SideBranch>(index, current_stream(index), "run_beside");
      open.branches.push_back(Branch{std::move(side), caching_allocator(index).hold_frees()});
      Branch& branch = open.branches.back();
      first();
      StreamOverride on_side(index, branch.side->stream());
      second();
      branch.side->end();
    } catch (...) {
      join_all(index, open);
      throw;
    }
  }

  // Inside run_beside's functions (this thread holds the branches) a no-op:
  // their own branch is joined later, and the ones before it wait their turn.
  void join_beside(int index) override {
    Open& open = open_of(index);
    if (open.owner.load() == std::this_thread::get_id()) return;
    const std::lock_guard<std::mutex> lock(open.lock);
    join_all(index, open);
  }

 private:
  // A branch left open by run_beside: its side stream's branch and the
  // allocator's hold that keeps the blocks freed since it opened.
  struct Branch {
    std::unique_ptr<SideBranch> side;
    uint64_t hold;
  };
  // A device's open branches, oldest first, and the thread inside
  // run_beside's functions, if any.
  struct Open {
    std::mutex lock;
    std::atomic<std::thread::id> owner{};
    std::deque<Branch> branches;
  };
  // Branches open at once: a weight gradient runs beside its own product
  // and the next one's, then joins.
  static constexpr size_t kOpenBranches = 2;

  Open& open_of(int index) {
    COPPICE_CHECK(index >= 0 && index < kSideStreamDevices, "run_beside: device index ", index, " out of range");
    return open_[index];
  }

  // The caller holds open.lock. The main stream waits for the oldest
  // branch's work (and so for every branch before it), and the blocks held
  // since it opened return to the cache.
  static void join_oldest(int index, Open& open) {
    Branch branch = std::move(open.branches.front());
    open.branches.pop_front();
    struct Release {
      int index;
      uint64_t hold;
      ~Release() { caching_allocator(index).release_held(hold); }
    } release{index, branch.hold};
    branch.side->join();
  }

  static void join_all(int index, Open& open) {
    while (!open.branches.empty()) join_oldest(index, open);
  }

  // fn, then the side stream joined (also when fn throws).
  std::function<void()> joined_after(int index, const std::function<void()>& fn) {
    return [this, index, &fn] {
      struct Join {
        CudaBackend* backend;
        int index;
        ~Join() {
          try {
            backend->join_beside(index);
          } catch (...) {  // a destructor does not throw; the capture reports the error
          }
        }
      } join{this, index};
      fn();
    };
  }

  Open open_[kSideStreamDevices];
};

const bool registered = [] {
  static CudaBackend* backend = new CudaBackend();  // never destroyed (see caching_allocator.h)
  register_backend(DeviceType::kCuda, backend);
  return true;
}();

}  // namespace
}  // namespace coppice::cuda

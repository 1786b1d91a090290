// What the tensor core needs from a device: memory, copies and synchronization.
//
// The CUDA backend lives in tensor/cuda and registers itself at start-up when
// the build has CUDA; the core never names CUDA, so a CPU-only build links.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/allocator.h"
#include "tensor/device.h"

namespace coppice {

// Device work recorded once and replayed by one call (a CUDA graph): the
// kernels, copies and library calls a function queued, with the addresses
// they used. See capture_work.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  // Runs the recorded work again, queued on the device like any other work;
  // then runs the checks the work deferred (bad-index reports), throwing
  // coppice::Error as the eager call would have.
  virtual void replay() = 0;
};

// Contiguous pieces copied into one contiguous destination (cat's one
// launch): the destination is `rows` rows of `dst_row_bytes`; piece k is
// `rows` rows of row_bytes[k] at src[k], and lands at byte col_bytes[k] of
// each destination row. Pieces do not overlap each other or the destination.
struct PieceCopy {
  void* dst = nullptr;
  int64_t rows = 1;
  int64_t dst_row_bytes = 0;
  std::vector<const void*> src;
  std::vector<int64_t> row_bytes;
  std::vector<int64_t> col_bytes;
};

// PieceCopy on the host: a memcpy per piece and row (the CUDA backend's twin).
void copy_pieces_on_host(const PieceCopy& copy);

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual int device_count() const = 0;
  virtual Allocator& allocator(int index) = 0;
  // Copies `nbytes` between any two of: host memory, this backend's devices.
  // Ordered with the device's work; returns when the data is in `dst`.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) = 0;
  virtual void synchronize(int index) = 0;
  // Queues `copy` (every address on device `index`) as one launch, or a few
  // for very many pieces, where a copy per piece would launch each: cat of
  // contiguous tensors, and the gradient exchange's buckets (issue 37).
  virtual void copy_pieces(int index, const PieceCopy& copy) = 0;
  // Records the device work `fn` queues on device `index` without running it
  // (the host code in `fn` does run, once). Returns null, with the reason in
  // *why_not, when the work cannot be recorded: it reads results back on the
  // host, synchronizes, or the backend has no capture.
  virtual std::unique_ptr<CapturedWork> capture(int /*index*/, const std::function<void()>& /*fn*/,
                                                std::string* why_not) {
    *why_not = "this device has no graph capture";
    return nullptr;
  }
  // Runs `fn` with its device work recorded into a capture another library
  // is making on `stream` (this backend's raw stream handle): see
  // run_in_foreign_capture.
  virtual void run_in_foreign_capture(int index, void* stream, const std::function<void()>& fn);
  // Runs `first`, then `second`, whose device work may run at the same time
  // as first's (a second stream) and as the work queued after it, until
  // join_beside. The default runs them one after the other.
  virtual void run_beside(int /*index*/, const std::function<void()>& first, const std::function<void()>& second) {
    first();
    second();
  }
  // Work queued after this follows the work of every run_beside before it.
  virtual void join_beside(int /*index*/) {}
};

// Called once by a backend at static initialization.
void register_backend(DeviceType type, DeviceBackend* backend);
// The backend for `type`, or nullptr when this build has none.
DeviceBackend* find_backend(DeviceType type);
// The backend for `device`; throws a clear error when it is missing or the
// device index does not exist.
DeviceBackend& backend_for(Device device);

// True when the build has CUDA and at least one GPU is visible.
bool cuda_available();
int cuda_device_count();
// The allocator that owns memory on `device`.
Allocator& allocator_for(Device device);
// Waits for all work queued on `device` (no-op on the CPU).
void synchronize(Device device);

// Records `fn`'s device work on `device` for replay (DeviceBackend::capture),
// declining also when `fn` draws random numbers: a replay would repeat the
// draw's numbers instead of drawing new ones. Null with *why_not on the CPU.
// Memory `fn` allocates comes from a pool kept for the returned object's
// lifetime, so tensors made inside `fn` and kept by the caller are where each
// replay writes.
std::unique_ptr<CapturedWork> capture_work(Device device, const std::function<void()>& fn, std::string* why_not);

// Runs `fn` with its work on `device` recorded into a graph capture that
// another library (PyTorch's CUDA graphs) is making on `stream`, a raw stream
// handle of the device's backend (cudaStream_t): fn's kernels go to that
// stream, and its memory comes from a pool the captured graph keeps until it
// is destroyed. Throws when the stream is not capturing, the device has no
// capture, or fn needs a host check after its kernels (nothing would run it
// at each replay).
void run_in_foreign_capture(Device device, void* stream, const std::function<void()>& fn);

// Runs `first` and then `second` on the host, letting their work on
// `device` run at the same time (DeviceBackend::run_beside): for two
// independent kernels that each leave part of a GPU idle or read the same
// operand, such as a linear's input gradient and its weight gradient. The
// two must not write what the other reads, nor call run_beside themselves.
//
// second's work may go on running beside what is queued after the call, up
// to its join: the run_beside after the next one (two branches stay open,
// so that a weight gradient also overlaps the next layer's product),
// join_beside(device), a synchronize, a copy to or from the host, or a graph
// capture's start or end. So nothing
// queued before the join may read what second writes, or write what it
// reads; and blocks freed on the host before the join are reused only after
// it. The autograd engine joins before a gradient made there is used (a
// leaf's accumulation, a hook) and at the end of backward.
// On the CPU, one after the other.
void run_beside(Device device, const std::function<void()>& first, const std::function<void()>& second);

// Work queued on `device` after this follows the work of every run_beside
// before it (see run_beside). A no-op on the CPU and where nothing is pending.
void join_beside(Device device);

}  // namespace coppice

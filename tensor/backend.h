// What the tensor core needs from a device: memory, copies and synchronization.
//
// The CUDA backend lives in tensor/cuda and registers itself at start-up when
// the build has CUDA; the core never names CUDA, so a CPU-only build links.
#pragma once

#include <cstddef>

#include "tensor/allocator.h"
#include "tensor/device.h"

namespace coppice {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual int device_count() const = 0;
  virtual Allocator& allocator(int index) = 0;
  // Copies `nbytes` between any two of: host memory, this backend's devices.
  // Ordered with the device's work; returns when the data is in `dst`.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t nbytes) = 0;
  virtual void synchronize(int index) = 0;
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

}  // namespace coppice

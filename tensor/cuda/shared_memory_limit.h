// A kernel's dynamic shared memory past the default 48 KB, allowed once per
// device: CUDA launches such a kernel only after cudaFuncSetAttribute has
// raised its limit, and that attribute belongs to the device current when it
// was set, so a process that runs the kernel on two devices must set it on
// each.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <string_view>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"

namespace coppice::cuda {

// The devices a kernel's once-per-device record covers (a bit each in
// allow_shared_memory's word); a device past them is set, or asked, every time.
constexpr int kRecordedDevices = 64;
static_assert(kRecordedDevices <= 64, "a bit each in a uint64_t");

// Raises kernel's dynamic shared memory limit to `bytes` on the current
// device and asks for the largest carveout (all of the SM's unified memory as
// shared memory, so that as many thread blocks share an SM as their size
// allows), unless `devices` (the kernel's own record, a bit for each of
// the kRecordedDevices first devices) says it was done there. A device past
// them has no bit and is set every time, rather than take another device's
// bit and be skipped.
template <typename Kernel>
void allow_shared_memory(Kernel kernel, int bytes, std::atomic<uint64_t>& devices, std::string_view op) {
  const int device = current_device(op);
  const uint64_t bit = device < kRecordedDevices ? uint64_t{1} << device : 0;
  if ((devices.load(std::memory_order_acquire) & bit) != 0) return;
  COPPICE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), op);
  COPPICE_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared), op);
  devices.fetch_or(bit, std::memory_order_acq_rel);
}

}  // namespace coppice::cuda

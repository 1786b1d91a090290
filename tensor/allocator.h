// Memory allocators: an aligned one on the CPU, a caching one per CUDA device.
#pragma once

#include <cstddef>
#include <cstdint>

namespace coppice {

struct AllocatorStats {
  int64_t allocated_bytes = 0;       // bytes handed out and not yet returned
  int64_t peak_allocated_bytes = 0;  // high-water mark of allocated_bytes since reset_peak()
  int64_t reserved_bytes = 0;        // bytes obtained from the system (>= allocated on CUDA)
  int64_t allocations = 0;           // allocate() calls
  int64_t system_allocations = 0;    // calls to the system allocator (aligned_alloc, cudaMalloc)
  int64_t system_frees = 0;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `nbytes` bytes (a valid pointer even for 0 bytes);
  // throws coppice::Error when the memory cannot be had.
  virtual void* allocate(size_t nbytes) = 0;
  // Gives back a block from allocate(); `nbytes` is the size it was asked for.
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
  // Returns cached, unused blocks to the system (no-op where nothing is cached).
  virtual void empty_cache() {}
};

// 64-byte aligned host memory (cache lines and AVX-512 loads).
Allocator& cpu_allocator();

// What every block a device's allocator hands out is aligned to: 64 bytes
// on the CPU (cpu_allocator), 256 on a CUDA device (cudaMalloc's, which the
// caching allocator keeps: it never splits a block). A view at that
// alignment is, to a kernel that picks its code by its operands' addresses
// (cuBLAS), as good as a fresh tensor.
inline constexpr size_t kCpuAllocationAlignment = 64;
inline constexpr size_t kCudaAllocationAlignment = 256;

}  // namespace coppice

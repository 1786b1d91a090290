// A caching allocator for one CUDA device.
//
// cudaMalloc and cudaFree are slow and cudaFree synchronizes the device, so
// blocks are kept on free lists after use and handed out again. Requests are
// rounded to size classes: 512 B steps up to 1 MiB ("small"), 2 MiB steps
// above. A small request takes a cached block of exactly its class; a large
// one the smallest cached block of at least its class and at most 1/8 larger.
// Blocks are never split or merged, which keeps the allocator short and its
// behaviour easy to predict. When cudaMalloc fails, every cached block is
// released and the call retried once; if it fails again the allocator throws
// coppice::Error naming the size and the device.
//
// Ordering: Coppice runs all work on one stream per device (stream.h), so a
// block freed on the host may be reused at once: the next user's work is
// queued behind the last user's. No events are needed.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>

#include "tensor/allocator.h"

namespace coppice::cuda {

class CachingAllocator final : public Allocator {
 public:
  static constexpr size_t kSmallStep = 512;
  static constexpr size_t kSmallLimit = size_t{1} << 20;  // requests up to this are "small"
  static constexpr size_t kLargeStep = size_t{2} << 20;

  explicit CachingAllocator(int device) : device_(device) {}

  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  AllocatorStats stats() const override;
  void reset_peak() override;
  void empty_cache() override;

  // The block size a request of `nbytes` is served with.
  static size_t round_size(size_t nbytes);
  int device() const { return device_; }

 private:
  void* system_allocate(size_t size);  // cudaMalloc, emptying the cache and retrying once
  void release_cached();               // cudaFree every cached block; needs mu_ held

  const int device_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_blocks_;     // cached blocks by size
  std::unordered_map<void*, size_t> live_;       // handed-out block -> block size
  AllocatorStats stats_;
};

// The process-wide allocator of `device` (created on first use, never destroyed:
// tensors may outlive static destructors, and the CUDA runtime may be gone by then).
CachingAllocator& caching_allocator(int device);

}  // namespace coppice::cuda

// A caching allocator for one CUDA device.
//
// cudaMalloc and cudaFree are slow and cudaFree synchronizes the device, so
// blocks are kept on free lists after use and handed out again. Requests are
// rounded to size classes: 512 B steps up to 1 MiB ("small"), 2 MiB steps
// above. A small request takes a cached block of exactly its class; a large
// one the smallest cached block of at least its class and at most 1/8 larger.
// Blocks are never split or merged, which keeps the allocator short and its
// behaviour easy to predict. A request larger than the device's memory is
// refused at once. When cudaMalloc fails, every cached block is released and
// the call retried once; if it fails again the allocator throws
// coppice::Error naming the device and the bytes requested, free and total.
//
// Ordering: Coppice runs all work on one stream per device (stream.h), so a
// block freed on the host may be reused at once: the next user's work is
// queued behind the last user's. No events are needed.
//
// Two streams at once (run_beside, side_stream.h): while work queued on a
// side stream may still run, a block freed on the host must not go to work
// queued on the other stream. From hold_frees() on, freed blocks stay out of
// every free list, each under the latest hold; release_held(id) returns
// those of hold `id` and every earlier one, once the streams are joined past
// the side stream's work of that hold.
//
// Graph pools: work captured into a CUDA graph (graph_capture.h) writes the
// same addresses every time the graph is replayed, so no other tensor may
// ever be given them. While a pool is active every allocation comes from it,
// and a block allocated in a pool returns to that pool's own free list when
// freed (during the capture, where the graph's stream order makes reuse
// safe, or later), never to the shared one. Releasing the pool (when its
// graph is destroyed) hands its free blocks, and later its live ones as they
// are freed, back to the shared cache.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

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

  // Makes `pool` (> 0, from new_pool()) the pool every allocation comes from
  // until end_pool(); one pool at a time.
  int new_pool();
  void begin_pool(int pool);
  void end_pool();
  // The pool's graph is gone: its blocks go back to the shared cache.
  void release_pool(int pool);
  // release_pool, done at the allocator's next allocation or new_pool: for
  // CUDA's own threads (a graph's user-object destructor), which may neither
  // call CUDA nor wait on a lock held around cudaMalloc.
  void release_pool_later(int pool);

  // Frees from now on are held back under a new hold, whose id (increasing)
  // this returns, until release_held with it or a later hold's id.
  uint64_t hold_frees();
  // Returns the blocks held under hold `id` and under every earlier hold.
  void release_held(uint64_t id);

  // The block size a request of `nbytes` is served with.
  static size_t round_size(size_t nbytes);
  int device() const { return device_; }

 private:
  void* system_allocate(size_t size);          // cudaMalloc, emptying the cache and retrying once
  void release_cached();                       // cudaFree every cached block; needs mu_ held
  size_t device_total_bytes();                 // the device's memory (cudaMemGetInfo, asked once); needs mu_ held
  void release_pending_pools();                // the pools release_pool_later named; needs mu_ held
  void release_pool_locked(int pool);          // release_pool's work; needs mu_ held
  void free_locked(void* ptr, size_t nbytes);  // deallocate's work; needs mu_ held
  // Throws coppice::Error naming the bytes requested, free and total, and `why`.
  [[noreturn]] void refuse(size_t nbytes, const char* why);

  struct Block {
    size_t size = 0;
    int pool = 0;  // 0: the shared cache
  };
  using FreeList = std::multimap<size_t, void*>;  // cached blocks by size
  FreeList& free_list(int pool);                  // the shared one for pool 0 or a released pool

  const int device_;
  mutable std::mutex mu_;
  FreeList free_blocks_;           // the shared cache
  std::map<int, FreeList> pools_;  // live graph pools
  int active_pool_ = 0;
  int next_pool_ = 1;
  std::unordered_map<void*, Block> live_;  // handed-out block -> its size and pool
  // The holds not yet released, oldest first, each with the blocks freed
  // while it was the latest.
  struct Hold {
    uint64_t id;
    std::vector<std::pair<void*, size_t>> blocks;
  };
  std::deque<Hold> holds_;
  uint64_t next_hold_ = 1;
  AllocatorStats stats_;
  size_t total_bytes_ = 0;  // 0: not asked yet
  // release_pool_later's queue, under its own lock (never held around CUDA calls).
  std::mutex pending_mu_;
  std::vector<int> pending_release_;
  std::atomic<bool> has_pending_release_{false};
};

// The process-wide allocator of `device` (created on first use, never destroyed:
// tensors may outlive static destructors, and the CUDA runtime may be gone by then).
CachingAllocator& caching_allocator(int device);

}  // namespace coppice::cuda

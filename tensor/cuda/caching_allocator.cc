#include "tensor/cuda/caching_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/error.h"
#include "tensor/host_memory.h"

namespace coppice::cuda {

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes <= kSmallLimit) return std::max<size_t>(1, (nbytes + kSmallStep - 1) / kSmallStep) * kSmallStep;
  COPPICE_CHECK(nbytes <= std::numeric_limits<size_t>::max() - kLargeStep, "cuda allocator: ", nbytes,
                " bytes requested, more than any device can address");
  return (nbytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}

void* CachingAllocator::allocate(size_t nbytes) {
  const size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  release_pending_pools();
  // More than the device has can never succeed: refused before cudaMalloc
  // fails and empties the cache for nothing.
  if (size > device_total_bytes()) refuse(nbytes, "more than the device has");
  void* ptr = nullptr;
  FreeList& free = free_list(active_pool_);
  auto it = free.lower_bound(size);
  const size_t max_fit = size <= kSmallLimit ? size : size + size / 8;
  size_t block = size;
  if (it != free.end() && it->first <= max_fit) {
    ptr = it->second;
    block = it->first;
    free.erase(it);
  } else {
    ptr = system_allocate(size);
  }
  live_[ptr] = Block{block, active_pool_};
  stats_.allocated_bytes += static_cast<int64_t>(nbytes);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.allocations;
  return ptr;
}

void* CachingAllocator::system_allocate(size_t size) {
  DeviceGuard guard(device_);
  void* ptr = nullptr;
  // A graph capture in progress on this thread forbids cudaMalloc unless
  // relaxed: the block is not part of the graph, but a pool keeps it for the
  // graph's lifetime (caching_allocator.h), which makes it safe.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  cudaError_t err = cudaMalloc(&ptr, size);
  if (err == cudaErrorMemoryAllocation && active_pool_ == 0) {  // a capture may not free: cudaFree synchronizes
    cudaGetLastError();
    release_cached();
    err = cudaMalloc(&ptr, size);
  }
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    refuse(size, "out of memory");
  }
  check_cuda(err, str_cat("cuda allocator (cuda:", device_, ", ", size, " bytes)"), "cudaMalloc");
  ++stats_.system_allocations;
  stats_.reserved_bytes += static_cast<int64_t>(size);
  return ptr;
}

size_t CachingAllocator::device_total_bytes() {
  if (total_bytes_ == 0) {
    DeviceGuard guard(device_);
    size_t free_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes_) != cudaSuccess) total_bytes_ = 0;
    cudaGetLastError();
  }
  return total_bytes_ == 0 ? std::numeric_limits<size_t>::max() : total_bytes_;  // unknown: no limit here
}

void CachingAllocator::refuse(size_t nbytes, const char* why) {
  DeviceGuard guard(device_);
  size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  cudaGetLastError();
  auto bytes = [](size_t n) { return format_bytes(static_cast<int64_t>(std::min<size_t>(n, INT64_MAX))); };
  fail("cuda allocator: ", bytes(nbytes), " requested on cuda:", device_, " (", why, ") but only ", bytes(free_bytes),
       " of ", bytes(total_bytes), " are free on the device (", stats_.allocated_bytes, " bytes in use by tensors, ",
       stats_.reserved_bytes, " reserved by Coppice)");
}

void CachingAllocator::release_cached() {
  DeviceGuard guard(device_);
  for (auto& [size, ptr] : free_blocks_) {
    cudaFree(ptr);  // synchronizes with the device, so no queued work still uses it
    ++stats_.system_frees;
    stats_.reserved_bytes -= static_cast<int64_t>(size);
  }
  cudaGetLastError();
  free_blocks_.clear();
}

void CachingAllocator::deallocate(void* ptr, size_t nbytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!holds_.empty()) {
    holds_.back().blocks.emplace_back(ptr, nbytes);
    return;
  }
  free_locked(ptr, nbytes);
}

uint64_t CachingAllocator::hold_frees() {
  std::lock_guard<std::mutex> lock(mu_);
  holds_.push_back(Hold{next_hold_, {}});
  return next_hold_++;
}

void CachingAllocator::release_held(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  while (!holds_.empty() && holds_.front().id <= id) {
    for (const auto& [ptr, nbytes] : holds_.front().blocks) free_locked(ptr, nbytes);
    holds_.pop_front();
  }
}

void CachingAllocator::free_locked(void* ptr, size_t nbytes) {
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    // Called from destructors: report, never throw.
    std::fprintf(stderr, "coppice: cuda allocator: cuda:%d does not own block %p; ignored\n", device_, ptr);
    return;
  }
  free_list(it->second.pool).emplace(it->second.size, ptr);
  live_.erase(it);
  stats_.allocated_bytes -= static_cast<int64_t>(nbytes);
}

CachingAllocator::FreeList& CachingAllocator::free_list(int pool) {
  auto it = pool == 0 ? pools_.end() : pools_.find(pool);
  return it == pools_.end() ? free_blocks_ : it->second;
}

int CachingAllocator::new_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  release_pending_pools();
  const int pool = next_pool_++;
  pools_[pool];
  return pool;
}

void CachingAllocator::begin_pool(int pool) {
  std::lock_guard<std::mutex> lock(mu_);
  COPPICE_CHECK(active_pool_ == 0, "cuda allocator: cuda:", device_, " is already allocating from graph pool ",
                active_pool_, "; pools do not nest");
  COPPICE_CHECK(pools_.count(pool) != 0, "cuda allocator: cuda:", device_, " has no graph pool ", pool);
  active_pool_ = pool;
}

void CachingAllocator::end_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  active_pool_ = 0;
}

void CachingAllocator::release_pool(int pool) {
  std::lock_guard<std::mutex> lock(mu_);
  release_pool_locked(pool);
}

void CachingAllocator::release_pool_later(int pool) {
  std::lock_guard<std::mutex> lock(pending_mu_);
  pending_release_.push_back(pool);
  has_pending_release_.store(true, std::memory_order_release);
}

void CachingAllocator::release_pending_pools() {
  if (!has_pending_release_.load(std::memory_order_acquire)) return;
  std::vector<int> pools;
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    pools.swap(pending_release_);
    has_pending_release_.store(false, std::memory_order_relaxed);
  }
  for (int pool : pools) release_pool_locked(pool);
}

void CachingAllocator::release_pool_locked(int pool) {
  auto it = pools_.find(pool);
  if (it == pools_.end()) return;
  if (active_pool_ == pool) active_pool_ = 0;
  free_blocks_.merge(it->second);
  pools_.erase(it);
  // Live blocks keep their pool number, which free_list() now maps to the shared cache.
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached();
}

CachingAllocator& caching_allocator(int device) {
  constexpr int kMaxDevices = 64;
  COPPICE_CHECK(device >= 0 && device < kMaxDevices && device < device_count(),
                "cuda allocator: no device cuda:", device, " (", device_count(), " visible)");
  static std::array<CachingAllocator*, kMaxDevices> allocators{};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (allocators[device] == nullptr) allocators[device] = new CachingAllocator(device);
  return *allocators[device];
}

}  // namespace coppice::cuda

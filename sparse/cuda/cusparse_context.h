// cuSPARSE state shared by the sparse CUDA kernels: one handle per device and
// a bounded cache of descriptors and workspaces keyed by pattern.
//
// Handles: one cusparseHandle_t per device, created on first use and bound to
// the device's stream (tensor/cuda/stream.h: the legacy default stream), so
// cuSPARSE work is ordered with every other Coppice kernel and the caching
// allocator needs no events; and one for the device's side stream
// (tensor/cuda/side_stream.h), whose work may run beside the other's
// (run_beside), so that the two never share a handle.
//
// Cache: a plan (the sparse descriptor, the dense descriptors and the
// external workspace that *_bufferSize asked for) is keyed by a string naming
// the op and its variant (transposes, dense order), the sparse format, the
// pattern version, every shape, nnz, the dtype and the device. Equal pattern
// versions mean equal patterns (sparse_impl.h), so a plan is reused across
// calls whose values change; each call only re-points the descriptors at the
// current arrays (cusparseCsrSetPointers / cusparseCooSetPointers /
// cusparseDnMatSetValues; a Blocked-ELL descriptor, host-side only, is remade
// when its values move), because a tensor with the same version may sit in
// other memory (to_device round trips, with_values); Blocked-ELL, whose index
// array cannot be re-pointed, keys by its address too. COO plans own the i32
// copies of the indices. A new pattern version is a new key. A plan lives as
// long as an index part of its pattern (pattern_anchor, pattern_cache.h):
// the plans of patterns no tensor holds any more (a mask update's old ones)
// are dropped at the next build, and an LRU bound of kPlanCacheCapacity plans
// over all devices, far above a model's live patterns, only stops a runaway
// (a bound of 64 made a model of more than about 21 CSR linears, three plans
// each, rebuild plans on every call: docs/benchmarks.md, "Pattern caches").
// Dropping a plan destroys
// its descriptors and gives its workspace back to the caching allocator
// (allocator_for(device)), which is safe without events because all work runs
// on one stream per device. SpGEMM builds a new pattern every call and caches
// nothing.
//
// Thread safety: one mutex serializes every cuSPARSE call and the cache.
#pragma once

#include <cstddef>
#include <cstdint>

namespace coppice::sparse_cuda {

inline constexpr size_t kPlanCacheCapacity = 1024;

// Counters for tests and benchmarks (all devices together).
struct PlanCacheStats {
  int64_t hits = 0;       // calls that reused a cached plan
  int64_t misses = 0;     // calls that built a plan
  int64_t evictions = 0;  // plans dropped by the LRU bound
  int64_t dropped = 0;    // plans dropped because their pattern had gone
  int64_t size = 0;       // plans cached now
};

PlanCacheStats plan_cache_stats();
// Zeroes the counters (keeps the cached plans).
void reset_plan_cache_stats();
// Drops every cached plan (descriptors destroyed, workspaces freed).
void clear_plan_cache();

}  // namespace coppice::sparse_cuda

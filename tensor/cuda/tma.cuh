// Hopper's tensor memory accelerator (TMA) and the mbarriers that pace it,
// shared by the warp-specialized wgmma kernels (sparse/cuda/nm24_wgmma.cu,
// sparse/cuda/bsr_wgmma.cu, sparse/cuda/bsr_wgmma32.cu; attention_sm90.cu's
// tiles and ds tiles): device code for sm_90a sources, and the host's
// tensor maps (cuTensorMapEncodeTiled, fetched from the driver the runtime
// loaded: the library does not link libcuda itself).
//
// The pattern: a producer thread waits for a stage's "empty" barrier, arms
// its "full" barrier with the bytes it will copy (barrier_expect) and issues
// the copies (tma_load), which complete the barrier's transaction; the
// consumers wait for "full", multiply, and arrive on "empty".
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "tensor/cuda/cuda_check.h"

namespace coppice::cuda {

__device__ __forceinline__ void barrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// After every barrier_init of a thread block, before any other thread uses them.
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void barrier_expect(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void barrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Until the phase of parity `parity` has completed.
__device__ __forceinline__ void barrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nretry:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra retry;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// A 2-D box of `map` at (inner, outer) into shared memory at `dst`,
// completing `bar`'s transaction bytes; what lies outside the tensor arrives
// as zeros.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int inner, int outer, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(map), "r"(inner), "r"(outer), "r"(bar)
      : "memory");
}

// A 4-D box of `map` at (c0, c1, c2, c3), innermost first, as tma_load.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
// `bytes` (a multiple of 16) of global memory at `src` (16-byte aligned) into
// shared memory at `dst` as they lie, completing `bar`'s transaction bytes.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, int bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// The other direction: a 2-D box of shared memory at `src` into `map`'s
// tensor at (inner, outer), as a copy of the thread's current bulk group
// (bulk_commit closes it); what lies outside the tensor is not written. The
// threads' writes to `src` must be fenced to the async proxy first
// (wgmma.cuh's fence_proxy_async) and have met at a barrier.
__device__ __forceinline__ void tma_store(const CUtensorMap* map, uint32_t src, int inner, int outer) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(map), "r"(src),
               "r"(inner), "r"(outer)
               : "memory");
}
// A 4-D box of shared memory at `src` into `map`'s tensor at (c0, c1, c2,
// c3), innermost first, as tma_store.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(map),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
// `bytes` (a multiple of 16) of shared memory at `src` to global memory at
// `dst` (16-byte aligned) as they lie, a copy of the thread's current bulk
// group; the same fence and barrier as tma_store come first.
__device__ __forceinline__ void bulk_store(void* dst, uint32_t src, int bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most kPending of the thread's bulk groups still read their shared
// memory (which may then be written again).
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// Until at most kPending of the thread's bulk groups are still in flight.
template <int kPending>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// A ring of kStages stages of kStageBytes each at the start of dynamic shared
// memory, aligned to 1024 bytes (the 128-byte swizzle's atoms), with its
// barriers after it: full(s), which the loader arms with the bytes it copies
// into stage s, and empty(s), one arrival from each consumer warp done with
// it. A kernel reserves kSmemBytes of dynamic shared memory (the ring, room
// to align, the barriers) and every thread of its block calls stage_ring.
// Step i of a walk uses stage i % kStages, in phase (i / kStages) & 1.
template <int kStages, int kStageBytes>
struct StageRing {
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024 + 16 * kStages;
  unsigned char* smem;  // the aligned start (a write-out tile may reuse it once the ring is drained)
  uint32_t base;        // its shared-memory address
  __device__ __forceinline__ uint32_t stage(int step) const { return base + (step % kStages) * kStageBytes; }
  __device__ __forceinline__ uint32_t full(int step) const {
    return base + kStages * kStageBytes + 8 * (step % kStages);
  }
  __device__ __forceinline__ uint32_t empty(int step) const { return full(step) + 8 * kStages; }
  // The loader, before it fills step's stage: until the consumers are done
  // with what it held kStages steps before (at once the first time round).
  __device__ __forceinline__ void wait_empty(int step) const { barrier_wait(empty(step), ((step / kStages) & 1) ^ 1); }
  // The consumers, before they read step's stage: until its copies are in.
  __device__ __forceinline__ void wait_full(int step) const { barrier_wait(full(step), (step / kStages) & 1); }
};

// The ring over `smem_raw` (the kernel's dynamic shared memory), its
// barriers initialized for `consumer_warps` arrivals on each empty one;
// every thread of the block calls it (it ends in __syncthreads).
template <int kStages, int kStageBytes>
__device__ __forceinline__ StageRing<kStages, kStageBytes> stage_ring(unsigned char* smem_raw, int consumer_warps) {
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  StageRing<kStages, kStageBytes> ring;
  ring.smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  ring.base = static_cast<uint32_t>(__cvta_generic_to_shared(ring.smem));
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(ring.full(s), 1);
      barrier_init(ring.empty(s), consumer_warps);
    }
    barrier_init_fence();
  }
  __syncthreads();
  return ring;
}

// cuTensorMapEncodeTiled from the driver the runtime loaded; `op` names the
// caller in errors.
inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled(std::string_view op) {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [op] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    COPPICE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found),
                       op);
    if (found != cudaDriverEntryPointSuccess || f == nullptr) {
      COPPICE_CUDA_CHECK(cudaErrorNotSupported, op);  // this driver has no cuTensorMapEncodeTiled
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// The tensor map's element type for T, __nv_bfloat16 or __half.
template <typename T>
constexpr CUtensorMapDataType tensor_map_type_16bit() {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "a 16-bit floating type");
  return std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

// A kRank-D tensor of 16-bit elements: `dims` innermost first, `strides` the
// bytes between entries of each outer dimension (multiples of 16), in boxes
// of `box`; zeros outside.
template <int kRank>
inline CUtensorMap tensor_map_16bit(const void* data, const cuuint64_t (&dims)[kRank],
                                    const cuuint64_t (&strides)[kRank - 1], const cuuint32_t (&box)[kRank],
                                    CUtensorMapSwizzle swizzle, CUtensorMapDataType type, std::string_view op) {
  CUtensorMap map;
  cuuint32_t element_strides[kRank];
  for (cuuint32_t& e : element_strides) e = 1;
  const CUresult r = encode_tiled(op)(&map, type, kRank, const_cast<void*>(data), dims, strides, box, element_strides,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) COPPICE_CUDA_CHECK(cudaErrorInvalidValue, op);  // the map's shape or alignment
  return map;
}

// A [outer, inner] matrix of 16-bit elements, rows `row_elems` apart (a
// multiple of 8: TMA's strides are multiples of 16 bytes), in boxes of
// box_inner x box_outer; zeros outside.
inline CUtensorMap tensor_map_16bit(const void* data, int64_t inner, int64_t outer, int64_t row_elems, int box_inner,
                                    int box_outer, CUtensorMapSwizzle swizzle, CUtensorMapDataType type,
                                    std::string_view op) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_elems) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_inner), static_cast<cuuint32_t>(box_outer)};
  return tensor_map_16bit<2>(data, dims, strides, box, swizzle, type, op);
}

}  // namespace coppice::cuda

// Ampere's asynchronous copies from global to shared memory (cp.async): a
// thread issues 16-byte copies, closes them into a group, and later waits
// until at most kPending of its groups are still in flight. The copies land
// without passing through registers, so a kernel can keep many bytes on
// their way while it works on others: the tensor-core kernels' rings
// (tensor/cuda/mma_sync.cuh's users) and LayerNorm's streamed rows
// (tensor/cuda/layer_norm.cu). Device code only; sm_80 and later.
#pragma once

#include <cstdint>

namespace coppice::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory, asynchronously, through L2 only
// (caching the BSR products' x slices in L1 as well measured 0-6 % slower).
__device__ __forceinline__ void copy16_async(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src));
}
// The same, writing zeros instead where !valid (src is then not read).
__device__ __forceinline__ void copy16_async(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 16 : 0));
}
// Closes the thread's copies issued since the last commit into one group.
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Until at most kPending of the thread's groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace coppice::cuda

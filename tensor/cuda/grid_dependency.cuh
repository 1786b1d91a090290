// Programmatic dependent launch (compute capability 9.0): a kernel launched
// with launch_overlapping may start while the kernel before it in its stream
// is still running, and run its prologue (barriers, its walk, copies of
// tensors that kernel does not write) under that kernel's last blocks, where
// a plain launch starts only once they have all finished and pays its launch
// and prologue after them.
//
// The contract, which each kernel launched this way states where it waits:
//   - before wait_for_prerequisite_grids() it reads only what was complete
//     before the kernel it overlaps *started* (a plain launch further back in
//     the stream guarantees that for everything queued before it), and writes
//     nothing in global memory;
//   - wait_for_prerequisite_grids() returns once the kernels before it have
//     completed and their writes are visible, as a plain launch would have
//     started.
// A kernel lets its dependents start by allow_dependent_launch(); without it
// they start when it ends. On devices before 9.0 both are no-ops, and the
// launch attribute is not asked for there (callers launch so only on 9.0).
#pragma once

#include <cuda_runtime.h>

#include <string_view>
#include <utility>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"

namespace coppice::cuda {

__device__ __forceinline__ void wait_for_prerequisite_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) allowed to overlap
// the kernel before it (the contract above).
template <typename... Params, typename... Args>
void launch_overlapping(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                        std::string_view op, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &overlap;
  config.numAttrs = 1;
  COPPICE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), op);
}

// For kernels built for every architecture that call
// wait_for_prerequisite_grids() before touching global memory: launched to
// overlap the kernel before them where `device` runs sm_90a kernels (compute
// capability 9.0), plainly elsewhere. What it hides is the launch's latency
// between a step's short kernels (about 1.7 us each on an H100 in an eager
// GPT step, docs/benchmarks.md).
template <typename... Params, typename... Args>
void launch_overlapping_on_sm90(int device, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                cudaStream_t stream, std::string_view op, Args&&... args) {
  if (runs_sm90a(device, op)) {
    launch_overlapping(kernel, grid, block, smem, stream, op, std::forward<Args>(args)...);
    return;
  }
  kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
  check_launch(op);
}

}  // namespace coppice::cuda

// Attention's tiled kernels on Hopper's warpgroup MMA (wgmma, sm_90a only),
// for head sizes 64 and 128: the same three kernels and arguments as
// attention.cu's mma.sync ones (forward; dk/dv by key tile; dq by query
// tile), which attention.cu launches in their place on devices of compute
// capability 9.0 (the code is built for sm_90a alone). attention_sm90.cu has
// the design.
#pragma once

#include <cstddef>

#include "sparse/attention/cuda/attention_tiles.cuh"

namespace coppice::cuda {

// The kernels for T (__nv_bfloat16 or __half) and head size D (64 or 128),
// their shared memory and block size; each thread block takes
// kSm90AttentionTile queries (forward, dq) or keys (dk/dv) of one head
// (blockIdx.y + n_offset).
constexpr int kSm90AttentionTile = 64;
constexpr int kSm90AttentionThreads = 128;
struct Sm90AttentionKernels {
  void (*forward)(FlashArgs);
  void (*dkdv)(FlashArgs);
  void (*dq)(FlashArgs);
  size_t forward_smem, dkdv_smem, dq_smem;
};
template <typename T, int D>
Sm90AttentionKernels sm90_attention_kernels();

}  // namespace coppice::cuda

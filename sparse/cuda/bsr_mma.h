// BSR products on bf16/f16 tensor cores through mma.sync (internal): the
// kernels bsr_tiles.cu hands square 32x32 and 64x64 blocks to (bsr_mma.cu
// has the design). They run on sm_80 and later; bsr_tiles.cu keeps the WMMA
// kernels for 16x16 and rectangular blocks, f32 and TF32.
#pragma once

#include <cuda_runtime_api.h>

#include "sparse/cuda/bsr_tiles.h"

namespace coppice::sparse_cuda {

// Whether the mma.sync kernels take [bh, bw] blocks of a 16-bit type.
constexpr bool bsr_mma_takes(int bh, int bw) { return bh == bw && (bh == 32 || bh == 64); }

// Stored blocks of one block row that an SDDMM thread block computes
// together (they share the staged rows of `a`): BsrSddmmArgs::group_begin
// splits every block row into runs of at most this many.
constexpr int bsr_mma_sddmm_group(int block) { return block == 64 ? 2 : 8; }

// T is __nv_bfloat16 or __half; blocks as bsr_mma_takes.
template <typename T>
void bsr_mma_product(const BsrProductArgs<T>& args, cudaStream_t stream);
template <typename T>
void bsr_mma_sddmm(const BsrSddmmArgs<T>& args, cudaStream_t stream);

}  // namespace coppice::sparse_cuda

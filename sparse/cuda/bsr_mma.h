// BSR products on bf16/f16 tensor cores through mma.sync (internal): the
// kernels bsr_tiles.cu hands square 16x16, 32x32, 64x64 and 128x128 blocks to
// (bsr_mma.cu has the design). They run on sm_80 and later; bsr_tiles.cu
// keeps the WMMA kernels for rectangular blocks, f32 and TF32.
#pragma once

#include <cuda_runtime_api.h>

#include "sparse/cuda/bsr_tiles.h"

namespace coppice::sparse_cuda {

// Whether the mma.sync kernels take [bh, bw] blocks of a 16-bit type.
constexpr bool bsr_mma_takes(int bh, int bw) { return bh == bw && (bh == 16 || bh == 32 || bh == 64 || bh == 128); }

// Stored blocks of one block row that an SDDMM thread block computes
// together (they share the staged rows of `a`), for [block, block] blocks and
// `blocks_per_row` stored blocks per block row on average:
// BsrSddmmArgs::group_begin splits every block row into runs of at most this
// many, and BsrSddmmArgs::group says which. Runs of 4 where rows hold 4-10
// 32x32 blocks, so that the grid fills the GPU better (H100, 4096^3 bf16:
// 95 %, 6.4 blocks per row, runs of 8 0.103 ms, of 4 0.092; at 98 %, 2.6
// per row, runs of 4 were slower, 0.082 against 0.062: one run per row
// either way, and the bigger thread block hides more latency).
constexpr int bsr_mma_sddmm_group(int block, double blocks_per_row) {
  if (block == 128) return 1;
  if (block == 64) return 2;
  return block == 32 && blocks_per_row >= 4.0 && blocks_per_row < 10.0 ? 4 : 8;
}

// How many ranges of the inner dimension k an SDDMM of `groups` runs splits
// into (BsrSddmmArgs::splits): enough thread blocks for two per SM of `sms`,
// at most 16 ranges and at least 512 of k each. Rows of few blocks give few
// runs, and each run walks all of k alone: at 98 % (2.6 32x32 blocks per
// row, 128 runs for 132 SMs) the SDDMM took 1.5x the product without this.
// The weight gradient of a 1024 x 1024 layer over 16384 tokens at 90 % in
// 64x64 blocks has 16 runs: 16 ranges instead of 8 took it from 0.0457 to
// 0.0326 ms (H200, bf16).
constexpr int bsr_mma_sddmm_splits(int64_t groups, int64_t k, int sms) {
  const int64_t want = groups > 0 ? 2 * sms / groups : 1;
  const int64_t most = k / 512 < 16 ? k / 512 : 16;
  return static_cast<int>(want < 1 || most < 1 ? 1 : want < most ? want : most);
}

// T is __nv_bfloat16 or __half; blocks as bsr_mma_takes.
template <typename T>
void bsr_mma_product(const BsrProductArgs<T>& args, cudaStream_t stream);
template <typename T>
void bsr_mma_sddmm(const BsrSddmmArgs<T>& args, cudaStream_t stream);

// values[i] = the sum over s < splits of partial[s * n + i], in that order,
// rounded once: the second pass of a split SDDMM (bsr_mma_sddmm runs it
// itself; bsr_wgmma_sddmm leaves it to its caller). T as above or float.
template <typename T>
void bsr_sum_splits(const float* partial, int splits, int64_t n, T* values, cudaStream_t stream);

}  // namespace coppice::sparse_cuda

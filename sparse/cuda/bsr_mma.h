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
// many, and BsrSddmmArgs::group says which. Runs of 4 where rows hold fewer
// than 10 32x32 blocks: a thread block of 8 warps on a row of 3 left 5 of
// them without a block, and the smaller thread block lets an SM hold four
// (H200, bf16, 90 %, 16384 tokens, with bsr_mma_sddmm_splits' ranges: the
// GPT's 3072 x 1024 weight 0.123 -> 0.115 ms, 4096 x 1024 0.156 -> 0.146;
// 1024 x 1024, whose 32 runs split 16 ways either way, 0.046 -> 0.048; H100,
// 4096^3, 95 %, 6.4 a row: 0.103 -> 0.092). Runs of 8 where rows are longer,
// so that each staged slice of `a` serves more blocks.
constexpr int bsr_mma_sddmm_group(int block, double blocks_per_row) {
  if (block == 128) return 1;
  if (block == 64) return 2;
  return block == 32 && blocks_per_row < 10.0 ? 4 : 8;
}

// How many ranges of the inner dimension k an SDDMM of `groups` runs splits
// into (BsrSddmmArgs::splits), for `slots` thread blocks the GPU holds at
// once (bsr_mma_sddmm_resident times the SMs), within bsr_sddmm_most_splits.
// Each run walks its range alone, so the SDDMM takes about (waves of thread
// blocks) x (k per range); the count that makes that least wins, the fewest
// ranges on a tie (each range adds its partial sums to the second pass). The
// rule before (as many ranges as fill two thread blocks an SM once, rounded
// down) left a quarter of the GPU idle where the runs were a little fewer
// than the slots, and rows of unequal length in one wave waited for the
// longest (H200, bf16, 90 %, 16384 tokens, both rules with their runs: the
// GPT's 3072 x 1024 weight gradient in 32x32 blocks 0.189 -> 0.115 ms, 4096 x
// 1024 0.183 -> 0.146; 1024 x 4096 and MLP-4096's level).
constexpr int bsr_mma_sddmm_splits(int64_t groups, int64_t k, int64_t slots) {
  if (groups <= 0 || slots <= 0) return 1;
  const int64_t most = bsr_sddmm_most_splits(k);
  int best = 1;
  int64_t best_cost = -1;
  for (int64_t s = 1; s <= (most > 1 ? most : 1); ++s) {
    const int64_t waves = (groups * s + slots - 1) / slots, range = (k + s - 1) / s;
    const int64_t cost = waves * range;
    if (best_cost < 0 || cost < best_cost) {
      best = static_cast<int>(s);
      best_cost = cost;
    }
  }
  return best;
}

// T is __nv_bfloat16 or __half; blocks as bsr_mma_takes.
template <typename T>
void bsr_mma_product(const BsrProductArgs<T>& args, cudaStream_t stream);
template <typename T>
void bsr_mma_sddmm(const BsrSddmmArgs<T>& args, cudaStream_t stream);
// The thread blocks of bsr_mma_sddmm's kernel for args (its block, group and
// operand layouts) one SM of the current device holds at once: the slots
// bsr_mma_sddmm_splits fills are this times the SMs. T also float.
template <typename T>
int bsr_mma_sddmm_resident(const BsrSddmmArgs<T>& args);

// The second pass of a split SDDMM (args.splits > 1): values[i] = the sum
// over s < splits of partial[s * n + i] (n: the stored blocks' values), in
// that order, rounded once; and where args.row_sums is asked for, the row
// sums likewise from row_sum_partial, in the same launch (bsr_mma_sddmm runs
// it itself; bsr_wgmma_sddmm leaves it to its caller). T as above or float.
template <typename T>
void bsr_sum_splits(const BsrSddmmArgs<T>& args, cudaStream_t stream);

}  // namespace coppice::sparse_cuda

// BSR products on Hopper's warpgroup MMA (wgmma, sm_90a only), for square
// 32x32, 64x64 and 128x128 blocks of bf16/f16: the same product and
// write-out as bsr_mma.h's mma.sync kernel (BsrProductArgs: bias, relu, the
// gelu forms), which bsr_products.cc runs in its place where bsr_wgmma_runs
// says it can (bsr_wgmma.cu has the design; 32x32 blocks put the tokens on
// wgmma's M instead, bsr_wgmma32.cu), and the SDDMM of a linear's weight
// gradient.
#pragma once

#include <cuda_runtime_api.h>

#include "sparse/cuda/bsr_tiles.h"

namespace coppice::sparse_cuda {

// The blocks the wgmma products and SDDMM take.
constexpr bool bsr_wgmma_takes(int bh, int bw) { return bh == bw && (bh == 32 || bh == 64 || bh == 128); }

// How many warpgroups multiply in the 64x64 kernel, each taking every G-th
// tile whole (ping-pong): two, or three under a forward gelu form and four
// under a gradient form, whose write-out's arithmetic needs the warps to
// hide it (H200, 16384 tokens, bf16, 90 %, the GPT's MLP: fc1's x W^T with
// the gelu 0.190 -> 0.144 ms with three, fc2's dy W with its gradient 0.171
// -> 0.153 with three and 0.113 -> 0.107 with four against three; plain
// products take 5-8 % longer with three, whose ring has a stage less). Four
// fit because a gradient form's y replaces its z in one staging tile (a
// forward form stores both), at 104 registers a consumer thread.
// 128x128 blocks: two, sharing each tile.
// Where this kernel runs it beats mma.sync's at every length of block row,
// gelu forms included (the same products on mma.sync: 0.165 and 0.182 ms;
// plain, 4096 x 1024 x W^T: 0.066 against 0.115).
constexpr int bsr_wgmma_groups(int block, GeluWriteOut gelu) {
  if (block != 64 || gelu == GeluWriteOut::kNone) return 2;
  return is_gelu_gradient(gelu) ? 4 : 3;
}

// Thread blocks of the wgmma SDDMM an SM holds at once for runs of at most
// `group` blocks (the slots of its dispatch model, sddmm_dispatch.h): two
// for 32x32 blocks in runs of up to 4, whose stages are small, one otherwise.
constexpr int bsr_wgmma_sddmm_resident(int block, int group) { return block == 32 && group <= 4 ? 2 : 1; }

// Whether the current device runs the kernel (compute capability 9.0: it is
// built for sm_90a alone) and p's operands are as it reads them: blocks as
// bsr_wgmma_takes, values 16-byte aligned, x contiguous along op(S)'s
// columns (x.row_stride 1: the x or dy rows of a linear's products) with
// 16-byte aligned rows, y (and aux under a gelu form) token-major the same
// way (TMA stores them), and the extents p.inner and p.nblocks set; a
// residual (p.residual, added in the plain form's write-out) token-major the
// same way. T is __nv_bfloat16 or __half.
template <typename T>
bool bsr_wgmma_runs(const BsrProductArgs<T>& p);

template <typename T>
void bsr_wgmma_product(const BsrProductArgs<T>& p, cudaStream_t stream);

// The SDDMM of a linear's weight gradient on wgmma: whether the current
// device runs it and p is as it reads it (blocks as bsr_wgmma_takes, runs
// of at most 8 32x32 blocks, 2 64x64 or 1 128x128 (bsr_mma_sddmm_group), a
// contiguous along its rows (dy^T), b along its columns (x), both 16-byte
// aligned with pitches a multiple of 8, split ranges a multiple of 64, and
// p.b_cols set). With p.splits > 1 it writes p.partial (and
// p.row_sum_partial, asked for row sums) alone: the caller adds the ranges
// (bsr_sum_splits, bsr_mma.h). How many ranges: sddmm_dispatch_splits
// (sddmm_dispatch.h).
template <typename T>
bool bsr_wgmma_sddmm_runs(const BsrSddmmArgs<T>& p);

template <typename T>
void bsr_wgmma_sddmm(const BsrSddmmArgs<T>& p, cudaStream_t stream);

}  // namespace coppice::sparse_cuda

// Tiled BSR kernels (internal): the SpMM of a block-sparse operand in any of
// the four product directions, and the SDDMM sampled at a BSR pattern, with
// each stored block multiplied as a small dense tile through shared memory,
// on tensor cores where the numeric type allows (bsr_tiles.cu has the
// design). Blocks [bh, bw] with bh, bw in {16, 32}, and square 64 blocks of
// a 16-bit type (bsr_mma.h); T float, __nv_bfloat16 or __half; accumulation
// in f32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sparse/cuda/gelu_write_out.h"

namespace coppice::sparse_cuda {

// How tiles multiply: f32 FMAs on f32 data (exact f32, the default), TF32
// tensor cores on f32 data (allow_tf32), bf16/f16 tensor cores.
enum class TileMath { kF32, kTf32, kHalf };

// A dense matrix as a kernel reads or writes it: element (r, c) at
// data[r * row_stride + c * col_stride], so a transposed view needs no copy.
template <typename T>
struct StridedMatrix {
  T* data = nullptr;
  int64_t row_stride = 0, col_stride = 0;
};

// y [out_block_rows * block_m, n] = op(S) @ x, op(S) block-sparse with
// blocks [block_m, block_k]: output block row i sums entries e in
// [ptr[i], ptr[i + 1]), each the stored block bid[e] (e itself when bid is
// null) of S at block column kblk[e]. S's blocks are [bh, bw] row-major in
// `values`; `transposed` reads each transposed (block_m = bw), which is how
// S^T is listed by the block columns of S.
template <typename T>
struct BsrProductArgs {
  const int32_t* ptr = nullptr;
  const int32_t* kblk = nullptr;
  const int32_t* bid = nullptr;
  const T* values = nullptr;
  int bh = 0, bw = 0;
  bool transposed = false;
  int64_t out_block_rows = 0;
  int64_t n = 0;
  StridedMatrix<const T> x;  // [op(S) columns, n]
  StridedMatrix<T> y;        // [op(S) rows, n]
  const T* bias = nullptr;   // [op(S) rows] added to y's rows (linear's bias), or none
  bool relu = false;         // relu after the bias (linear_relu), in f32 before the one rounding
  // A gelu after the bias (gelu_write_out.h; the mma.sync and wgmma kernels
  // only, bsr_mma.h and bsr_wgmma.h), with z in `aux`: y's shape and strides.
  GeluWriteOut gelu = GeluWriteOut::kNone;
  StridedMatrix<T> aux;
  // linear_add's residual, y's shape, added to each value of y after its
  // rounding (the plain form; the 64x64 and 128x128 wgmma kernels only,
  // bsr_wgmma.h), or none (data null).
  StridedMatrix<const T> residual;
  // The output block rows in the order the mma.sync and wgmma kernels take
  // them (longest first, so that the last wave is short), or null for 0, 1, ...
  const int32_t* row_order = nullptr;
  // The extents the wgmma kernel's tensor maps name (bsr_wgmma.h): op(S)'s
  // columns (x's rows) and S's stored blocks.
  int64_t inner = 0;
  int64_t nblocks = 0;
};

template <typename T>
void bsr_tiled_product(const BsrProductArgs<T>& args, TileMath math, cudaStream_t stream);

// values[e] = (a @ b) over stored block e of a BSR pattern (crow [block rows
// + 1], bcol [nblocks], blocks [bh, bw]): a [rows, k], b [k, cols].
template <typename T>
struct BsrSddmmArgs {
  const int32_t* crow = nullptr;
  const int32_t* bcol = nullptr;
  int64_t block_rows = 0;  // of the pattern
  int64_t nblocks = 0;
  int bh = 0, bw = 0;
  int64_t k = 0;
  StridedMatrix<const T> a, b;
  T* values = nullptr;  // [nblocks, bh, bw]
  // For the mma.sync kernels (bsr_mma.h): the stored blocks in runs within
  // one block row, run g = blocks [group_begin[g], group_begin[g + 1]) of
  // block row group_row[g].
  const int32_t* group_begin = nullptr;  // [ngroups + 1]
  const int32_t* group_row = nullptr;    // [ngroups]
  int64_t ngroups = 0;
  int group = 0;  // the most blocks in one run (bsr_mma_sddmm_group)
  // The inner dimension split into `splits` ranges of split_k (the last
  // shorter), each summed by its own thread blocks into `partial` ([splits,
  // nblocks, bh, bw] f32), then added in range order: the same bits on every
  // run. splits 1: no split, partial unused.
  int splits = 1;
  int64_t split_k = 0;
  float* partial = nullptr;
  // b's columns (the pattern's): the wgmma kernel's tensor map names them (bsr_wgmma.h).
  int64_t b_cols = 0;
  // The mma.sync and wgmma kernels: a's row sums over all of k ([block_rows * bh]),
  // in the same pass, where not null (a linear's bias gradient beside its
  // weight's: a is dy^T). The first run of each block row sums that row's
  // staged slices of a; the rows without a stored block take a thread block
  // each (empty_rows [nempty], after the runs) that only stages and sums.
  // Split, each range's sums go to row_sum_partial ([splits, rows] f32) and
  // are added in range order, like the values.
  T* row_sums = nullptr;
  float* row_sum_partial = nullptr;
  const int32_t* empty_rows = nullptr;
  int64_t nempty = 0;
};

// The most ranges an SDDMM over an inner dimension of k splits into, under
// both kernels' rules (bsr_mma_sddmm_splits, sddmm_dispatch_splits): at
// most 16, and at least 512 of k each (0 below 512: no split).
constexpr int64_t bsr_sddmm_most_splits(int64_t k) { return k / 512 < 16 ? k / 512 : 16; }

template <typename T>
void bsr_tiled_sddmm(const BsrSddmmArgs<T>& args, TileMath math, cudaStream_t stream);

}  // namespace coppice::sparse_cuda

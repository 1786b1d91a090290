// A sparse linear's three gradients in one pass, for 32x32 BSR blocks on
// Hopper (bsr_wgmma32_grads.cu): y = x W^T (+ b), dy given, gives
//   dx = dy W                     (or, with z, gelu's gradient at z times it)
//   dW = dy^T x at W's blocks      (the SDDMM)
//   db = dy's column sums
// reading each of dy's per-block slices once for both dx and dW, and x's
// slice of a block column once for every block in it (apart, dy W and the
// SDDMM each read them: both kernels are bound by what the L2 hands the SMs).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sparse/cuda/gelu_write_out.h"

namespace coppice::sparse_cuda {

// The most stored blocks a block column may hold: a thread block keeps the
// weight gradient of each of them in registers for its whole range of tokens.
constexpr int kLinearGradsMostBlocks = 24;

template <typename T>
struct BsrLinearGradsArgs {
  // Row-major and contiguous, 16-byte aligned: dy [n, out], x and z [n, in]
  // (z only for a gelu gradient form), dx [n, in].
  const T* dy = nullptr;
  const T* x = nullptr;
  const T* z = nullptr;
  T* dx = nullptr;
  int64_t n = 0, out = 0, in = 0;
  GeluWriteOut gelu = GeluWriteOut::kNone;  // kNone, kGradient or kGradientTanh
  // W's blocks by block column: column c's entries [col_ptr[c], col_ptr[c + 1]),
  // each with its block row and its index in `values` ([nblocks, 32, 32]);
  // col_order the columns longest first (the launch order).
  const T* values = nullptr;
  int64_t nblocks = 0, block_cols = 0;
  const int32_t* col_ptr = nullptr;
  const int32_t* col_row = nullptr;
  const int32_t* col_id = nullptr;
  const int32_t* col_order = nullptr;
  int most = 0;  // the most blocks in one column (<= kLinearGradsMostBlocks)
  // dW's values [nblocks, 32, 32]; db [out] (null: no bias gradient), summed
  // from the one block of each block row whose bit is set in its column's
  // sum_mask (bit q: the column's q-th entry), and for the block rows with
  // no stored block (empty_rows [nempty]) by thread blocks of their own.
  T* dw = nullptr;
  T* db = nullptr;
  const uint32_t* sum_mask = nullptr;
  const int32_t* empty_rows = nullptr;
  int64_t nempty = 0;
  // The tokens in `splits` ranges of split_n (a multiple of 128; the last
  // shorter). Split, each range's dW and db go to dw_partial ([splits,
  // nblocks, 32, 32] f32) and db_partial ([splits, out] f32), which the
  // caller adds in range order (bsr_sum_splits): the same bits on every run.
  int splits = 1;
  int64_t split_n = 0;
  float* dw_partial = nullptr;
  float* db_partial = nullptr;
};

// Tokens a step of the kernel: a range's length is a multiple of it.
constexpr int kLinearGradsStep = 128;

template <typename T>
void bsr_wgmma32_linear_grads(const BsrLinearGradsArgs<T>& p, cudaStream_t stream);

}  // namespace coppice::sparse_cuda

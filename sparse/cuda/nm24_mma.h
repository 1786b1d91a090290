// 2:4 products on sparse tensor cores (internal): mma.sp m16n8k32 with bf16
// or f16 operands and f32 accumulation (nm24_mma.cu has the design;
// sparse/nm_metadata.h has the layout and its CPU twin; nm24_pack.h the
// device kernels that put a 2:4 weight into the form the instructions read).
// nm_products.cc calls them for the spmm and sddmm routes.
//
// The sparse operand S [rows, cols] is 2:4 along cols: values [rows, cols/2]
// (NmImpl's values as they are) and metadata u16 [rows, cols/16]. The product
// is out = x @ S^T (+ bias) (relu or a gelu form), with x [m, cols] row-major: a linear
// layer's forward with S = W, and its dx = dy @ W with S = W^T where W^T is
// 2:4 too (a transposable pattern).
//
// BSR-of-2:4 (issue 35's hybrid: blocked 128x64 (dense, compressed, dense,
// n_out_of_m(3, 2:4)), a "V:N:M" pattern) is the same product walking only
// the stored blocks: S [rows, cols] in blocks of kBsrNm24BlockRows x
// kNm24StepCols, each 2:4 along its columns, values [nblocks, 128, 32] and
// metadata [nblocks, 128, 4] block after block, block_row_ptr [rows / 128 + 1]
// and block_cols [nblocks] (i32) as BSR's. An empty block row gives zeros
// (and the bias).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sparse/cuda/gelu_write_out.h"

namespace coppice::sparse_cuda {

// The dense width (cols of S) the product kernel walks per step: cols must be
// a multiple of it.
constexpr int64_t kNm24StepCols = 64;

template <typename T>
struct Nm24ProductArgs {
  const T* x = nullptr;            // [m, cols], row-major, 16-byte aligned
  const T* values = nullptr;       // [rows, cols / 2]
  const uint16_t* meta = nullptr;  // [rows, cols / 16]
  const T* bias = nullptr;         // [rows] or null
  bool relu = false;
  T* out = nullptr;  // [m, rows], row-major
  // A gelu after the bias (gelu_write_out.h), with z in aux ([m, rows], row-major).
  GeluWriteOut gelu = GeluWriteOut::kNone;
  T* aux = nullptr;
  int64_t m = 0, rows = 0, cols = 0;
  // BSR-of-2:4 only (bsr_nm24_product): the blocks' row pointers and column indices.
  const int32_t* block_row_ptr = nullptr;
  const int32_t* block_cols = nullptr;
};

// The rows of a BSR-of-2:4 block (a block's columns: kNm24StepCols).
constexpr int64_t kBsrNm24BlockRows = 128;

// T is __nv_bfloat16 or __half; cols % kNm24StepCols == 0.
template <typename T>
void nm24_product(const Nm24ProductArgs<T>& args, cudaStream_t stream);
// The BSR-of-2:4 product; rows % kBsrNm24BlockRows == 0, cols % kNm24StepCols == 0.
template <typename T>
void bsr_nm24_product(const Nm24ProductArgs<T>& args, cudaStream_t stream);

}  // namespace coppice::sparse_cuda

// Own CSR SpMM kernels (internal): Y [rows, n] = S @ X with S in CSR (i32
// pointers and sorted column indices, values f32, f64, bf16 or f16) and X
// [cols, n], Y dense row-major and contiguous, all on one device. bf16 and
// f16 accumulate in f32 and round once; f32 and f64 accumulate in their own
// type. Deterministic: every output element is one thread's sum in stored
// order within its row (no atomics). spmm_choice.h decides, per shape and by
// measurement, whether these or cuSPARSE run; csr_spmm.cu has the design and
// the roofline.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace coppice::sparse_cuda {

enum class CsrSpmmKernel {
  // 64-row x 256-column tiles (128 for f64), X staged through shared
  // memory in chunks of its rows, so that one X row segment serves every row
  // of the tile with an entry in that column: for large n at densities of
  // ~5-50 % (on the H100 the fastest at 90 % sparsity, 4096^2 x 4096^2).
  kTiled,
  // A group of 4..32 lanes per (row, column tile), X read through L1/L2: any
  // n, any alignment, short rows; the fallback where kTiled does not apply
  // or would not fill the GPU.
  kRows,
};

const char* csr_spmm_kernel_name(CsrSpmmKernel kernel);

struct CsrSpmmArgs {
  const int32_t* crow = nullptr;       // [rows + 1]
  const int32_t* col = nullptr;        // [nnz], strictly increasing within a row
  const void* values = nullptr;        // [nnz], of `dtype`
  const int32_t* row_order = nullptr;  // [rows], a permutation; null for 0..rows-1
  int64_t rows = 0, cols = 0, n = 0;
  const void* x = nullptr;  // [cols, n]
  void* y = nullptr;        // [rows, n], every element written
  DType dtype = DType::kF32;
};

// Whether kTiled can run on these operands: x and y 16-byte aligned and n a
// multiple of the 16-byte vector (4 f32, 2 f64, 8 bf16/f16).
bool csr_tiled_supported(const CsrSpmmArgs& args);

// Thread blocks kTiled would launch (a measure of how well it fills the GPU).
int64_t csr_tiled_blocks(const CsrSpmmArgs& args);

// Launches `kernel` on `stream` (kTiled must be supported). rows, n >= 1.
void csr_spmm(CsrSpmmKernel kernel, const CsrSpmmArgs& args, cudaStream_t stream);

// keys[r] = cols - (crow[r + 1] - crow[r]) and ids[r] = r, for a stable
// ascending radix sort that lists rows by decreasing length
// (csr_row_order.h).
void csr_row_order_keys(const int32_t* crow, int64_t rows, int64_t cols, uint32_t* keys, int32_t* ids,
                        cudaStream_t stream);

}  // namespace coppice::sparse_cuda

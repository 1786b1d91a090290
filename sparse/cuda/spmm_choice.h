// Which kernel computes Y = S @ X for S in CSR on CUDA (the one product that
// the SpMM planner's row_major_csr route comes down to, spmm.cc): cuSPARSE or
// one of the own kernels of csr_spmm.h, chosen per shape by measurement.
//
// RuntimeOptions::csr_spmm (COPPICE_CSR_SPMM; tensor/runtime_options.h),
// asked on every call (so that a test or a benchmark can compare the sides in
// one run), says which:
//   auto (default)  the fastest for the product's key, measured once on the
//                   real operands and cached; products below kMinMeasuredWork
//                   multiply-adds take cuSPARSE unmeasured (a launch costs
//                   more than either kernel there, and timing it would cost
//                   more than it could win);
//   own             the own kernels: tiled where it can run, fills the GPU
//                   and the density makes staging X pay, else rows;
//   tiled, rows     that own kernel (tiled falls back to rows where it cannot
//                   run: n not a multiple of 16 bytes, misaligned X);
//   cusparse        cuSPARSE.
// The key: device, rows, cols, n, dtype, whether X is 16-byte aligned with n a
// multiple of the vector, and nnz in quarter-octave buckets (density within
// ~19 %; the mean row length follows from it): a new pattern of the same
// shape and about the same density (a mask update) reuses the choice, while
// the row order the own kernels use is per pattern version
// (csr_row_order.h). The skew of row lengths is not in the key.
// RuntimeOptions::csr_spmm_log (COPPICE_CSR_SPMM_LOG=1) prints each
// measurement to stderr.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

enum class CsrSpmmImpl { kCusparse, kTiled, kRows };

std::string_view csr_spmm_impl_name(CsrSpmmImpl impl);

// Products of fewer multiply-adds (nnz * n) are not measured (see above).
inline constexpr int64_t kMinMeasuredWork = int64_t{1} << 20;

// The product by cuSPARSE: csr [rows, cols] @ x [cols, n].
using CusparseSpmm = std::function<Tensor(const Tensor& csr, const Tensor& x)>;

// csr (CSR on a CUDA device) @ x (dense [cols, n], same device and dtype;
// any strides) by the implementation RuntimeOptions::csr_spmm selects.
Tensor csr_spmm_chosen(const Tensor& csr, const Tensor& x, std::string_view op, const CusparseSpmm& cusparse);

// The same by one own kernel (kTiled or kRows; kTiled falls back to kRows
// where it cannot run).
Tensor own_csr_spmm(const Tensor& csr, const Tensor& x, CsrSpmmImpl impl, std::string_view op);

// For tests and benchmarks.
struct CsrSpmmChoiceStats {
  int64_t measured = 0;  // auto calls that measured (a key not seen before)
  int64_t reused = 0;    // auto calls that used a cached choice
  int64_t size = 0;      // keys cached now
};
CsrSpmmChoiceStats csr_spmm_choice_stats();
// Forgets every cached choice and zeroes the counters.
void clear_csr_spmm_choices();
// What the last csr_spmm_chosen call on this thread ran.
CsrSpmmImpl last_csr_spmm_impl();

}  // namespace coppice::sparse_cuda

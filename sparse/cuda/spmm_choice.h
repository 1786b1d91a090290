// Which kernel computes Y = S @ X for S in CSR on CUDA (the one product that
// the SpMM planner's row_major_csr route comes down to, spmm.cc): cuSPARSE or
// one of the own kernels of csr_spmm.h, chosen per shape by measurement.
//
// The decision csr_spmm (sparse/route_choices.h), asked on every call (so
// that a test or a benchmark can compare the sides in one run), says which:
//   unpinned        the fastest for the product's key, measured once on the
//                   real operands and recorded; products below
//                   kMinMeasuredWork multiply-adds take cuSPARSE unmeasured
//                   (a launch costs more than either kernel there, and timing
//                   it would cost more than it could win);
//   own             the own kernels: tiled where it can run, fills the GPU
//                   and the density makes staging X pay, else rows;
//   tiled, rows     that own kernel (tiled falls back to rows where it cannot
//                   run: n not a multiple of 16 bytes, misaligned X);
//   cusparse        cuSPARSE.
// The key: the device model, rows, cols, n, dtype, whether X is 16-byte aligned with n a
// multiple of the vector, and nnz in quarter-octave buckets (density within
// ~19 %; the mean row length follows from it): a new pattern of the same
// shape and about the same density (a mask update) reuses the choice, while
// the row order the own kernels use is per pattern version
// (csr_row_order.h). The skew of row lengths is not in the key. Each
// measurement is recorded with its times (recorded_route_choices()).
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
// any strides) by the implementation the decision csr_spmm selects.
Tensor csr_spmm_chosen(const Tensor& csr, const Tensor& x, std::string_view op, const CusparseSpmm& cusparse);

// The same by one own kernel (kTiled or kRows; kTiled falls back to kRows
// where it cannot run).
Tensor own_csr_spmm(const Tensor& csr, const Tensor& x, CsrSpmmImpl impl, std::string_view op);

// What the last csr_spmm_chosen call on this thread ran.
CsrSpmmImpl last_csr_spmm_impl();

}  // namespace coppice::sparse_cuda

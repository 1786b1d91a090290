// Blocked-ELL, cuSPARSE's layout: every block row stores the same number
// (ell_cols) of square b x b blocks, padded with -1.
//
// Parts: ell_col_indices i32 [rows/b, ell_cols] (the block column of each
// stored block; within a block row strictly increasing, then -1 padding to
// the end) and values [rows, ell_cols * b] (f32, f64, bf16 or f16): row r,
// slot j's b values are values[r, j*b : (j+1)*b], which is exactly cuSPARSE's
// cusparseCreateBlockedEll value layout (row-major). Values under padding are
// ignored (conversions write zeros there). b divides rows and cols.
// nnz counts the entries of non-padding blocks (nblocks() * b * b).
#pragma once

#include <string_view>

#include "sparse/sparse_impl.h"

namespace coppice {

class BlockedEllImpl : public SparseImpl {
 public:
  // Parts are taken as given (i32 ell_col_indices, contiguous, one device,
  // `nblocks` non-padding entries); use sparse_blocked_ell for parts that come
  // from outside.
  BlockedEllImpl(Tensor ell_col_indices, Tensor values, Shape shape, int64_t block_size, int64_t nblocks,
                 uint64_t version);

  Layout layout() const override { return Layout::kBlockedEll; }
  std::string_view format() const override { return "blocked_ell"; }
  int64_t nnz() const override { return nblocks_ * block_size_ * block_size_; }
  const Tensor& values() const override { return values_; }  // [rows, ell_cols * b]
  SparseParts parts() const override;
  std::map<std::string, std::string> attributes() const override;
  Tensor with_values(const Tensor& values) const override;
  Tensor to_dense() const override;
  Tensor to(TensorOptions options) const override;

  const Tensor& ell_col_indices() const { return ell_col_indices_; }  // i32 [rows/b, ell_cols], -1 = padding
  int64_t block_size() const { return block_size_; }                  // b
  int64_t ell_cols() const { return ell_col_indices_.size(1); }       // blocks per block row, padding included
  int64_t nblocks() const { return nblocks_; }                        // non-padding blocks

 private:
  Tensor ell_col_indices_, values_;
  int64_t block_size_, nblocks_;
};

// Builds a validated Blocked-ELL [rows, cols] (b divides both) from parts on
// one device (ell_col_indices i32 or i64, stored as i32). Throws naming the
// first offending position: out of range, unsorted or duplicate block
// columns, a block column after padding.
Tensor sparse_blocked_ell(const Tensor& ell_col_indices, const Tensor& values, const Shape& shape, int64_t block_size);

// The direct paths between Blocked-ELL and BSR with square blocks (the same
// blocks, re-laid out; ELL takes ell_cols = the most blocks in a block row).
Tensor blocked_ell_to_bsr(const Tensor& ell);
Tensor bsr_to_blocked_ell(const Tensor& bsr);

// The Blocked-ELL impl of `t`, or throws naming `op`.
const BlockedEllImpl& blocked_ell_impl(const Tensor& t, std::string_view op);

}  // namespace coppice

// BSR: block compressed rows, blocks of any shape [bh, bw] dividing the matrix.
//
// Parts: crow_indices i32 [rows/bh + 1], col_indices i32 [nblocks] (block
// columns, strictly increasing within a block row), values [nblocks, bh, bw]
// (f32, f64, bf16 or f16; each block row-major), contiguous on one device.
// The block shape is values' trailing two dims. Every entry of a stored block
// is stored (nnz = nblocks * bh * bw).
#pragma once

#include <string_view>

#include "sparse/sparse_impl.h"

namespace coppice {

class BsrImpl : public SparseImpl {
 public:
  // Parts are taken as given (i32 index parts, contiguous, one device); use
  // sparse_bsr for parts that come from outside.
  BsrImpl(Tensor crow_indices, Tensor col_indices, Tensor values, Shape shape, uint64_t version);

  Layout layout() const override { return Layout::kBsr; }
  std::string_view format() const override { return "bsr"; }
  int64_t nnz() const override { return values_.numel(); }
  const Tensor& values() const override { return values_; }  // [nblocks, bh, bw]
  SparseParts parts() const override;
  std::map<std::string, std::string> attributes() const override;
  Tensor with_values(const Tensor& values) const override;
  Tensor to_dense() const override;
  Tensor to(TensorOptions options) const override;

  const Tensor& crow_indices() const { return crow_indices_; }  // i32 [block_row_count() + 1]
  const Tensor& col_indices() const { return col_indices_; }    // i32 [nblocks], block columns
  int64_t block_rows() const { return values_.size(1); }        // bh
  int64_t block_cols() const { return values_.size(2); }        // bw
  int64_t nblocks() const { return values_.size(0); }
  int64_t block_row_count() const { return shape()[0] / block_rows(); }
  int64_t block_col_count() const { return shape()[1] / block_cols(); }

 private:
  Tensor crow_indices_, col_indices_, values_;
};

// Builds a validated BSR [rows, cols] from parts (any one device; index parts
// i32 or i64, stored as i32; values [nblocks, bh, bw] floating, bh and bw >= 1
// dividing rows and cols). Throws naming the first offending position.
Tensor sparse_bsr(const Tensor& crow_indices, const Tensor& col_indices, const Tensor& values, const Shape& shape);

// Throws naming `op` unless a [bh, bw] block divides `shape` (2-D).
void check_block_shape(const Shape& shape, int64_t bh, int64_t bw, std::string_view op);

// The BSR impl of `t`, or throws naming `op`.
const BsrImpl& bsr_impl(const Tensor& t, std::string_view op);

}  // namespace coppice

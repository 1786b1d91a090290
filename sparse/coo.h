// COO: coordinates of the stored entries of an n-dimensional tensor.
//
// Parts: indices i64 [ndim, nnz] (column k holds the coordinates of entry k)
// and values [nnz] (f32, f64, bf16 or f16), contiguous on one device.
// Duplicates and any order are allowed; a COO tensor is coalesced when its
// entries are sorted row-major (by flat position) without duplicates, and
// every conversion out of COO coalesces first.
#pragma once

#include <string_view>

#include "sparse/sparse_impl.h"

namespace coppice {

class CooImpl : public SparseImpl {
 public:
  // Parts are taken as given (i64 indices [ndim, nnz] and values [nnz],
  // contiguous, one device; `coalesced` true only when it is so); use
  // sparse_coo for parts that come from outside.
  CooImpl(Tensor indices, Tensor values, Shape shape, bool coalesced, uint64_t version);

  Layout layout() const override { return Layout::kCoo; }
  std::string_view format() const override { return "coo"; }
  int64_t nnz() const override { return values_.numel(); }
  const Tensor& values() const override { return values_; }  // [nnz]
  SparseParts parts() const override;
  std::map<std::string, std::string> attributes() const override;
  Tensor with_values(const Tensor& values) const override;
  Tensor to_dense() const override;  // duplicates add
  Tensor to(TensorOptions options) const override;

  const Tensor& indices() const { return indices_; }  // i64 [ndim, nnz]
  // Sorted row-major with no duplicates (known exactly: the factory checks it).
  bool is_coalesced() const { return coalesced_; }

 private:
  Tensor indices_, values_;
  bool coalesced_;
};

// Builds a validated COO tensor of `shape` (at least 1-D) from indices
// [ndim, nnz] (i32 or i64, stored as i64) and values [nnz] on one device.
// Throws naming the first out-of-range coordinate. The result is coalesced
// exactly when its entries are sorted and unique; passing coalesced = true
// asserts that, and throws naming the first unsorted or duplicate entry
// otherwise.
Tensor sparse_coo(const Tensor& indices, const Tensor& values, const Shape& shape, bool coalesced = false);

// Sorts the entries row-major and sums duplicates (in index order, in the
// values' compute type). Returns `coo` itself when it is already coalesced;
// otherwise the result has a fresh pattern version.
Tensor coalesce(const Tensor& coo);

// The COO impl of `t`, or throws naming `op`.
const CooImpl& coo_impl(const Tensor& t, std::string_view op);

}  // namespace coppice

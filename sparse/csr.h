// CSR and CSC: compressed rows (columns) of a 2-D matrix.
//
// CSR parts: crow_indices i32 [rows + 1], col_indices i32 [nnz], values [nnz]
// (f32, f64, bf16 or f16), all contiguous on one device. Columns are strictly
// increasing within a row (sorted, no duplicates). CSC is the same structure
// over columns: ccol_indices i32 [cols + 1], row_indices i32 [nnz], values
// [nnz], rows strictly increasing within a column. The CSC of A holds exactly
// the arrays of the CSR of A's transpose, which is how transposes are taken
// for free (transpose_compressed).
#pragma once

#include <string_view>

#include "sparse/sparse_impl.h"

namespace coppice {

class CompressedImpl : public SparseImpl {
 public:
  // Parts are taken as given (i32 index parts, contiguous, one device); use
  // sparse_csr / sparse_csc for parts that come from outside.
  CompressedImpl(Layout layout, Tensor pointers, Tensor indices, Tensor values, Shape shape, uint64_t version);

  Layout layout() const override { return layout_; }
  std::string_view format() const override { return is_csr() ? "csr" : "csc"; }
  int64_t nnz() const override { return values_.numel(); }
  const Tensor& values() const override { return values_; }  // [nnz]
  SparseParts parts() const override;
  Tensor with_values(const Tensor& values) const override;
  Tensor to_dense() const override;
  Tensor to(TensorOptions options) const override;

  bool is_csr() const { return layout_ == Layout::kCsr; }
  // The compressed dimension's pointers (i32 [compressed_size() + 1]: entries
  // of row r are [pointers[r], pointers[r + 1])) and the other dimension's
  // indices (i32 [nnz]): crow_indices and col_indices for CSR, ccol_indices
  // and row_indices for CSC.
  const Tensor& pointers() const { return pointers_; }
  const Tensor& indices() const { return indices_; }
  // Rows for CSR, columns for CSC; and the other dimension's size.
  int64_t compressed_size() const { return pointers_.numel() - 1; }
  int64_t uncompressed_size() const { return shape()[is_csr() ? 1 : 0]; }

 private:
  Layout layout_;
  Tensor pointers_, indices_, values_;
};

// Builds a validated CSR [rows, cols] from parts (any one device; index parts
// i32 or i64, stored as i32; values floating). Throws coppice::Error naming
// the first offending position.
Tensor sparse_csr(const Tensor& crow_indices, const Tensor& col_indices, const Tensor& values, const Shape& shape);
Tensor sparse_csc(const Tensor& ccol_indices, const Tensor& row_indices, const Tensor& values, const Shape& shape);

// The names a compressed-pattern check puts in its messages.
struct CompressedNames {
  std::string_view op;        // "sparse_csr"
  std::string_view pointers;  // "crow_indices"
  std::string_view indices;   // "col_indices"
  std::string_view outer;     // what one pointer range is: "row", "column", "block row"
};

// Throws unless pointers [outer + 1] and indices (1-D, i32 or i64, dense, on
// one device) form a valid compressed pattern: pointers start at 0, never
// decrease and end at indices' length; indices lie in [0, inner) and strictly
// increase within each range. Shared by CSR, CSC and BSR.
void check_compressed_pattern(const Tensor& pointers, const Tensor& indices, int64_t outer, int64_t inner,
                              const CompressedNames& names);

// The CSR or CSC impl of `t`, or throws naming `op`.
const CompressedImpl& csr_impl(const Tensor& t, std::string_view op);

// The free transpose: CSR A [r, c] becomes the CSC of A^T [c, r] over the very
// same arrays (and back), keeping the pattern version (the stored entries and
// their order are unchanged; caches keyed by version must key by format too).
Tensor transpose_compressed(const Tensor& t);

}  // namespace coppice

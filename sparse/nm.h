// n:m: along the last dim, every group of m consecutive elements keeps at most
// n of them (2:4 being the one sparse tensor cores run).
//
// For a tensor of shape [..., cols] (cols divisible by m, G = cols / m groups
// per row), parts: values [..., G * n] (f32, f64, bf16 or f16) and indices u8
// [..., G * n], contiguous on one device. Slots [g*n, (g+1)*n) of a row belong
// to group g; indices hold each kept element's position within its group, in
// [0, m) and strictly increasing. Every group stores exactly n slots (a group
// with fewer non-zeros stores explicit zeros), so nnz = rows * G * n.
// 1 <= n <= m <= 256.
#pragma once

#include <string_view>

#include "sparse/sparse_impl.h"

namespace coppice {

class NmImpl : public SparseImpl {
 public:
  // Parts are taken as given (u8 indices, contiguous, one device); use
  // sparse_nm for parts that come from outside.
  NmImpl(Tensor values, Tensor indices, Shape shape, int64_t n, int64_t m, uint64_t version);

  Layout layout() const override { return Layout::kNm; }
  std::string_view format() const override { return "nm"; }
  int64_t nnz() const override { return values_.numel(); }
  const Tensor& values() const override { return values_; }  // [..., G * n]
  SparseParts parts() const override;
  std::map<std::string, std::string> attributes() const override;
  Tensor with_values(const Tensor& values) const override;
  Tensor to_dense() const override;  // the decompression
  Tensor to(TensorOptions options) const override;

  const Tensor& indices() const { return indices_; }  // u8 [..., G * n], position within the group
  int64_t n() const { return n_; }
  int64_t m() const { return m_; }
  int64_t groups_per_row() const { return shape().back() / m_; }  // G
  int64_t rows() const { return shape().back() == 0 ? 0 : shape_numel(shape()) / shape().back(); }

 private:
  Tensor values_, indices_;
  int64_t n_, m_;
};

// Builds a validated n:m tensor of `shape` (at least 1-D) from parts on one
// device (indices u8, i32 or i64, stored as u8). Throws naming the first
// offending position: an index outside [0, m), indices not increasing within
// a group, m not dividing the last dim.
Tensor sparse_nm(const Tensor& values, const Tensor& indices, const Shape& shape, int64_t n, int64_t m);

// Compresses a dense tensor keeping, in every group, the n elements of
// largest |x| (ties go to the lower index; NaN counts as largest).
Tensor nm_compress(const Tensor& dense, int64_t n = 2, int64_t m = 4);
// Compresses keeping the positions where `mask` (bool, dense's shape and
// device) is true; throws naming the first group with more than n. Groups
// with fewer fill up with explicit zeros at their lowest free positions.
Tensor nm_compress(const Tensor& dense, const Tensor& mask, int64_t n, int64_t m);
// The dense tensor (zeros outside the kept positions).
Tensor nm_decompress(const Tensor& nm);

// Throws naming `op` unless 1 <= n <= m <= 256 and m divides the last dim of `shape`.
void check_nm_shape(const Shape& shape, int64_t n, int64_t m, std::string_view op);

// The n:m impl of `t`, or throws naming `op`.
const NmImpl& nm_impl(const Tensor& t, std::string_view op);

namespace sparse_detail {
// nm_compress from a mask, with `op` naming the caller in errors.
Tensor nm_from_mask(const Tensor& dense, const Tensor& mask, int64_t n, int64_t m, std::string_view op);
}  // namespace sparse_detail

}  // namespace coppice

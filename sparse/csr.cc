#include "sparse/csr.h"

#include <vector>

#include "sparse/index_util.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

using sparse_detail::host_i64;

// Row (or column) index of every stored entry, expanded from the pointers.
Tensor expand_pointers(const Tensor& pointers, Device device) {
  std::vector<int64_t> ptr = host_i64(pointers);
  std::vector<int64_t> out(ptr.empty() ? 0 : static_cast<size_t>(ptr.back()));
  for (size_t r = 0; r + 1 < ptr.size(); ++r) {
    for (int64_t k = ptr[r]; k < ptr[r + 1]; ++k) out[static_cast<size_t>(k)] = static_cast<int64_t>(r);
  }
  return sparse_detail::index_tensor(out, DType::kI64, device);
}

const ToDenseRegistrar kCsrToDense("csr");
const ToDenseRegistrar kCscToDense("csc");

}  // namespace

CompressedImpl::CompressedImpl(Layout layout, Tensor pointers, Tensor indices, Tensor values, Shape shape,
                               uint64_t version)
    : SparseImpl(std::move(shape), values.dtype(), values.device(), version),
      layout_(layout),
      pointers_(std::move(pointers)),
      indices_(std::move(indices)),
      values_(std::move(values)) {}

SparseParts CompressedImpl::parts() const {
  return {{is_csr() ? "crow_indices" : "ccol_indices", pointers_},
          {is_csr() ? "col_indices" : "row_indices", indices_},
          {"values", values_}};
}

Tensor CompressedImpl::with_values(const Tensor& values) const {
  sparse_detail::check_values(values, str_cat(format(), ".with_values"));
  COPPICE_CHECK(values.shape() == values_.shape(), format(), ".with_values: values of shape ",
                shape_to_string(values.shape()), " for a pattern of ", nnz(), " entries");
  COPPICE_CHECK(values.device() == device(), format(), ".with_values: values on ", values.device().to_string(),
                " for a pattern on ", device().to_string());
  return Tensor(
      std::make_shared<CompressedImpl>(layout_, pointers_, indices_, values.contiguous(), shape(), pattern_version()));
}

Tensor CompressedImpl::to_dense() const {
  const int64_t cols = shape()[1];
  Tensor outer = expand_pointers(pointers_, device());
  Tensor inner = indices_.to(DType::kI64);
  // Flat position of every entry in the row-major dense matrix.
  Tensor flat = is_csr() ? outer * static_cast<double>(cols) + inner : inner * static_cast<double>(cols) + outer;
  return sparse_detail::scatter_to_dense(flat, values_, shape());
}

Tensor CompressedImpl::to(TensorOptions options) const {
  if (options.device == device() && options.dtype == dtype()) {
    return Tensor(std::make_shared<CompressedImpl>(*this));
  }
  return Tensor(std::make_shared<CompressedImpl>(layout_, pointers_.to(options.device), indices_.to(options.device),
                                                 values_.to(options), shape(), pattern_version()));
}

void check_compressed_pattern(const Tensor& pointers, const Tensor& indices, int64_t outer, int64_t inner,
                              const CompressedNames& names) {
  const std::string_view op = names.op;
  sparse_detail::check_index_part(pointers, op, names.pointers, {DType::kI32, DType::kI64});
  sparse_detail::check_index_part(indices, op, names.indices, {DType::kI32, DType::kI64});
  check_same_device({pointers, indices}, op);
  COPPICE_CHECK(pointers.dim() == 1 && indices.dim() == 1, op, ": ", names.pointers, " and ", names.indices,
                " must be 1-D, got ", shape_to_string(pointers.shape()), " and ", shape_to_string(indices.shape()));
  COPPICE_CHECK(pointers.numel() == outer + 1, op, ": ", names.pointers, " has ", pointers.numel(),
                " entries, expected ", outer + 1, " (one per ", names.outer, ", plus one)");
  const int64_t nnz = indices.numel();
  COPPICE_CHECK(nnz < (int64_t{1} << 31), op, ": ", nnz, " entries exceed the i32 index range");
  std::vector<int64_t> ptr = host_i64(pointers), idx = host_i64(indices);
  COPPICE_CHECK(ptr[0] == 0, op, ": ", names.pointers, "[0] is ", ptr[0], ", expected 0");
  for (int64_t r = 0; r < outer; ++r) {
    const int64_t begin = ptr[static_cast<size_t>(r)], end = ptr[static_cast<size_t>(r) + 1];
    COPPICE_CHECK(begin <= end, op, ": ", names.pointers, " decreases at position ", r + 1, " (", begin, " then ", end,
                  ")");
    COPPICE_CHECK(end <= nnz, op, ": ", names.pointers, "[", r + 1, "] is ", end, ", beyond the ", nnz, " entries of ",
                  names.indices);
    for (int64_t k = begin; k < end; ++k) {
      const int64_t c = idx[static_cast<size_t>(k)];
      COPPICE_CHECK(c >= 0 && c < inner, op, ": ", names.indices, "[", k, "] = ", c, " is out of range [0, ", inner,
                    ")");
      if (k == begin) continue;
      const int64_t prev = idx[static_cast<size_t>(k) - 1];
      COPPICE_CHECK(prev < c, op, ": ", names.indices, "[", k, "] = ", c,
                    (prev == c ? " duplicates" : " is smaller than"), " the entry before it in ", names.outer, " ", r);
    }
  }
  COPPICE_CHECK(ptr[static_cast<size_t>(outer)] == nnz, op, ": ", names.pointers, "[", outer, "] is ",
                ptr[static_cast<size_t>(outer)], ", expected nnz = ", nnz, " (the length of ", names.indices, ")");
}

namespace {
Tensor make_compressed(Layout layout, const Tensor& pointers, const Tensor& indices, const Tensor& values,
                       const Shape& shape, const CompressedNames& names) {
  sparse_detail::check_shape(shape, 2, names.op);
  sparse_detail::check_values(values, names.op);
  check_same_device({pointers, indices, values}, names.op);
  const bool csr = layout == Layout::kCsr;
  check_compressed_pattern(pointers, indices, shape[csr ? 0 : 1], shape[csr ? 1 : 0], names);
  COPPICE_CHECK(values.dim() == 1 && values.numel() == indices.numel(), names.op, ": values has shape ",
                shape_to_string(values.shape()), ", expected [", indices.numel(), "] (one per entry of ", names.indices,
                ")");
  return Tensor(std::make_shared<CompressedImpl>(layout, pointers.to(DType::kI32).contiguous(),
                                                 indices.to(DType::kI32).contiguous(), values.contiguous(), shape,
                                                 new_pattern_version()));
}
}  // namespace

Tensor sparse_csr(const Tensor& crow_indices, const Tensor& col_indices, const Tensor& values, const Shape& shape) {
  return make_compressed(Layout::kCsr, crow_indices, col_indices, values, shape,
                         {"sparse_csr", "crow_indices", "col_indices", "row"});
}

Tensor sparse_csc(const Tensor& ccol_indices, const Tensor& row_indices, const Tensor& values, const Shape& shape) {
  return make_compressed(Layout::kCsc, ccol_indices, row_indices, values, shape,
                         {"sparse_csc", "ccol_indices", "row_indices", "column"});
}

const CompressedImpl& csr_impl(const Tensor& t, std::string_view op) {
  const CompressedImpl* c = t.impl_as<CompressedImpl>();
  COPPICE_CHECK(c != nullptr, op, ": expected a CSR or CSC tensor, got format '", t.format(), "'");
  return *c;
}

Tensor transpose_compressed(const Tensor& t) {
  const CompressedImpl& c = csr_impl(t, "transpose_compressed");
  return Tensor(std::make_shared<CompressedImpl>(c.is_csr() ? Layout::kCsc : Layout::kCsr, c.pointers(), c.indices(),
                                                 c.values(), Shape{t.shape()[1], t.shape()[0]}, c.pattern_version()));
}

}  // namespace coppice

#include "sparse/row_sparse.h"

#include <algorithm>
#include <vector>

#include "sparse/bsr.h"
#include "tensor/ops.h"

namespace coppice {

bool is_row_sparse(const Tensor& t) {
  if (!t.defined() || t.layout() != Layout::kBsr) return false;
  const BsrImpl& b = bsr_impl(t, "is_row_sparse");
  return b.block_rows() == 1 && b.block_cols() == t.size(1);
}

Tensor row_sparse_sum(const Tensor& rows, const Tensor& indices, int64_t num_rows, int64_t skip) {
  constexpr std::string_view op = "row_sparse_sum";
  COPPICE_CHECK(rows.dim() == 2, op, ": rows must be [n, d], got ", shape_to_string(rows.shape()));
  COPPICE_CHECK(is_integral(indices.dtype()) && indices.numel() == rows.size(0), op, ": indices must be ", rows.size(0),
                " integers (one per row), got ", dtype_name(indices.dtype()), " ", shape_to_string(indices.shape()));
  COPPICE_CHECK(rows.size(1) > 0, op, ": rows must have at least one column (a [1, 0] block is no row)");
  const Device device = rows.device();
  const int64_t n = rows.size(0), d = rows.size(1);
  const Tensor host = indices.reshape({-1}).to(Device::cpu()).to(DType::kI64).contiguous();
  const int64_t* ix = host.data<int64_t>();
  std::vector<int64_t> kept_positions, kept;
  for (int64_t i = 0; i < n; ++i) {
    COPPICE_CHECK(ix[i] >= 0 && ix[i] < num_rows, op, ": index ", ix[i], " (at position ", i, ") is out of range for ",
                  num_rows, " rows");
    if (ix[i] == skip) continue;
    kept_positions.push_back(i);
    kept.push_back(ix[i]);
  }
  Tensor kept_rows = rows;
  if (static_cast<int64_t>(kept.size()) < n) {
    const int64_t m = static_cast<int64_t>(kept.size());
    kept_rows = m == 0 ? zeros({0, d}, rows.options())
                       : index_select(rows.contiguous(), 0, from_vector(kept_positions, {m}).to(device));
  }
  std::vector<int64_t> distinct = kept;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const int64_t k = static_cast<int64_t>(distinct.size());
  // Each entry's place among the distinct rows, and the block-row pointers.
  const int64_t m = static_cast<int64_t>(kept.size());
  std::vector<int64_t> place(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    place[i] = std::lower_bound(distinct.begin(), distinct.end(), kept[i]) - distinct.begin();
  }
  std::vector<int32_t> crow(static_cast<size_t>(num_rows + 1), 0);
  for (int64_t r : distinct) ++crow[r + 1];
  for (int64_t r = 0; r < num_rows; ++r) crow[r + 1] += crow[r];
  Tensor values =
      k == 0 ? zeros({0, d}, rows.options()) : embedding_backward(kept_rows, from_vector(place, {m}).to(device), k);
  return sparse_bsr(from_vector(crow, {num_rows + 1}).to(device), zeros({k}, TensorOptions(DType::kI32, device)),
                    values.reshape({k, 1, d}), {num_rows, d});
}

Tensor row_sparse_rows(const Tensor& t) {
  COPPICE_CHECK(is_row_sparse(t), "row_sparse_rows: expected a BSR of [1, d] blocks, got ", t.format());
  const Tensor crow = bsr_impl(t, "row_sparse_rows").crow_indices().to(Device::cpu()).to(DType::kI64).contiguous();
  const int64_t* p = crow.data<int64_t>();
  std::vector<int64_t> rows;
  for (int64_t r = 0; r + 1 < crow.numel(); ++r) {
    if (p[r + 1] > p[r]) rows.push_back(r);
  }
  return from_vector(rows, {static_cast<int64_t>(rows.size())}).to(t.device());
}

Tensor row_sparse_values(const Tensor& t) {
  COPPICE_CHECK(is_row_sparse(t), "row_sparse_values: expected a BSR of [1, d] blocks, got ", t.format());
  const Tensor& v = values(t);
  return v.reshape({v.size(0), v.size(2)});
}

Tensor row_sparse_add(const Tensor& a, const Tensor& b) {
  COPPICE_CHECK(is_row_sparse(a) && is_row_sparse(b) && a.shape() == b.shape(), "row_sparse_add: expected two ",
                "row-sparse tensors of one shape, got ", a.format(), " ", shape_to_string(a.shape()), " and ",
                b.format(), " ", shape_to_string(b.shape()));
  Tensor bv = row_sparse_values(b);
  if (bv.dtype() != a.dtype()) bv = bv.to(a.dtype());
  return row_sparse_sum(cat({row_sparse_values(a), bv}, 0), cat({row_sparse_rows(a), row_sparse_rows(b)}, 0),
                        a.size(0));
}

}  // namespace coppice

#include "sparse/coo.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "sparse/index_util.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

using sparse_detail::host_i64;
using sparse_detail::index_tensor;

const ToDenseRegistrar kCooToDense("coo");

// Row-major flat position of every entry.
std::vector<int64_t> flat_positions(const std::vector<int64_t>& idx, const Shape& shape, int64_t nnz) {
  std::vector<int64_t> flat(static_cast<size_t>(nnz), 0);
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t* row = idx.data() + d * static_cast<size_t>(nnz);
    for (int64_t k = 0; k < nnz; ++k) flat[static_cast<size_t>(k)] = flat[static_cast<size_t>(k)] * shape[d] + row[k];
  }
  return flat;
}

std::string coordinates(const std::vector<int64_t>& idx, size_t ndim, int64_t nnz, int64_t k) {
  std::vector<int64_t> c(ndim);
  for (size_t d = 0; d < ndim; ++d) c[d] = idx[d * static_cast<size_t>(nnz) + static_cast<size_t>(k)];
  return shape_to_string(c);
}

}  // namespace

CooImpl::CooImpl(Tensor indices, Tensor values, Shape shape, bool coalesced, uint64_t version)
    : SparseImpl(std::move(shape), values.dtype(), values.device(), version),
      indices_(std::move(indices)),
      values_(std::move(values)),
      coalesced_(coalesced) {}

SparseParts CooImpl::parts() const { return {{"indices", indices_}, {"values", values_}}; }

std::map<std::string, std::string> CooImpl::attributes() const {
  return {{"coalesced", coalesced_ ? "true" : "false"}};
}

Tensor CooImpl::with_values(const Tensor& values) const {
  sparse_detail::check_values(values, "coo.with_values");
  COPPICE_CHECK(values.shape() == values_.shape(), "coo.with_values: values of shape ", shape_to_string(values.shape()),
                " for a pattern of ", nnz(), " entries");
  COPPICE_CHECK(values.device() == device(), "coo.with_values: values on ", values.device().to_string(),
                " for a pattern on ", device().to_string());
  return Tensor(std::make_shared<CooImpl>(indices_, values.contiguous(), shape(), coalesced_, pattern_version()));
}

Tensor CooImpl::to_dense() const {
  std::vector<int64_t> flat = flat_positions(host_i64(indices_), shape(), nnz());
  return sparse_detail::scatter_to_dense(index_tensor(flat, DType::kI64, device()), values_, shape());
}

Tensor CooImpl::to(TensorOptions options) const {
  if (options.device == device() && options.dtype == dtype()) return Tensor(std::make_shared<CooImpl>(*this));
  return Tensor(std::make_shared<CooImpl>(indices_.to(options.device), values_.to(options), shape(), coalesced_,
                                          pattern_version()));
}

Tensor sparse_coo(const Tensor& indices, const Tensor& values, const Shape& shape, bool coalesced) {
  constexpr std::string_view op = "sparse_coo";
  COPPICE_CHECK(!shape.empty(), op, ": shape must have at least one dimension");
  sparse_detail::check_shape(shape, -1, op);
  sparse_detail::check_index_part(indices, op, "indices", {DType::kI32, DType::kI64});
  sparse_detail::check_values(values, op);
  check_same_device({indices, values}, op);
  const int64_t ndim = static_cast<int64_t>(shape.size());
  COPPICE_CHECK(values.dim() == 1, op, ": values must be 1-D [nnz], got ", shape_to_string(values.shape()));
  const int64_t nnz = values.numel();
  COPPICE_CHECK(indices.dim() == 2 && indices.size(0) == ndim && indices.size(1) == nnz, op, ": indices has shape ",
                shape_to_string(indices.shape()), ", expected [", ndim, ", ", nnz, "] (ndim, nnz)");
  std::vector<int64_t> idx = host_i64(indices);
  // Walk entries in order so that the first offending one is reported.
  std::vector<int64_t> flat(static_cast<size_t>(nnz));
  bool sorted = true;
  for (int64_t k = 0; k < nnz; ++k) {
    int64_t f = 0;
    for (int64_t d = 0; d < ndim; ++d) {
      const int64_t c = idx[static_cast<size_t>(d * nnz + k)];
      COPPICE_CHECK(c >= 0 && c < shape[static_cast<size_t>(d)], op, ": indices[", d, ", ", k, "] = ", c,
                    " is out of range [0, ", shape[static_cast<size_t>(d)], ") for dim ", d);
      f = f * shape[static_cast<size_t>(d)] + c;
    }
    flat[static_cast<size_t>(k)] = f;
    if (k > 0 && sorted && flat[static_cast<size_t>(k) - 1] >= f) {
      sorted = false;
      COPPICE_CHECK(!coalesced, op, ": entry ", k, " at ", coordinates(idx, shape.size(), nnz, k),
                    (flat[static_cast<size_t>(k) - 1] == f ? " duplicates" : " comes before"),
                    " the entry before it, but the indices were declared coalesced (sorted row-major, unique)");
    }
  }
  return Tensor(std::make_shared<CooImpl>(indices.to(DType::kI64).contiguous(), values.contiguous(), shape, sorted,
                                          new_pattern_version()));
}

Tensor coalesce(const Tensor& t) {
  const CooImpl& c = coo_impl(t, "coalesce");
  if (c.is_coalesced()) return t;
  const Shape& shape = t.shape();
  const int64_t nnz = c.nnz();
  const size_t ndim = shape.size();
  std::vector<int64_t> flat = flat_positions(host_i64(c.indices()), shape, nnz);
  std::vector<int64_t> order(static_cast<size_t>(nnz));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return flat[static_cast<size_t>(a)] < flat[static_cast<size_t>(b)]; });
  // segment[k]: the output slot of entry k (entries of one position share it).
  std::vector<int64_t> segment(static_cast<size_t>(nnz)), unique_flat;
  for (int64_t k : order) {
    const int64_t f = flat[static_cast<size_t>(k)];
    if (unique_flat.empty() || unique_flat.back() != f) unique_flat.push_back(f);
    segment[static_cast<size_t>(k)] = static_cast<int64_t>(unique_flat.size()) - 1;
  }
  const int64_t out_nnz = static_cast<int64_t>(unique_flat.size());
  std::vector<int64_t> out_idx(ndim * static_cast<size_t>(out_nnz));
  for (int64_t k = 0; k < out_nnz; ++k) {
    int64_t f = unique_flat[static_cast<size_t>(k)];
    for (size_t d = ndim; d-- > 0;) {
      out_idx[d * static_cast<size_t>(out_nnz) + static_cast<size_t>(k)] = f % shape[d];
      f /= shape[d];
    }
  }
  // Sums duplicates in their original order (scatter_add is deterministic).
  Tensor values = zeros({out_nnz}, c.values().options());
  if (nnz > 0) values = scatter_add(values, 0, index_tensor(segment, DType::kI64, t.device()), c.values());
  return Tensor(
      std::make_shared<CooImpl>(index_tensor(out_idx, {static_cast<int64_t>(ndim), out_nnz}, DType::kI64, t.device()),
                                values, shape, true, new_pattern_version()));
}

const CooImpl& coo_impl(const Tensor& t, std::string_view op) {
  const CooImpl* c = t.impl_as<CooImpl>();
  COPPICE_CHECK(c != nullptr, op, ": expected a COO tensor, got format '", t.format(), "'");
  return *c;
}

}  // namespace coppice

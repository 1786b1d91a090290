#include "sparse/bsr.h"

#include <vector>

#include "sparse/csr.h"
#include "sparse/index_util.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

const ToDenseRegistrar kBsrToDense("bsr");

}  // namespace

BsrImpl::BsrImpl(Tensor crow_indices, Tensor col_indices, Tensor values, Shape shape, uint64_t version)
    : SparseImpl(std::move(shape), values.dtype(), values.device(), version),
      crow_indices_(std::move(crow_indices)),
      col_indices_(std::move(col_indices)),
      values_(std::move(values)) {}

SparseParts BsrImpl::parts() const {
  return {{"crow_indices", crow_indices_}, {"col_indices", col_indices_}, {"values", values_}};
}

std::map<std::string, std::string> BsrImpl::attributes() const {
  return {{"block", str_cat(block_rows(), "x", block_cols())}, {"nblocks", std::to_string(nblocks())}};
}

Tensor BsrImpl::with_values(const Tensor& values) const {
  sparse_detail::check_values(values, "bsr.with_values");
  COPPICE_CHECK(values.shape() == values_.shape(), "bsr.with_values: values of shape ", shape_to_string(values.shape()),
                ", expected ", shape_to_string(values_.shape()));
  COPPICE_CHECK(values.device() == device(), "bsr.with_values: values on ", values.device().to_string(),
                " for a pattern on ", device().to_string());
  return Tensor(
      std::make_shared<BsrImpl>(crow_indices_, col_indices_, values.contiguous(), shape(), pattern_version()));
}

Tensor BsrImpl::to_dense() const {
  const int64_t bh = block_rows(), bw = block_cols(), nbr = block_row_count(), nbc = block_col_count();
  // Scatter each block into a [nbr * nbc, bh, bw] array of all blocks, then
  // interleave block rows with the rows inside blocks.
  // Each stored block's first slot in that array on the host (one per block),
  // its entries' slots on the values' device: a 4096² weight has millions of
  // entries and only thousands of blocks.
  std::vector<int64_t> ptr = sparse_detail::host_i64(crow_indices_), col = sparse_detail::host_i64(col_indices_);
  const int64_t block_numel = bh * bw, nblocks = static_cast<int64_t>(col.size());
  std::vector<int64_t> first(col.size());
  for (int64_t br = 0; br < nbr; ++br) {
    for (int64_t k = ptr[static_cast<size_t>(br)]; k < ptr[static_cast<size_t>(br) + 1]; ++k) {
      first[static_cast<size_t>(k)] = (br * nbc + col[static_cast<size_t>(k)]) * block_numel;
    }
  }
  const Tensor flat = add(sparse_detail::index_tensor(first, DType::kI64, device()).reshape({nblocks, 1}),
                          arange(block_numel, TensorOptions(DType::kI64, device())))
                          .reshape({nblocks * block_numel});
  Tensor blocks = sparse_detail::scatter_to_dense(flat, values_, {nbr, nbc, bh, bw});
  return blocks.permute({0, 2, 1, 3}).contiguous().view(shape());
}

Tensor BsrImpl::to(TensorOptions options) const {
  if (options.device == device() && options.dtype == dtype()) return Tensor(std::make_shared<BsrImpl>(*this));
  return Tensor(std::make_shared<BsrImpl>(crow_indices_.to(options.device), col_indices_.to(options.device),
                                          values_.to(options), shape(), pattern_version()));
}

void check_block_shape(const Shape& shape, int64_t bh, int64_t bw, std::string_view op) {
  COPPICE_CHECK(bh >= 1 && bw >= 1, op, ": block shape [", bh, ", ", bw, "] must be positive");
  COPPICE_CHECK(shape.size() == 2 && shape[0] % bh == 0 && shape[1] % bw == 0, op, ": block shape [", bh, ", ", bw,
                "] does not divide the shape ", shape_to_string(shape));
}

Tensor sparse_bsr(const Tensor& crow_indices, const Tensor& col_indices, const Tensor& values, const Shape& shape) {
  constexpr std::string_view op = "sparse_bsr";
  sparse_detail::check_shape(shape, 2, op);
  sparse_detail::check_values(values, op);
  check_same_device({crow_indices, col_indices, values}, op);
  COPPICE_CHECK(values.dim() == 3, op, ": values must be 3-D [nblocks, bh, bw], got ", shape_to_string(values.shape()));
  check_block_shape(shape, values.size(1), values.size(2), op);
  check_compressed_pattern(crow_indices, col_indices, shape[0] / values.size(1), shape[1] / values.size(2),
                           {op, "crow_indices", "col_indices", "block row"});
  COPPICE_CHECK(values.size(0) == col_indices.numel(), op, ": values holds ", values.size(0),
                " blocks but col_indices has ", col_indices.numel(), " entries");
  return Tensor(std::make_shared<BsrImpl>(crow_indices.to(DType::kI32).contiguous(),
                                          col_indices.to(DType::kI32).contiguous(), values.contiguous(), shape,
                                          new_pattern_version()));
}

const BsrImpl& bsr_impl(const Tensor& t, std::string_view op) {
  const BsrImpl* b = t.impl_as<BsrImpl>();
  COPPICE_CHECK(b != nullptr, op, ": expected a BSR tensor, got format '", t.format(), "'");
  return *b;
}

}  // namespace coppice

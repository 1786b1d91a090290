#include "sparse/blocked_ell.h"

#include <algorithm>
#include <vector>

#include "sparse/bsr.h"
#include "sparse/index_util.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

using sparse_detail::host_i64;
using sparse_detail::index_tensor;

const ToDenseRegistrar kBlockedEllToDense("blocked_ell");

}  // namespace

BlockedEllImpl::BlockedEllImpl(Tensor ell_col_indices, Tensor values, Shape shape, int64_t block_size, int64_t nblocks,
                               uint64_t version)
    : SparseImpl(std::move(shape), values.dtype(), values.device(), version),
      ell_col_indices_(std::move(ell_col_indices)),
      values_(std::move(values)),
      block_size_(block_size),
      nblocks_(nblocks) {}

SparseParts BlockedEllImpl::parts() const { return {{"ell_col_indices", ell_col_indices_}, {"values", values_}}; }

std::map<std::string, std::string> BlockedEllImpl::attributes() const {
  return {{"block", str_cat(block_size_, "x", block_size_)},
          {"ell_cols", std::to_string(ell_cols())},
          {"nblocks", std::to_string(nblocks_)}};
}

Tensor BlockedEllImpl::with_values(const Tensor& values) const {
  sparse_detail::check_values(values, "blocked_ell.with_values");
  COPPICE_CHECK(values.shape() == values_.shape(), "blocked_ell.with_values: values of shape ",
                shape_to_string(values.shape()), ", expected ", shape_to_string(values_.shape()));
  COPPICE_CHECK(values.device() == device(), "blocked_ell.with_values: values on ", values.device().to_string(),
                " for a pattern on ", device().to_string());
  return Tensor(std::make_shared<BlockedEllImpl>(ell_col_indices_, values.contiguous(), shape(), block_size_, nblocks_,
                                                 pattern_version()));
}

Tensor BlockedEllImpl::to_dense() const {
  Tensor self(std::make_shared<BlockedEllImpl>(*this));
  return blocked_ell_to_bsr(self).impl_as<BsrImpl>()->to_dense();
}

Tensor BlockedEllImpl::to(TensorOptions options) const {
  if (options.device == device() && options.dtype == dtype()) return Tensor(std::make_shared<BlockedEllImpl>(*this));
  return Tensor(std::make_shared<BlockedEllImpl>(ell_col_indices_.to(options.device), values_.to(options), shape(),
                                                 block_size_, nblocks_, pattern_version()));
}

Tensor sparse_blocked_ell(const Tensor& ell_col_indices, const Tensor& values, const Shape& shape, int64_t block_size) {
  constexpr std::string_view op = "sparse_blocked_ell";
  sparse_detail::check_shape(shape, 2, op);
  sparse_detail::check_values(values, op);
  sparse_detail::check_index_part(ell_col_indices, op, "ell_col_indices", {DType::kI32, DType::kI64});
  check_same_device({ell_col_indices, values}, op);
  const int64_t b = block_size;
  COPPICE_CHECK(b >= 1 && shape[0] % b == 0 && shape[1] % b == 0, op, ": block size ", b, " does not divide the shape ",
                shape_to_string(shape));
  const int64_t nbr = shape[0] / b, nbc = shape[1] / b;
  COPPICE_CHECK(ell_col_indices.dim() == 2 && ell_col_indices.size(0) == nbr, op, ": ell_col_indices has shape ",
                shape_to_string(ell_col_indices.shape()), ", expected [", nbr, ", ell_cols] (one row per block row)");
  const int64_t ell_cols = ell_col_indices.size(1);
  COPPICE_CHECK(values.dim() == 2 && values.size(0) == shape[0] && values.size(1) == ell_cols * b, op,
                ": values has shape ", shape_to_string(values.shape()), ", expected [", shape[0], ", ", ell_cols * b,
                "] (rows, ell_cols * b)");
  std::vector<int64_t> idx = host_i64(ell_col_indices);
  int64_t nblocks = 0;
  for (int64_t br = 0; br < nbr; ++br) {
    bool padding = false;
    for (int64_t j = 0; j < ell_cols; ++j) {
      const int64_t c = idx[static_cast<size_t>(br * ell_cols + j)];
      COPPICE_CHECK(c >= -1 && c < nbc, op, ": ell_col_indices[", br, ", ", j, "] = ", c, " is out of range [-1, ", nbc,
                    ")");
      if (c == -1) {
        padding = true;
        continue;
      }
      COPPICE_CHECK(!padding, op, ": ell_col_indices[", br, ", ", j, "] = ", c, " follows padding (-1) in block row ",
                    br, "; padding must come last");
      if (j > 0) {
        const int64_t prev = idx[static_cast<size_t>(br * ell_cols + j - 1)];
        COPPICE_CHECK(prev < c, op, ": ell_col_indices[", br, ", ", j, "] = ", c,
                      (prev == c ? " duplicates" : " is smaller than"), " the entry before it in block row ", br);
      }
      ++nblocks;
    }
  }
  return Tensor(std::make_shared<BlockedEllImpl>(ell_col_indices.to(DType::kI32).contiguous(), values.contiguous(),
                                                 shape, b, nblocks, new_pattern_version()));
}

Tensor blocked_ell_to_bsr(const Tensor& t) {
  const BlockedEllImpl& e = blocked_ell_impl(t, "blocked_ell_to_bsr");
  const int64_t b = e.block_size(), ell_cols = e.ell_cols(), nbr = t.shape()[0] / b;
  std::vector<int64_t> idx = host_i64(e.ell_col_indices());
  std::vector<int64_t> crow(static_cast<size_t>(nbr) + 1, 0), col, slots;
  for (int64_t br = 0; br < nbr; ++br) {
    for (int64_t j = 0; j < ell_cols; ++j) {
      const int64_t c = idx[static_cast<size_t>(br * ell_cols + j)];
      if (c < 0) continue;
      col.push_back(c);
      slots.push_back(br * ell_cols + j);
    }
    crow[static_cast<size_t>(br) + 1] = static_cast<int64_t>(col.size());
  }
  const int64_t nblocks = static_cast<int64_t>(slots.size());
  // [rows, ell_cols*b] -> [nbr, b, ell_cols, b] -> [nbr, ell_cols, b, b]: one b x b block per slot.
  Tensor slot_blocks =
      e.values().view({nbr, b, ell_cols, b}).permute({0, 2, 1, 3}).contiguous().view({nbr * ell_cols, b, b});
  Tensor values = index_select(slot_blocks, 0, index_tensor(slots, DType::kI64, t.device()));
  return Tensor(std::make_shared<BsrImpl>(index_tensor(crow, DType::kI32, t.device()),
                                          index_tensor(col, DType::kI32, t.device()), values.view({nblocks, b, b}),
                                          t.shape(), new_pattern_version()));
}

Tensor bsr_to_blocked_ell(const Tensor& t) {
  const BsrImpl& s = bsr_impl(t, "bsr_to_blocked_ell");
  const int64_t b = s.block_rows();
  COPPICE_CHECK(s.block_cols() == b, "bsr_to_blocked_ell: Blocked-ELL needs square blocks, got ", s.block_rows(), "x",
                s.block_cols());
  const int64_t nbr = s.block_row_count(), nblocks = s.nblocks();
  std::vector<int64_t> crow = host_i64(s.crow_indices()), col = host_i64(s.col_indices());
  int64_t ell_cols = 0;
  for (int64_t br = 0; br < nbr; ++br) {
    ell_cols = std::max(ell_cols, crow[static_cast<size_t>(br) + 1] - crow[static_cast<size_t>(br)]);
  }
  // Each slot takes its block, or the zero block appended at index nblocks.
  std::vector<int64_t> ell(static_cast<size_t>(nbr * ell_cols), -1), source(ell.size(), nblocks);
  for (int64_t br = 0; br < nbr; ++br) {
    for (int64_t k = crow[static_cast<size_t>(br)]; k < crow[static_cast<size_t>(br) + 1]; ++k) {
      const size_t slot = static_cast<size_t>(br * ell_cols + (k - crow[static_cast<size_t>(br)]));
      ell[slot] = col[static_cast<size_t>(k)];
      source[slot] = k;
    }
  }
  Tensor padded = cat({s.values(), zeros({1, b, b}, s.values().options())}, 0);
  Tensor slot_blocks = index_select(padded, 0, index_tensor(source, DType::kI64, t.device()));
  Tensor values =
      slot_blocks.view({nbr, ell_cols, b, b}).permute({0, 2, 1, 3}).contiguous().view({t.shape()[0], ell_cols * b});
  return Tensor(std::make_shared<BlockedEllImpl>(index_tensor(ell, {nbr, ell_cols}, DType::kI32, t.device()), values,
                                                 t.shape(), b, nblocks, new_pattern_version()));
}

const BlockedEllImpl& blocked_ell_impl(const Tensor& t, std::string_view op) {
  const BlockedEllImpl* e = t.impl_as<BlockedEllImpl>();
  COPPICE_CHECK(e != nullptr, op, ": expected a Blocked-ELL tensor, got format '", t.format(), "'");
  return *e;
}

}  // namespace coppice

// Masked dense: dense values plus a bool mask of the same shape, for
// prototyping and as a reference. The stored entries are the mask's true
// positions (nnz = their count); values under a false mask are ignored and
// to_dense() zeroes them.
#pragma once

#include <string_view>

#include "sparse/sparse_impl.h"

namespace coppice {

class MaskedImpl : public SparseImpl {
 public:
  // Parts are taken as given (same shape, one device, `nnz` = mask's count);
  // use sparse_masked for parts that come from outside.
  MaskedImpl(Tensor values, Tensor mask, int64_t nnz, uint64_t version);

  Layout layout() const override { return Layout::kMasked; }
  std::string_view format() const override { return "masked"; }
  int64_t nnz() const override { return nnz_; }
  const Tensor& values() const override { return values_; }  // dense, the tensor's shape
  SparseParts parts() const override;
  Tensor with_values(const Tensor& values) const override;
  Tensor to_dense() const override;  // where(mask, values, 0)
  Tensor to(TensorOptions options) const override;

  const Tensor& mask() const { return mask_; }  // bool, the tensor's shape

 private:
  Tensor values_, mask_;
  int64_t nnz_;
};

// Builds a masked tensor from dense values (floating) and a bool mask of the
// same shape on the same device. The parts are shared, not copied (made
// contiguous when they are not).
Tensor sparse_masked(const Tensor& values, const Tensor& mask);

// The masked impl of `t`, or throws naming `op`.
const MaskedImpl& masked_impl(const Tensor& t, std::string_view op);

// The values any tensor stores, as one dense tensor: values(t), except that
// a masked tensor's values under a false mask are zeros (they are not
// stored). For reductions over what is stored: gradient norms
// (optim/clip.h), the non-finite check (optim/finite_check.h).
Tensor stored_values(const Tensor& t);

}  // namespace coppice

#include "sparse/masked.h"

#include <algorithm>
#include <vector>

#include "sparse/index_util.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

const ToDenseRegistrar kMaskedToDense("masked");

}  // namespace

MaskedImpl::MaskedImpl(Tensor values, Tensor mask, int64_t nnz, uint64_t version)
    : SparseImpl(values.shape(), values.dtype(), values.device(), version),
      values_(std::move(values)),
      mask_(std::move(mask)),
      nnz_(nnz) {}

SparseParts MaskedImpl::parts() const { return {{"values", values_}, {"mask", mask_}}; }

Tensor MaskedImpl::with_values(const Tensor& values) const {
  sparse_detail::check_values(values, "masked.with_values");
  COPPICE_CHECK(values.shape() == values_.shape(), "masked.with_values: values of shape ",
                shape_to_string(values.shape()), ", expected ", shape_to_string(values_.shape()));
  COPPICE_CHECK(values.device() == device(), "masked.with_values: values on ", values.device().to_string(),
                " for a pattern on ", device().to_string());
  return Tensor(std::make_shared<MaskedImpl>(values.contiguous(), mask_, nnz_, pattern_version()));
}

Tensor MaskedImpl::to_dense() const { return where(mask_, values_, zeros({}, values_.options())); }

Tensor MaskedImpl::to(TensorOptions options) const {
  if (options.device == device() && options.dtype == dtype()) return Tensor(std::make_shared<MaskedImpl>(*this));
  return Tensor(std::make_shared<MaskedImpl>(values_.to(options), mask_.to(options.device), nnz_, pattern_version()));
}

Tensor sparse_masked(const Tensor& values, const Tensor& mask) {
  constexpr std::string_view op = "sparse_masked";
  sparse_detail::check_values(values, op);
  check_dense(mask, op, "mask");
  COPPICE_CHECK(mask.dtype() == DType::kBool, op, ": mask must be bool, got ", dtype_name(mask.dtype()));
  COPPICE_CHECK(mask.shape() == values.shape(), op, ": mask of shape ", shape_to_string(mask.shape()),
                " for values of shape ", shape_to_string(values.shape()));
  check_same_device({values, mask}, op);
  std::vector<uint8_t> m = sparse_detail::host_mask(mask);
  const int64_t nnz = std::count(m.begin(), m.end(), uint8_t{1});
  return Tensor(std::make_shared<MaskedImpl>(values.contiguous(), mask.contiguous(), nnz, new_pattern_version()));
}

Tensor stored_values(const Tensor& t) { return t.layout() == Layout::kMasked ? to_dense(t) : values(t); }

const MaskedImpl& masked_impl(const Tensor& t, std::string_view op) {
  const MaskedImpl* s = t.impl_as<MaskedImpl>();
  COPPICE_CHECK(s != nullptr, op, ": expected a masked tensor, got format '", t.format(), "'");
  return *s;
}

}  // namespace coppice

// Sparse to dense (densify.h).
#include "optim/densify.h"

#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {

Densified densify(const Tensor& param, const std::string& op) {
  COPPICE_CHECK(param.defined(), op, ": the parameter is undefined");
  COPPICE_CHECK(param.is_sparse(), op, ": the parameter is dense already (", shape_to_string(param.shape()), ")");
  const Tensor stored = values(param);
  // f64 holds every slot index exactly (up to 2^53); an unstored position
  // scatters to 0, so slot + 1 - 1 gives -1 there.
  const Tensor slots = add(arange(stored.numel(), TensorOptions(DType::kF64, param.device())), 1.0);
  Densified d;
  d.param = to_dense(param).contiguous();
  d.keep_from =
      sub(to_dense(with_values(param, slots.reshape(stored.shape()))), 1.0).reshape({-1}).to(DType::kI64).contiguous();
  return d;
}

std::map<std::string, int64_t> densify_parameters(ParameterStore& store, const std::vector<std::string>& names) {
  std::map<std::string, int64_t> gained;
  for (const std::string& name : names) {
    const Tensor value = store.value(name);
    if (!value.is_sparse()) continue;
    const Densified d = densify(value, str_cat("densify (parameter '", name, "')"));
    gained[name] = value.numel() - nnz(value);
    store.replace(name, d.param, d.keep_from);
  }
  return gained;
}

}  // namespace coppice

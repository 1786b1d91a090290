#include "autograd/functions/residual.h"

#include "autograd/functions/linalg.h"
#include "autograd/functions/sparse.h"
#include "tensor/error.h"

namespace coppice {

ResidualStream linear_residual(const Variable& h, const Variable& x, const Variable& weight, const Variable& bias) {
  COPPICE_CHECK(h.defined() && x.defined() && weight.defined(), "linear_residual: h, x and weight must be defined");
  if (weight.value().is_sparse() && !x.value().is_sparse()) {
    Variable sum = autograd_detail::sparse_linear_add(h, x, weight, bias);
    if (sum.defined()) return {sum, Variable()};
  }
  return {h, linear(x, weight, bias)};
}

}  // namespace coppice

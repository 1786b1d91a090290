// The movement built-in (builtin.h).
#include <string>

#include "sparsifiers/builtin.h"
#include "sparsifiers/mask_ops.h"
#include "tensor/ops.h"

namespace coppice {

MovementSparsifier::MovementSparsifier(double sparsity) : sparsity_(sparsity) {
  COPPICE_CHECK(sparsity >= 0.0 && sparsity <= 1.0, "movement: sparsity must be in [0, 1], got ", sparsity);
}

std::string MovementSparsifier::describe() const { return str_cat("movement(sparsity=", sparsity_, ")"); }

void MovementSparsifier::accumulate(const Tensor& weight, const Tensor& grad) {
  const Tensor w = to_dense(weight), g = to_dense(grad);
  COPPICE_CHECK(w.shape() == g.shape(), describe(), ".accumulate: weight of shape ", shape_to_string(w.shape()),
                " and gradient of shape ", shape_to_string(g.shape()));
  COPPICE_CHECK(w.device() == g.device(), describe(), ".accumulate: weight on ", w.device().to_string(),
                " and gradient on ", g.device().to_string());
  COPPICE_CHECK(is_floating(w.dtype()) && is_floating(g.dtype()), describe(),
                ".accumulate: needs floating-point weight and gradient, got ", dtype_name(w.dtype()), " and ",
                dtype_name(g.dtype()));
  const DType dtype = w.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  if (scores_.defined()) {
    COPPICE_CHECK(scores_.shape() == w.shape() && scores_.device() == w.device(), describe(),
                  ".accumulate: weight of shape ", shape_to_string(w.shape()), " on ", w.device().to_string(),
                  ", but the scores have shape ", shape_to_string(scores_.shape()), " on ",
                  scores_.device().to_string(), " (reset() first to start over)");
  } else {
    scores_ = zeros(w.shape(), TensorOptions(dtype, w.device()));
  }
  scores_ = sub(scores_, mul(w.to(scores_.dtype()), g.to(scores_.dtype())));
  ++steps_;
}

void MovementSparsifier::reset() {
  scores_ = Tensor();
  steps_ = 0;
}

Tensor MovementSparsifier::keep_mask(const Tensor& x, const SparsifyContext&) const {
  COPPICE_CHECK(scores_.defined(), describe(), ": no scores yet; call accumulate(weight, grad) first");
  COPPICE_CHECK(x.shape() == scores_.shape(), describe(), ": input of shape ", shape_to_string(x.shape()),
                ", but the scores have shape ", shape_to_string(scores_.shape()));
  COPPICE_CHECK(x.device() == scores_.device(), describe(), ": input on ", x.device().to_string(),
                ", but the scores are on ", scores_.device().to_string());
  return sparsify::topk_mask(scores_, kept_count(sparsity_, scores_.numel()), false, describe());
}

}  // namespace coppice

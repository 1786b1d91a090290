#include "models/dense_gradient_view.h"

#include "autograd/sparse_grad.h"
#include "optim/optimizer.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"

namespace coppice {

DenseGradientView::~DenseGradientView() {
  try {
    restore();
  } catch (...) {
    // Unwinding already: the step's own error is the one to report.
  }
}

void DenseGradientView::open(Module& model, const std::vector<std::string>& layers,
                             const std::function<void(const std::string& layer)>& on_swap) {
  model_ = &model;
  for (const std::string& name : layers) {
    const Variable w = model.parameter(name);
    if (!w.value().is_sparse()) continue;
    Variable wd(to_dense(w.value()), true, name);
    model.set_parameter(name, wd);
    swapped_.push_back({name, w, wd});
    if (on_swap) on_swap(name);
  }
}

std::map<std::string, Tensor> DenseGradientView::close(double grad_scale) {
  std::map<std::string, Tensor> dense_grads;
  for (const Swapped& s : swapped_) {
    model_->set_parameter(s.name, s.sparse);
    const Tensor& g = s.dense.grad();
    // The updater ranks the dense gradient: unscaled, and in f32 for 16-bit weights.
    const DType score_dtype = optimizer_state_dtype(s.dense.dtype());
    const Tensor dense_g = g.defined() ? mul(g.to(score_dtype), 1.0 / grad_scale)
                                       : zeros(s.dense.shape(), {score_dtype, s.dense.device()});
    dense_grads[s.name] = dense_g;
    if (g.defined()) s.sparse.set_grad(project_grad(g, s.sparse.value(), "run_training"));
  }
  swapped_.clear();
  model_ = nullptr;
  return dense_grads;
}

void DenseGradientView::restore() {
  for (const Swapped& s : swapped_) model_->set_parameter(s.name, s.sparse);
  swapped_.clear();
  model_ = nullptr;
}

}  // namespace coppice

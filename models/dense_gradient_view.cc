#include "models/dense_gradient_view.h"

#include "autograd/sparse_grad.h"
#include "optim/optimizer.h"
#include "sparse/formats.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/mask_ops.h"
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
                             const std::function<void(const std::string& layer)>& on_swap, bool probe_blocks) {
  model_ = &model;
  for (const std::string& name : layers) {
    const Variable w = model.parameter(name);
    if (!w.value().is_sparse()) continue;
    if (probe_blocks && block_shape_of(w.value())) {
      if (!probe_) probe_ = std::make_unique<GradientProbe>();
      probe_->watch(name, w.value());
      probed_.push_back({name, w});
      continue;
    }
    Variable wd(to_dense(w.value()), true, name);
    model.set_parameter(name, wd);
    swapped_.push_back({name, w, wd});
    if (on_swap) on_swap(name);
  }
}

std::map<std::string, GrowthSignal> DenseGradientView::close(double grad_scale) {
  std::map<std::string, GrowthSignal> signals;
  for (const Swapped& s : swapped_) {
    model_->set_parameter(s.name, s.sparse);
    const Tensor& g = s.dense.grad();
    // The updater ranks the dense gradient: unscaled, and in f32 for 16-bit weights.
    const DType score_dtype = optimizer_state_dtype(s.dense.dtype());
    const Tensor dense_g = g.defined() ? mul(g.to(score_dtype), 1.0 / grad_scale)
                                       : zeros(s.dense.shape(), {score_dtype, s.dense.device()});
    signals[s.name] = GrowthSignal::dense_gradient(dense_g);
    if (g.defined()) s.sparse.set_grad(project_grad(g, s.sparse.value(), "run_training"));
  }
  swapped_.clear();
  model_ = nullptr;
  // Closed whatever happens below.
  const std::vector<Probed> probed = std::move(probed_);
  const std::unique_ptr<GradientProbe> probe = std::move(probe_);
  probed_.clear();
  for (const Probed& p : probed) {
    const Tensor& w = p.weight.value();
    const auto [bh, bw] = *block_shape_of(w);
    const GradientProbe::Factors& factors = probe->factors(p.name);
    const std::string op = "dense-gradient view (block scores of '" + p.name + "')";
    if (factors.empty()) {
      COPPICE_CHECK(!p.weight.grad().defined(), op,
                    ": the weight has a gradient, but not from linear or matmul with the weight itself, the "
                    "products whose gradients the block scores are formed from");
      signals[p.name] = GrowthSignal::block_scores(
          zeros({w.size(0) / bh, w.size(1) / bw}, TensorOptions(DType::kF64, w.device())), bh, bw);
      continue;
    }
    signals[p.name] = GrowthSignal::block_scores(
        mul(sparsify::product_block_scores(factors, bh, bw, op), 1.0 / (grad_scale * grad_scale)), bh, bw);
  }
  return signals;
}

void DenseGradientView::restore() {
  for (const Swapped& s : swapped_) model_->set_parameter(s.name, s.sparse);
  swapped_.clear();
  probed_.clear();
  probe_.reset();
  model_ = nullptr;
}

}  // namespace coppice

// The dense-gradient view of a step: growth policies such as RigL rank the
// gradient at every position of a weight, pruned ones included, but an
// ordinary step only computes it at the stored ones. So on the steps where
// the mask schedule asks for it (MaskSchedule::needs_dense_gradient), and only
// there, each sparse weight is swapped for a dense leaf holding to_dense of
// it for one forward and backward; afterwards the sparse weight is put back,
// the dense gradient goes to the updater as its growth signal
// (optim/growth_signal.h), and its projection onto the
// weight's pattern (autograd's project_grad) becomes the weight's gradient,
// so the optimizer sees what an ordinary step would give it.
//
// Block formats (those whose row in the format table has a block shape: bsr,
// blocked_ell) are ranked by per-block sums of squares of that gradient.
// With `probe_blocks`, such a weight is not swapped: it stays
// sparse for the step, a GradientProbe (autograd/gradient_probe.h) collects
// the factors of its gradient, and close() hands back the block scores
// computed from them a chunk at a time (sparsify::product_block_scores) as
// its growth signal, so no dense gradient or dense product is formed. The
// trainer asks for this on
// one rank only: the block scores of an average over ranks cannot be formed
// from each rank's own scores.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/gradient_probe.h"
#include "autograd/variable.h"
#include "models/module.h"
#include "optim/growth_signal.h"
#include "tensor/tensor.h"

namespace coppice {

class DenseGradientView {
 public:
  DenseGradientView() = default;
  DenseGradientView(const DenseGradientView&) = delete;
  DenseGradientView& operator=(const DenseGradientView&) = delete;
  // Puts back whatever is still swapped (a step that threw).
  ~DenseGradientView();

  // Swaps every sparse parameter among `layers` of `model` for a dense leaf
  // (dense ones are left alone), or, with `probe_blocks`, watches those in a
  // block format instead; `on_swap` (may be empty) hears each swapped name.
  void open(Module& model, const std::vector<std::string>& layers,
            const std::function<void(const std::string& layer)>& on_swap, bool probe_blocks = false);

  // Puts the sparse weights back, each with its dense gradient projected onto
  // its pattern as gradient; returns by layer the growth signals: for each
  // swapped weight its dense gradient, divided by `grad_scale` (the loss scale
  // backward ran with) and in the optimizer's state dtype (f32 for 16-bit
  // weights), zeros where backward left none, and for each probed weight the
  // block scores of its unscaled gradient (f64, [rows / block_rows,
  // cols / block_cols], with its block size). Throws naming a probed weight
  // whose gradient did not come from the products the probe sees.
  std::map<std::string, GrowthSignal> close(double grad_scale);

  bool is_open() const { return model_ != nullptr; }

 private:
  // Puts the sparse weights back without gradients.
  void restore();

  struct Swapped {
    std::string name;
    Variable sparse;
    Variable dense;
  };
  struct Probed {
    std::string name;
    Variable weight;
  };
  Module* model_ = nullptr;
  std::vector<Swapped> swapped_;
  std::vector<Probed> probed_;
  std::unique_ptr<GradientProbe> probe_;
};

}  // namespace coppice

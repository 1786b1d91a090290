// The sparsity schedule as the training loop sees it (docs/architecture.md:
// "Optimizers own the schedule on which masks are pruned and regrown"). One
// interface over what changes masks during training: prune and regrow
// (MaskUpdater: SET, RigL, SNFS, user growth policies), gradual magnitude
// pruning (GmpPruner) and SR-STE (sr_ste.h: make_sr_ste_schedule). It says
// which steps change masks and which need the dense gradient, and it changes
// masks and optimizer state through a ParameterStore, so the loop only calls
// it; the growth signals themselves (growth_signal.h: dense gradients, or
// block scores of block-format weights) come from the trainer's
// dense-gradient view (models/dense_gradient_view.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "optim/gmp.h"
#include "optim/growth_signal.h"
#include "optim/mask_updater.h"
#include "optim/parameter_store.h"
#include "tensor/tensor.h"

namespace coppice {

// What one mask change did, per layer.
struct MaskUpdateStats {
  int64_t step = 0;
  std::map<std::string, int64_t> dropped, grown;
  std::map<std::string, double> itop_rate;  // prune and regrow only
};

class MaskSchedule {
 public:
  virtual ~MaskSchedule() = default;

  // The weights whose masks change (every rank must agree on their patterns
  // after a change).
  virtual const std::vector<std::string>& layers() const = 0;
  // Whether backward of `step` must give the growth signals of the sparse
  // weights among layers() (growth_signals of update()), through the
  // dense-gradient view.
  virtual bool needs_dense_gradient(int64_t step) const = 0;
  // Called before every optimizer step that is taken, with the step's
  // gradients carrying `loss_scale` (movement scores accumulate here;
  // SR-STE adds its sparse-refined term to the gradients).
  virtual void before_optimizer_step(double loss_scale) = 0;
  // Whether `step` changes masks, after its optimizer step;
  // `optimizer_step_skipped`: the loss scaler skipped it (inf/NaN gradients).
  virtual bool changes_masks(int64_t step, bool optimizer_step_skipped) const = 0;
  // Changes the masks of `step` (rebinding the changed parameters through the
  // store); throws NonfiniteError (optim/finite_check.h) naming the layer when
  // the scores it would rank by are inf or NaN (prune and regrow and GMP check
  // every layer before any changes; SR-STE layer by layer, its masks being a
  // function of the weights alone); `growth_signals` by layer, from the
  // step's dense-gradient view (empty on steps that did not ask for them; for
  // a block-format layer, its block scores where the view probed it:
  // LayerInputs in mask_updater.h).
  virtual MaskUpdateStats update(int64_t step, const std::map<std::string, GrowthSignal>& growth_signals) = 0;
};

// Prune and regrow by `updater` (its layers already added). Wires the
// updater's state remap to store->replace, which stays wired after the
// schedule is gone (the updater keeps the store alive).
std::unique_ptr<MaskSchedule> make_prune_and_regrow_schedule(MaskUpdater& updater,
                                                             std::shared_ptr<ParameterStore> store);

// Gradual magnitude pruning of `layers` by `pruner`, on its prune steps
// (skipped optimizer steps included, as GMP's schedule is by step alone).
std::unique_ptr<MaskSchedule> make_gmp_schedule(const GmpPruner& pruner, std::vector<std::string> layers,
                                                std::shared_ptr<ParameterStore> store);

}  // namespace coppice

#include "optim/mask_schedule.h"

#include <utility>

#include "optim/finite_check.h"
#include "sparse/sparse_impl.h"

namespace coppice {
namespace {

class PruneAndRegrowSchedule : public MaskSchedule {
 public:
  PruneAndRegrowSchedule(MaskUpdater& updater, std::shared_ptr<ParameterStore> store)
      : updater_(updater), store_(std::move(store)) {
    // A changed layer is rebound in the model and the optimizer as it is rebuilt.
    updater_.set_state_remap([store = store_](const std::string& name, const Tensor& new_param,
                                              const Tensor& keep_from) { store->replace(name, new_param, keep_from); });
  }

  const std::vector<std::string>& layers() const override { return updater_.layers(); }
  bool needs_dense_gradient(int64_t step) const override { return updater_.needs_dense_gradient(step); }

  void before_optimizer_step(double loss_scale) override {
    if (updater_.config().prune != PruneCriterion::kMovement) return;
    for (const std::string& name : updater_.layers()) {
      const Tensor grad = store_->unscaled_gradient(name, loss_scale);
      if (grad.defined()) updater_.accumulate_movement(name, store_->value(name), grad);
    }
  }

  // A step the loss scaler skipped has inf/NaN gradients, which would steer
  // growth: its update is left out (the same on every rank: the check reads
  // the all-reduced gradients).
  bool changes_masks(int64_t step, bool optimizer_step_skipped) const override {
    return updater_.is_update_step(step) && !optimizer_step_skipped;
  }

  MaskUpdateStats update(int64_t step, const std::map<std::string, GrowthSignal>& growth_signals) override {
    const bool need_momentum = updater_.needs_momentum(step);
    std::map<std::string, LayerInputs> inputs;
    for (const std::string& name : updater_.layers()) {
      LayerInputs in;
      in.param = store_->value(name);
      auto it = growth_signals.find(name);
      if (it != growth_signals.end()) in.growth_signal = it->second;
      if (need_momentum) in.momentum = store_->dense_momentum(name);
      inputs[name] = in;
    }
    const MaskUpdateResult r = updater_.update(step, inputs);
    MaskUpdateStats ms;
    ms.step = step;
    for (const LayerUpdate& l : r.layers) {
      ms.dropped[l.name] = l.dropped;
      ms.grown[l.name] = l.grown;
      ms.itop_rate[l.name] = l.itop_rate;
    }
    return ms;
  }

 private:
  MaskUpdater& updater_;
  std::shared_ptr<ParameterStore> store_;
};

class GmpSchedule : public MaskSchedule {
 public:
  GmpSchedule(const GmpPruner& pruner, std::vector<std::string> layers, std::shared_ptr<ParameterStore> store)
      : pruner_(pruner), layers_(std::move(layers)), store_(std::move(store)) {}

  const std::vector<std::string>& layers() const override { return layers_; }
  bool needs_dense_gradient(int64_t) const override { return false; }
  void before_optimizer_step(double) override {}
  bool changes_masks(int64_t step, bool) const override { return pruner_.is_prune_step(step); }

  // Each weight shrinks in place; one that lost entries is rebound. On a
  // prune step every weight is checked first (one host read for all), so that
  // an inf or NaN magnitude stops the update before any layer changes.
  MaskUpdateStats update(int64_t step, const std::map<std::string, GrowthSignal>&) override {
    MaskUpdateStats ms;
    ms.step = step;
    if (pruner_.is_prune_step(step)) check_weights_finite(step);
    for (const std::string& name : layers_) {
      const Tensor before = store_->value(name);
      const MaskChange change = pruner_.prune(step, before);
      // Entries, whatever unit the format prunes in (a BSR weight's dropped are blocks).
      ms.dropped[name] = nnz(before) - nnz(change.param);
      ms.grown[name] = 0;
      if (!change.keep_from.defined()) continue;
      store_->replace(name, change.param, change.keep_from);
    }
    return ms;
  }

 private:
  void check_weights_finite(int64_t step) const {
    NonfiniteFlag all;
    for (const std::string& name : layers_) all.add(store_->value(name));
    if (all.all_finite()) return;
    for (const std::string& name : layers_)
      check_finite_scores(store_->value(name), str_cat("gmp (layer ", name, ", step ", step, ")"), "the weight");
  }

  const GmpPruner& pruner_;
  std::vector<std::string> layers_;
  std::shared_ptr<ParameterStore> store_;
};

}  // namespace

std::unique_ptr<MaskSchedule> make_prune_and_regrow_schedule(MaskUpdater& updater,
                                                             std::shared_ptr<ParameterStore> store) {
  return std::make_unique<PruneAndRegrowSchedule>(updater, std::move(store));
}

std::unique_ptr<MaskSchedule> make_gmp_schedule(const GmpPruner& pruner, std::vector<std::string> layers,
                                                std::shared_ptr<ParameterStore> store) {
  return std::make_unique<GmpSchedule>(pruner, std::move(layers), std::move(store));
}

}  // namespace coppice

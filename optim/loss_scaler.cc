#include "optim/loss_scaler.h"

#include <cmath>

#include "autograd/functions/elementwise.h"
#include "optim/finite_check.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {

std::string loss_scale_mode_name(LossScaleMode mode) {
  switch (mode) {
    case LossScaleMode::kNone: return "none";
    case LossScaleMode::kStatic: return "static";
    case LossScaleMode::kDynamic: return "dynamic";
  }
  return "?";
}

LossScaler::LossScaler(const LossScalerOptions& o) : options_(o), scale_(o.init_scale) {
  COPPICE_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0.0,
                "LossScaler: init_scale must be finite and > 0, got ", o.init_scale);
  COPPICE_CHECK(o.growth_factor > 1.0 && std::isfinite(o.growth_factor),
                "LossScaler: growth_factor must be finite and > 1, got ", o.growth_factor);
  COPPICE_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, "LossScaler: backoff_factor must be in (0, 1), got ",
                o.backoff_factor);
  COPPICE_CHECK(o.growth_interval >= 1, "LossScaler: growth_interval must be >= 1, got ", o.growth_interval);
}

LossScaler LossScaler::fixed(double scale) {
  LossScalerOptions o;
  o.mode = LossScaleMode::kStatic;
  o.init_scale = scale;
  return LossScaler(o);
}

LossScaler LossScaler::dynamic() {
  LossScalerOptions o;
  o.mode = LossScaleMode::kDynamic;
  return LossScaler(o);
}

Variable LossScaler::scale_loss(const Variable& loss) const {
  if (!enabled()) return loss;
  return mul(loss, scale_);
}

std::vector<Variable> optimizer_parameters(const Optimizer& optimizer) {
  std::vector<Variable> out;
  for (const ParamGroup& g : optimizer.param_groups()) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

bool all_gradients_finite(const std::vector<Variable>& params) {
  NonfiniteFlag flag;
  flag.add_gradients(params);
  return flag.all_finite();
}

bool LossScaler::step(Optimizer& optimizer, const std::function<void(double scale)>& before_step) {
  const bool found_inf = enabled() && !all_gradients_finite(optimizer_parameters(optimizer));
  return step(optimizer, found_inf, before_step);
}

bool LossScaler::step(Optimizer& optimizer, bool found_inf, const std::function<void(double scale)>& before_step) {
  const bool finite = !enabled() || !found_inf;
  if (finite) {
    if (before_step) before_step(scale());
    optimizer.step(scale());
  }
  if (enabled()) update(!finite);
  return finite;
}

void LossScaler::update(bool found_inf) {
  if (found_inf) ++skipped_;
  if (options_.mode != LossScaleMode::kDynamic) return;
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    // As GradScaler: no growth past the largest finite f32 scale.
    const double grown = scale_ * options_.growth_factor;
    if (std::isfinite(static_cast<float>(grown))) scale_ = grown;
    growth_tracker_ = 0;
  }
}

void LossScaler::restore(double scale, int64_t growth_tracker) {
  COPPICE_CHECK(std::isfinite(scale) && scale > 0.0, "LossScaler.restore: scale must be finite and > 0, got ", scale);
  COPPICE_CHECK(growth_tracker >= 0 && growth_tracker < options_.growth_interval,
                "LossScaler.restore: growth_tracker must be in [0, ", options_.growth_interval, "), got ",
                growth_tracker);
  scale_ = scale;
  growth_tracker_ = growth_tracker;
}

}  // namespace coppice

// Loss scaling for f16 training (torch.cuda.amp.GradScaler's semantics).
//
// f16 has 5 exponent bits: gradients below ~6e-8 flush to zero. Multiplying
// the loss by a scale S before backward shifts every gradient up by S; the
// optimizer divides them by S again as it reads them (Optimizer::step's
// grad_scale, in f32). A scale too large makes some gradient overflow to inf:
// that step is skipped (no parameter or optimizer state changes) and a
// dynamic scale backs off. bf16 has f32's exponent range and needs none.
//
// Use (the training loop does exactly this):
//   scaler.scale_loss(loss).backward();
//   if (scaler.step(optimizer)) { ... the step was taken ... }
// step() checks every gradient for inf/NaN with one reduction and one host
// read for all of them (not one per tensor), steps the optimizer with the
// gradients unscaled when they are finite, and updates the scale.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "optim/optimizer.h"

namespace coppice {

enum class LossScaleMode {
  kNone,     // no scaling, no check (bf16 and f32 runs)
  kStatic,   // a fixed scale; steps with inf/NaN gradients are still skipped
  kDynamic,  // GradScaler: back off on overflow, grow after a run of finite steps
};

struct LossScalerOptions {
  LossScaleMode mode = LossScaleMode::kNone;
  double init_scale = 65536.0;  // 2^16; the static scale in kStatic
  double growth_factor = 2.0;   // after growth_interval finite steps in a row
  double backoff_factor = 0.5;  // after a step with inf/NaN gradients
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  // Throws naming the option when the options are out of range (scale not
  // finite or <= 0, growth_factor <= 1, backoff_factor outside (0, 1),
  // growth_interval < 1).
  explicit LossScaler(const LossScalerOptions& options = {});

  static LossScaler none() { return LossScaler(); }
  static LossScaler fixed(double scale);
  static LossScaler dynamic();

  const LossScalerOptions& options() const { return options_; }
  bool enabled() const { return options_.mode != LossScaleMode::kNone; }
  // The current scale (1 when disabled).
  double scale() const { return enabled() ? scale_ : 1.0; }

  // loss * scale() (loss itself when disabled); call backward() on it.
  Variable scale_loss(const Variable& loss) const;

  // Skips the step (returns false) when any gradient of the optimizer's
  // parameters is inf or NaN, else calls before_step(scale()) (e.g. gradient
  // clipping, which must see finite gradients and knows they carry the
  // scale), then optimizer.step(scale()), and returns true; then update()s
  // the scale. Disabled: before_step(1), optimizer.step(), true.
  bool step(Optimizer& optimizer, const std::function<void(double scale)>& before_step = {});
  // The same with the check already made by the caller (`found_inf`: some
  // gradient is inf or NaN), e.g. folded into a host read it makes anyway
  // (the trainer reads it with the loss: train/trainer.h).
  bool step(Optimizer& optimizer, bool found_inf, const std::function<void(double scale)>& before_step = {});
  // The scale's bookkeeping after a step that found (or not) inf/NaN: a
  // dynamic scale is multiplied by backoff_factor and its run of finite steps
  // restarts, or after growth_interval finite steps it is multiplied by
  // growth_factor. Static and disabled scalers only count skipped steps.
  void update(bool found_inf);

  // Steps skipped so far for inf/NaN gradients.
  int64_t skipped_steps() const { return skipped_; }
  // Finite steps since the last growth or backoff (GradScaler's growth tracker).
  int64_t growth_tracker() const { return growth_tracker_; }
  // For resuming from a checkpoint: the scale and growth tracker as saved.
  void restore(double scale, int64_t growth_tracker);

 private:
  LossScalerOptions options_;
  double scale_ = 1.0;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
};

// True when every defined gradient of `params` is finite (stored values of
// sparse ones). One reduction over all of them and one host read
// (NonfiniteFlag, optim/finite_check.h).
bool all_gradients_finite(const std::vector<Variable>& params);

// The parameters of every group of `optimizer`, in order.
std::vector<Variable> optimizer_parameters(const Optimizer& optimizer);

// "none", "static", "dynamic".
std::string loss_scale_mode_name(LossScaleMode mode);

}  // namespace coppice

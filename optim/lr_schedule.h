// Learning-rate schedules and the scheduler that applies one to an
// optimizer's groups, as torch.optim.lr_scheduler's closed forms.
//
// A schedule maps (a group's base lr, step) to that step's lr; step 0 is the
// lr before the first scheduler step(). Warm-up composes with any schedule:
// linear_warmup(W, start, cosine(T, eta_min)) is torch's
// SequentialLR([LinearLR(start, 1, W), CosineAnnealingLR(T, eta_min)], [W]).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "optim/optimizer.h"

namespace coppice {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double lr(double base_lr, int64_t step) const = 0;
};

using LrSchedulePtr = std::shared_ptr<const LrSchedule>;

// base_lr at every step.
LrSchedulePtr constant_lr();
// base_lr * gamma^floor(step / step_size) (StepLR).
LrSchedulePtr step_lr(int64_t step_size, double gamma = 0.1);
// eta_min + (base_lr - eta_min) * (1 + cos(pi * step / t_max)) / 2 (CosineAnnealingLR's
// closed form; past t_max it continues the cosine, as torch's closed form does).
LrSchedulePtr cosine_lr(int64_t t_max, double eta_min = 0.0);
// For step < warmup_steps: base_lr * (start_factor + (1 - start_factor) * step / warmup_steps)
// (LinearLR to a factor of 1); from then on `then` at step - warmup_steps
// (constant when null).
LrSchedulePtr linear_warmup(int64_t warmup_steps, double start_factor, LrSchedulePtr then = nullptr);
// `inner` times a linear ramp after start_step: for start_step <= step <
// start_step + ramp_steps, inner's lr * (step - start_step + 1) / ramp_steps
// (the first step of the ramp gets 1 / ramp_steps of it, the last all of it);
// inner's lr unchanged at every other step. A function of the step alone, so
// a scheduler jumped into the ramp (set_step) sets what stepping there did.
// The trainer's ramp after densify_step (train/job.cc).
LrSchedulePtr linear_ramp(int64_t start_step, int64_t ramp_steps, LrSchedulePtr inner);

// Sets every group's "lr" from the schedule. The base lrs are the groups'
// lrs when the scheduler is made; it sets step 0's lr at once (as torch).
class LrScheduler {
 public:
  LrScheduler(Optimizer& optimizer, LrSchedulePtr schedule);

  // Advances one step (call after optimizer.step()) and sets the lrs.
  void step();
  // Jumps to `step` (e.g. when resuming) and sets the lrs.
  void set_step(int64_t step);
  int64_t current_step() const { return step_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // The lrs the scheduler set last, one per group.
  std::vector<double> last_lrs() const;

 private:
  void apply();

  Optimizer& optimizer_;
  LrSchedulePtr schedule_;
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
};

}  // namespace coppice

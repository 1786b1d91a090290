#include "train/components.h"

#include "tensor/checked_math.h"
#include "tensor/error.h"

namespace coppice {

void check_components(const TrainComponents& c) {
  COPPICE_CHECK((c.steps > 0) != (c.epochs > 0), "run_training: exactly one of steps (", c.steps, ") and epochs (",
                c.epochs, ") must be positive");
  COPPICE_CHECK((c.mask_updater != nullptr) + (c.gmp != nullptr) + (c.sr_ste != nullptr) <= 1,
                "run_training: only one of a mask updater, a GMP pruner and SR-STE can drive the masks");
  COPPICE_CHECK(c.train.num_batches() > 0, "run_training: the train loader yields no batch (", c.train.shard_size(),
                " examples, batch size ", c.train.options().batch_size, ")");
  COPPICE_CHECK(c.grad_clip >= 0.0, "run_training: grad_clip must be >= 0, got ", c.grad_clip);
  COPPICE_CHECK(c.log_every >= 0 && c.eval_every >= 0 && c.checkpoint_every >= 0 && c.keep_last >= 0,
                "run_training: log_every, eval_every, checkpoint_every and keep_last must be >= 0");
  COPPICE_CHECK(c.densify_step >= 0, "run_training: densify_step must be >= 0 (0: never), got ", c.densify_step);
  COPPICE_CHECK(c.densify_step == 0 || c.sr_ste == nullptr,
                "run_training: densify_step makes sparse weights dense, but SR-STE's weights are dense already");
}

bool is_densified(const TrainComponents& c, int64_t steps_done) {
  return c.densify_step > 0 && steps_done >= c.densify_step;
}

MaskState* mask_state(const TrainComponents& c, int64_t steps_done) {
  if (is_densified(c, steps_done)) return nullptr;
  if (c.mask_updater != nullptr) return c.mask_updater;
  return c.sr_ste;
}

int64_t total_training_steps(const TrainComponents& c) {
  if (c.steps > 0) return c.steps;
  const int64_t nb = c.train.num_batches();
  return checked_mul(c.epochs, nb, [&] { return str_cat("run_training: ", c.epochs, " epochs of ", nb, " steps"); });
}

double mask_update_overhead_seconds(const TrainingSummary& s) {
  const int64_t updates = static_cast<int64_t>(s.mask_updates.size());
  if (updates == 0) return 0.0;
  const double ordinary = s.ordinary_steps > 0 ? s.ordinary_step_seconds / static_cast<double>(s.ordinary_steps) : 0.0;
  return s.update_step_seconds - static_cast<double>(updates) * ordinary;
}

}  // namespace coppice

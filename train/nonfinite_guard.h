// What a run does when a step goes non-finite (training.on_nonfinite): the
// loss or a gradient is inf or NaN, or a mask update refuses to rank
// non-finite scores (optim/finite_check.h).
//
//   stop       (default) the run ends at that step with exit 1 and one line:
//              the step, what was not finite (the loss, or the first
//              parameter whose gradient is not, by name) and the last finite
//              checkpoint to go back to. Nothing of the step is saved.
//   skip_step  the step's optimizer update and mask update are left out (the
//              parameters and optimizer state stay as they were, as a loss
//              scaler does for an overflow), and the run goes on; after
//              max_consecutive_skips such steps in a row it stops as above,
//              and a run that ends on such steps fails the same way: a
//              run succeeds only when its last step was finite.
//
// How the check costs nothing on ordinary steps, and how it shares the work
// with an f16 loss scaler, is the trainer's (train/trainer.h, step()).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace coppice {

enum class NonfinitePolicy { kStop, kSkipStep };

// "stop", "skip_step".
const char* nonfinite_policy_name(NonfinitePolicy policy);

struct NonfiniteOptions {
  NonfinitePolicy policy = NonfinitePolicy::kStop;
  int64_t max_consecutive_skips = 10;  // skip_step: the run stops at the next one past this many in a row
};

class NonfiniteGuard {
 public:
  explicit NonfiniteGuard(NonfiniteOptions options = {}) : options_(options) {}

  const NonfiniteOptions& options() const { return options_; }
  // Whether the step's health must be known before its optimizer step (to
  // skip it), rather than after it, with the read the step makes anyway.
  bool decides_before_update() const { return options_.policy == NonfinitePolicy::kSkipStep; }

  // Step `step` was not finite: `what` says what ("the loss is nan", "the
  // gradient of 'fc1.weight' is not finite", a mask update's refusal).
  // Returns when the step is to be skipped; throws coppice::Error with the
  // run's last line when the run stops ("run_training: step 12: <what>
  // (training.on_nonfinite: stop); last finite checkpoint: <path>"; the path
  // or "none written").
  void on_nonfinite(int64_t step, std::string_view what, std::string_view last_finite_checkpoint);
  // A step that went through: the run of skips in a row ends.
  void on_finite() { consecutive_ = 0; }
  // The run ends after `steps` steps: one whose last steps were skipped as
  // non-finite has diverged, however few they were, and fails as a stopped
  // run does ("run_training: steps 5 to 7 were skipped as non-finite and the
  // run ended there ...").
  void on_end(int64_t steps, std::string_view last_finite_checkpoint) const;

  int64_t consecutive_skips() const { return consecutive_; }
  int64_t skipped_steps() const { return skipped_; }

 private:
  NonfiniteOptions options_;
  int64_t consecutive_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace coppice

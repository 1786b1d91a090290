#include "train/nonfinite_guard.h"

#include "tensor/error.h"

namespace coppice {

const char* nonfinite_policy_name(NonfinitePolicy policy) {
  return policy == NonfinitePolicy::kSkipStep ? "skip_step" : "stop";
}

void NonfiniteGuard::on_nonfinite(int64_t step, std::string_view what, std::string_view last_finite_checkpoint) {
  const std::string prefix = str_cat("run_training: step ", step, ": ", what);
  const std::string where = str_cat("; last finite checkpoint: ", last_finite_checkpoint);
  if (options_.policy == NonfinitePolicy::kStop) fail(prefix, " (training.on_nonfinite: stop)", where);
  if (consecutive_ >= options_.max_consecutive_skips) {
    fail(prefix, " after ", consecutive_,
         " skipped steps in a row (training.max_consecutive_skips: ", options_.max_consecutive_skips, ")", where);
  }
  ++consecutive_;
  ++skipped_;
}

void NonfiniteGuard::on_end(int64_t steps, std::string_view last_finite_checkpoint) const {
  if (consecutive_ == 0) return;
  fail("run_training: steps ", steps - consecutive_, " to ", steps - 1,
       " were skipped as non-finite and the run ended there (training.on_nonfinite: skip_step); "
       "last finite checkpoint: ",
       last_finite_checkpoint);
}

}  // namespace coppice

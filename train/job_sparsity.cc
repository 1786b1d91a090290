#include "train/job_sparsity.h"

namespace coppice {

void apply_job_sparsity(Module& model, const JobConfig& job, const SparsitySchedule& schedule) {
  SparsitySchedule applied = schedule;
  if (job.mask_update.method == MaskMethod::kSrSte) applied.parameters.clear();
  if (applied.parameters.empty() && applied.outputs.empty()) return;
  SparsifyContext ctx;
  ctx.seed = job.seed;
  model.apply_sparsity(applied, ctx);
}

}  // namespace coppice

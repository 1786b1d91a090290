#include "train/propagated_rules.h"

#include "absl/status/status.h"
#include "models/propagation/propagation.h"
#include "models/propagation/step_trace.h"
#include "models/zoo.h"
#include "tensor/error.h"
#include "train/atomic_file.h"

namespace coppice {

SparsitySchedule with_propagated_rules(const JobConfig& job, const SparsitySchedule& schedule,
                                       const Tensor& example_inputs, DeviceType device, const std::string& plan_path) {
  ModulePtr model = make_model(job.model);
  // As the run applies it (job.cc's sparsify): SR-STE keeps its weights dense.
  SparsitySchedule applied = schedule;
  if (job.mask_update.method == MaskMethod::kSrSte) applied.parameters.clear();
  if (!applied.parameters.empty() || !applied.outputs.empty()) {
    SparsifyContext ctx;
    ctx.seed = job.seed;
    model->apply_sparsity(applied, ctx);
  }
  const propagation::StepTrace trace = propagation::trace_forward(*model, Variable(example_inputs));
  propagation::PropagateOptions options;
  options.max_density = job.sparsity.propagate_max_density;
  const propagation::Plan plan = propagation::propagate(trace, device, schedule.outputs, options);

  if (!plan_path.empty()) {
    const absl::Status written = write_file_atomically(plan_path, propagation::plan_jsonl(trace, plan));
    if (!written.ok()) fail("sparsity.plan: cannot write '", plan_path, "': ", written.message());
  }
  SparsitySchedule out = schedule;
  for (OutputRule& r : propagation::inferred_rules(plan)) out.outputs.push_back(std::move(r));
  return out;
}

}  // namespace coppice

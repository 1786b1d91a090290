#include "train/propagated_rules.h"

#include "absl/status/status.h"
#include "models/propagation/propagation.h"
#include "models/propagation/step_trace.h"
#include "models/zoo.h"
#include "tensor/error.h"
#include "train/atomic_file.h"
#include "train/job_sparsity.h"

namespace coppice {

SparsitySchedule with_propagated_rules(const JobConfig& job, const SparsitySchedule& schedule,
                                       const Tensor& example_inputs, DeviceType device, const std::string& plan_path) {
  ModulePtr model = make_model(job.model);
  apply_job_sparsity(*model, job, schedule);
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

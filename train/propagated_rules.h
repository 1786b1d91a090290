// sparsity.propagate in a run: the job's model built once more, its
// parameter rules and output rules applied, one forward pass on an example
// batch traced, the sparsity attributes propagated (models/propagation), and
// the output rules they call for added to the schedule the run applies. The
// job's own output rules win: a module one of them names gets no inferred rule.
#pragma once

#include <string>

#include "sparsifiers/schedule.h"
#include "tensor/device.h"
#include "tensor/tensor.h"
#include "train/config.h"

namespace coppice {

// `schedule` (the job's, resolved) with the inferred output rules appended.
// `example_inputs`: a batch of the job's data as the model takes it, on the
// CPU; `device`: where the run trains (kernels are looked up there). Writes
// the plan to `plan_path` (through a temporary file; "" writes none) and
// fails naming the path when it cannot. The model traced is a copy: the
// run's model and its random draws are untouched.
SparsitySchedule with_propagated_rules(const JobConfig& job, const SparsitySchedule& schedule,
                                       const Tensor& example_inputs, DeviceType device, const std::string& plan_path);

}  // namespace coppice

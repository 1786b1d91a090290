// The sparsity a run applies to its model, in one place for the run itself
// (train/job.cc) and for the copy that sparsity propagation traces
// (train/propagated_rules.h), so that the trace sees the run's formats.
#pragma once

#include "models/module.h"
#include "sparsifiers/schedule.h"
#include "train/config.h"

namespace coppice {

// Applies `schedule` (the job's, resolved) to `model` with the job's seed:
// the parameters in their formats and the output rules attached. SR-STE
// keeps its weights dense (forward sees them through their n:m projection,
// optim/sr_ste.h), so only the output rules apply to it. Nothing happens
// for a schedule with no rules.
void apply_job_sparsity(Module& model, const JobConfig& job, const SparsitySchedule& schedule);

}  // namespace coppice

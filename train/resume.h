// Where a run starts, and what it saves so that another run can start where
// it stopped: resuming from a checkpoint (read, verified, checked against
// this run's job and position, then loaded into the components), the
// TrainerState every checkpoint records, and the run marker a run leaves in
// its checkpoint directory. The checkpoint files themselves:
// train/checkpoint.h and train/checkpoint_files.h.
#pragma once

#include <cstdint>
#include <string>

#include "train/checkpoint.h"
#include "train/components.h"
#include "train/progress.h"

namespace coppice {

// The run's identity and its first step.
struct RunStart {
  int64_t step = 0;          // optimizer steps already done (> 0 when resumed)
  std::string run_id;        // the checkpoint's run, continued, or a new one
  std::string resumed_from;  // the checkpoint file; "" for a fresh run
};

// A fresh run (components.resume empty): seeds default_generator() with
// components.seed and starts at step 0 as run `new_run_id`. A resumed run
// loads the checkpoint components.resume names (see the top of train/loop.h)
// after checking all of it against this run: its fingerprint,
// allowed_changes, the loader's seed and the position within `total` steps of
// `steps_per_epoch` batches. It continues the checkpoint's run when that is
// the newest checkpoint of its run, else it forks as `new_run_id`. Notes go
// to `progress`; errors are thrown as coppice::Error naming the file.
RunStart start_run(TrainComponents& components, int64_t steps_per_epoch, int64_t total, const std::string& new_run_id,
                   ProgressReporter& progress);

// Writes the run marker of `run` in components.checkpoint_dir (creating it)
// and notes on `progress` that other runs' checkpoints share the directory.
void mark_run(const TrainComponents& components, const RunStart& run, ProgressReporter& progress);

// Where the run stands after `step` steps, as a checkpoint records it (the
// loader's position, the generator, the LR schedule, the loss scaler, the
// run and the job's fingerprint).
TrainerState trainer_state(const TrainComponents& components, int64_t steps_per_epoch, const RunStart& run,
                           int64_t step);

}  // namespace coppice

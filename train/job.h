// A whole training job from its validated configuration (docs/architecture.md,
// layer 7): the glue between train/config.h and train/loop.h that the
// `trainer` binary (tools/trainer) runs.
//
// run_job takes over what validation built (ValidatedJob, train/config.h:
// the model and the resolved sparsity schedule), sets allow_tf32
// (tensor/precision.h) from precision.allow_tf32, then, in this order: the
// device (auto: CUDA when cuda_available(), else the CPU),
// manual_seed(job.seed), the model moved to the device, the datasets and
// loaders, the sparsity (Module::apply_sparsity of the resolved schedule),
// the optimizer over model.parameters() taken after apply_sparsity, the LR
// scheduler, the mask updater (set / rigl / snfs) or GMP pruner, and hands
// them to run_training.
//
// Data:
//   fashion_mnist  train (60000 images) less a seeded random validation split
//                  of floor(validation_split * 60000) (split_random, keyed by
//                  job.seed); the test split is the 10000 t10k images.
//   synthetic      examples + test_examples Gaussian blobs drawn with one seed
//                  (so the held-out test examples share the training classes'
//                  centres); the last test_examples are the test split, and a
//                  validation split is cut from the end of the rest.
//   text           next-character windows over the corpus; the validation
//                  split is the last windows (split_last); no test split.
//
// Distributed (distributed.world_size > 1): with backend inproc, run_job
// runs the ranks as threads (run_inproc) on the CPU and returns rank 0's
// summary; with nccl this process is one rank (its place read by launch_env:
// tools/launch, mpirun, srun), on cuda:<local rank>, and returns its own.
// Each rank builds everything as above from the same seed (an in-process
// rank other than 0 builds its own model again: each rank trains its own),
// takes rank 0's parameters (replicate_parameters) and trains on its shard
// of the data.
//
// Errors (a CUDA device on a build or machine without one, a launcher whose
// world size is not the job's, a dataset that fails to load, a checkpoint
// that fails to load or write, a failed or timed-out collective) are thrown
// as coppice::Error.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "optim/lr_schedule.h"
#include "tensor/device.h"
#include "train/config.h"
#include "train/loop.h"

namespace coppice {

struct JobRunOptions {
  // The run's directory (created when needed). When set and the job leaves
  // logging.metrics empty, metrics go to <run_dir>/metrics.jsonl.
  std::string run_dir;
  // A checkpoint file or directory to resume from; when non-empty it
  // overrides the job's checkpoint.resume.
  std::string resume;
  // Job settings the resume may change on purpose, besides the job's
  // checkpoint.allow_changes (train/fingerprint.h: check_allowed_changes).
  std::vector<std::string> allow_changes;
  // Where progress, evaluations and the loop's summary go when the job's
  // logging.progress is true (null: nowhere); redrawn in place only on a
  // terminal (progress_interactive -1: isatty).
  std::FILE* progress_out = stderr;
  int progress_interactive = -1;
  // Whether the loop also prints the final summary with the progress (the
  // trainer binary prints it on stdout itself, once).
  bool summary_on_progress = true;
  // Stop once this many steps of the job are done (< 0: run to the end),
  // every schedule kept at the job's full length (trainer --max-steps); the
  // run ends with a checkpoint where the job writes them, so a resume goes on.
  int64_t stop_at_step = -1;
  // After every step: the steps done and the batch's loss; returning false
  // ends the run there (TrainComponents::keep_going), e.g. a Python callback's
  // early stop.
  std::function<bool(int64_t done, double loss)> keep_going;
};

// The device a job runs on: "auto" is cuda:0 when cuda_available(), else the
// CPU. Throws coppice::Error for a CUDA device that this build or machine
// does not have.
Device resolve_job_device(const DeviceConfig& config);

// The metrics path run_job writes: logging.metrics, or
// <run_dir>/metrics.jsonl when that is empty and run_dir is set, else "".
std::string job_metrics_path(const JobConfig& job, const JobRunOptions& opts);

// The learning-rate schedule run_job steps (its LrScheduler's), for a run of
// `total_steps`: lr_schedule's (warm-up, then constant, step or cosine),
// and with mask_update.densify_warmup_steps W > 0 every parameter group's lr
// times (step - densify_step + 1) / W for the W steps from densify_step on
// (optim/lr_schedule.h's linear_ramp). A function of the step alone: a
// resumed run sets the same lrs as an uninterrupted one.
LrSchedulePtr job_lr_schedule(const JobConfig& job, int64_t total_steps);

// Runs `job` (from load_validated_job, parse_validated_job or validate_job)
// to its end and returns the loop's summary. It takes the job's model over
// and trains it.
TrainingSummary run_job(ValidatedJob job, const JobRunOptions& opts = {});
// A job as a JobConfig (made in C++, or from load_job_config): validated
// first (validate_job; its first problem thrown as coppice::Error), then run
// as above.
TrainingSummary run_job(const JobConfig& job, const JobRunOptions& opts = {});

}  // namespace coppice

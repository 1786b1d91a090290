// The plain components a training run is built from (TrainComponents: the
// model, loaders, optimizer, schedules and options that run_training drives)
// and what a run reports back (TrainingSummary). train/loop.h describes the
// step they make up; train/trainer.h its phases.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/loader.h"
#include "distributed/communicator.h"
#include "distributed/grad_sync.h"
#include "models/module.h"
#include "optim/gmp.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/mask_schedule.h"  // MaskUpdateStats
#include "optim/mask_updater.h"
#include "optim/optimizer.h"
#include "optim/sr_ste.h"
#include "tensor/device.h"
#include "train/fingerprint.h"
#include "train/metrics.h"
#include "train/nonfinite_guard.h"

namespace coppice {

struct EvalResult {
  double loss = 0.0;      // mean cross-entropy over the examples
  double accuracy = 0.0;  // fraction of argmax == target
  int64_t examples = 0;
};

struct TrainComponents {
  TrainComponents(Module& model_in, DataLoader train_in, Optimizer& optimizer_in)
      : model(model_in), train(std::move(train_in)), optimizer(optimizer_in) {}

  Module& model;
  DataLoader train;
  std::optional<DataLoader> validation;
  std::optional<DataLoader> test;
  Optimizer& optimizer;              // over model.parameters()
  LrScheduler* scheduler = nullptr;  // stepped after every optimizer step
  // At most one of the three. The updater's layers are parameter names of
  // `model` (added with their current values); run_training replaces its
  // state remap with its own. SR-STE's layers are dense weights of `model`
  // (added with their current values); run_training sets each one's view in
  // the model (Module::set_parameter_view) to its n:m projection, which stays
  // set after the run.
  MaskUpdater* mask_updater = nullptr;
  const GmpPruner* gmp = nullptr;
  std::vector<std::string> gmp_layers;  // empty: every sparse parameter of dim >= 2
  SrSte* sr_ste = nullptr;
  // Sparse to dense (SPDF, optim/densify.h): > 0 makes every sparse
  // parameter of `model` dense after step densify_step - 1 (by the step
  // alone, skipped or not), its optimizer state carried over, and ends the
  // mask method: the rest of the run trains dense, and a checkpoint at step
  // S holds dense weights and no mask-method state exactly when S >=
  // densify_step (a resumed run makes its weights dense before loading
  // one). 0: the weights stay as they are. Not with SR-STE (its weights are
  // dense already). A job's learning-rate ramp after it
  // (mask_update.densify_warmup_steps) is in `scheduler`'s schedule
  // (train/job.h: job_lr_schedule), not here.
  int64_t densify_step = 0;

  double grad_clip = 0.0;  // max global gradient norm; 0: none (of the unscaled gradients)
  // Mixed precision (train/mixed_precision.h): floating inputs are cast to
  // the dtype of the model's parameters and logits to f32 for the loss. With
  // a loss scaler, backward runs on the scaled loss and the scaler steps the
  // optimizer (skipping steps with inf/NaN gradients; the LR scheduler still
  // steps); its scale and growth tracker are saved in checkpoints. Null: no
  // scaling.
  LossScaler* loss_scaler = nullptr;
  // Exactly one > 0: the run's length (schedules see the full length even
  // when stop_at_step ends it early).
  int64_t steps = 0;
  int64_t epochs = 0;
  // Stop after this many steps in total (< 0: run to the end), e.g. to
  // simulate an interruption; a checkpoint is written there when configured.
  int64_t stop_at_step = -1;

  // Evaluation on `validation` (or `test` when there is none) every
  // eval_every steps; 0: at the end of every epoch. The test split is
  // evaluated at the end in any case.
  int64_t eval_every = 0;
  int64_t eval_max_batches = 0;

  Device device = Device::cpu();  // where the model and loaders already are (recorded)
  // A fresh run seeds default_generator() (dropout, ...) with it; a resumed
  // one restores the generator from the checkpoint. Models, loaders and mask
  // updaters carry their own seeds.
  uint64_t seed = 0;

  // Metrics (JSONL; "" none), every log_every steps (and update steps).
  std::string metrics_path;
  int64_t log_every = 50;
  // Progress on `progress_out` (null: none); redrawn in place on a terminal;
  // evaluations and, unless summary_on_progress is false (a caller that
  // prints the summary itself), the final summary (format_summary) too.
  std::FILE* progress_out = nullptr;
  int progress_interactive = -1;  // -1: isatty
  bool summary_on_progress = true;
  int64_t progress_every = 10;

  // Checkpoints: every checkpoint_every steps (0: only at the end / stop) in
  // checkpoint_dir ("" none), keeping the newest keep_last (0: all).
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int64_t keep_last = 0;
  // A checkpoint file, or a directory (train/checkpoint_files.h says which
  // of its checkpoints is taken), loaded before training ("" none).
  std::string resume;
  // The job's fingerprint (train/fingerprint.h), saved in every checkpoint
  // and compared on resume: a checkpoint whose fingerprint differs is
  // refused, naming the keys, unless every difference is of an adjustable
  // key that allowed_changes lets change (then the job's values win and the
  // changes are reported). Empty: no fingerprint (the optimizer then takes
  // the checkpoint's hyperparameters, as load_checkpoint does).
  Fingerprint fingerprint;
  std::vector<std::string> allowed_changes;

  // Replay each ordinary step's forward and backward from a CUDA graph
  // (train/graph_step.h) on a CUDA device. Off for data-parallel runs (the
  // gradient exchange overlaps backward) and for models with output
  // sparsifiers; a step that cannot be captured turns it off for the run.
  // TrainingSummary says how it went.
  bool cuda_graph = false;

  // What a step whose loss or gradients are inf or NaN does: stop the run
  // (the default) or be skipped, up to a limit (train/nonfinite_guard.h).
  NonfiniteOptions nonfinite;

  // Data-parallel training (see the top of this file); null: one rank.
  Communicator* comm = nullptr;
  GradSyncOptions grad_sync;

  // Called on each step that materializes dense gradients, once per layer
  // (for tests and tracing).
  std::function<void(int64_t step, const std::string& layer)> on_dense_gradient;
  // Called after each step's optimizer step, LR step and mask change, with
  // the step's index t (gradients of unchanged parameters are still there).
  std::function<void(int64_t step)> on_step_end;
  // Called after each step (after on_step_end) with the steps done and the
  // batch's loss; false ends the run after this step, as stop_at_step would
  // (a checkpoint where the job writes them, the summary).
  std::function<bool(int64_t done, double loss)> keep_going;
};

struct TrainingSummary {
  int64_t start_step = 0;  // > 0 when resumed
  int64_t final_step = 0;  // optimizer steps done
  int64_t total_steps = 0;
  std::vector<double> losses;                 // per step run, in order
  std::vector<double> accuracies;             // per step run (training batch)
  std::vector<int64_t> dense_gradient_steps;  // steps that materialized dense gradients
  std::vector<MaskUpdateStats> mask_updates;
  // Wall time of the steps that changed masks (forward and backward, through
  // the dense-gradient view where the method needs one, the optimizer step
  // and the mask update, up to a device synchronization) and of the other
  // steps, so that what mask updates cost is update_step_seconds minus as
  // many ordinary steps (mask_update_overhead_seconds). Evaluations,
  // checkpoints and logging are in neither.
  double update_step_seconds = 0.0;
  int64_t ordinary_steps = 0;
  double ordinary_step_seconds = 0.0;
  // Steps whose optimizer step was skipped: by the loss scaler (gradients
  // that overflowed under its scale) or as non-finite under
  // training.on_nonfinite: skip_step; each step once.
  std::vector<int64_t> skipped_steps;
  double final_loss_scale = 1.0;                   // the loss scaler's scale at the end (1: none)
  std::optional<EvalResult> validation;            // the last evaluation
  std::optional<EvalResult> test;                  // at the end
  ModelStats model;                                // at the end
  std::map<std::string, int64_t> fallback_counts;  // dense fallbacks during the run (Dispatcher::fallback_counts)
  // The product planners' measured decisions in force at the end, as the
  // JSON array of route_choices_json (sparse/route_choices.h); "" when none.
  std::string route_choices;
  int64_t peak_memory_bytes = -1;  // CPU allocator high-water mark since the process started
  std::string last_checkpoint;     // "" when none was written
  int rank = 0;
  int world_size = 1;
  // Gradient bytes this rank sent per step (GradSyncStats::bytes; 0 with one
  // rank): the mean over ordinary steps and over dense-gradient steps, and
  // the last ordinary step's split by kind.
  double exchange_bytes_per_step = 0.0;
  double exchange_bytes_per_dense_step = 0.0;
  // Host milliseconds a step (ordinary steps) in the exchange's gradient
  // hooks and in its end() (GradSyncStats::hook_seconds, end_seconds).
  double exchange_hook_ms_per_step = 0.0;
  double exchange_end_ms_per_step = 0.0;
  GradSyncStats last_exchange;
  double seconds = 0.0;
  double samples_per_second = 0.0;
  // CUDA graphs (TrainComponents::cuda_graph): asked for, captures, replayed
  // steps, and why graphs were off or went off ("" when they ran).
  bool cuda_graph = false;
  int64_t graph_captures = 0;
  int64_t graph_replays = 0;
  std::string graph_declined;
};

// What the run's mask updates cost beyond ordinary steps: the time of the
// update steps minus as many mean ordinary steps (0 without updates).
double mask_update_overhead_seconds(const TrainingSummary& summary);

// The steps a run takes: components.steps, or components.epochs times the
// train loader's batches per epoch; throws coppice::Error naming both when
// the product overflows int64.
int64_t total_training_steps(const TrainComponents& components);

// Throws coppice::Error naming the first component that makes no run (both or
// neither of steps and epochs, more than one of updater, GMP pruner and
// SR-STE, an empty train loader, a negative interval, a negative
// densify_step or one with SR-STE).
void check_components(const TrainComponents& components);

// Whether the run's weights are dense once `steps_done` steps are done
// (components.densify_step reached).
bool is_densified(const TrainComponents& components, int64_t steps_done);

// What checkpoints save of the method that drives the masks once
// `steps_done` steps are done: the mask updater's state or SR-STE's masks
// (null when neither is there, or once the weights are dense).
MaskState* mask_state(const TrainComponents& components, int64_t steps_done);

}  // namespace coppice

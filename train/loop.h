// The training loop over plain components (ARCHITECTURE.md, layer 7). The
// job-config glue builds the components; run_training drives them.
//
// One step t (0-based; t = the optimizer steps done before it):
//   1. the next batch of the train loader (epoch t / num_batches, batch
//      t % num_batches: each epoch's order is the loader's seeded one),
//   2. forward (floating inputs in the model's dtype), cross-entropy in f32
//      (logits [..., C] are cast to f32 and flattened to [N, C], targets to
//      [N]), backward (of the loss times the loss scale, when scaling),
//   3. on steps where the mask updater needs the dense gradient
//      (MaskUpdater::needs_dense_gradient(t)) and only there, every sparse
//      weight of the updater is swapped for a dense leaf holding to_dense of
//      it for this forward/backward; its dense gradient goes to the updater,
//      and its projection onto the pattern (autograd's project_grad) becomes
//      the weight's gradient, so the optimizer sees what an ordinary step
//      would give it. On every other step gradients stay compact.
//   4. movement scores (prune criterion kMovement) accumulate, gradient
//      clipping (global norm), optimizer step, LR scheduler step,
//   5. on update steps, MaskUpdater::update(t, ...) (its state remap is wired
//      to Optimizer::replace_value and Module::set_parameter, so the model
//      and the optimizer hold the new parameter with its remapped state), or
//      on GMP pruning steps GmpPruner::prune on each pruned weight, likewise
//      rebound,
//   6. metrics, progress, evaluation and checkpoints as configured.
//
// With cuda_graph, step 2 of an ordinary step (not a dense-gradient one) goes
// through a GraphedStep: replayed from a CUDA graph while the parameters,
// their patterns, the batch shape and the loss scale are those it was
// captured with, eager otherwise; everything from step 4 on runs as above.
//
// Data-parallel (comm set, world_size ranks, each running run_training on its
// own components, built alike): at the start every parameter is broadcast
// from rank 0 (sparse patterns included: distributed/replica_sync.h); on
// every step the gradients of the step's leaves (the dense stand-ins on
// dense-gradient steps, so the mask updater sees the dense gradient averaged
// over ranks) are averaged over ranks by a GradientSync, overlapped with the
// backward pass, before clipping and the optimizer step; after every mask
// change the ranks' patterns are checksummed and a mismatch stops the job.
// Losses and accuracies are averaged over ranks; evaluation splits the
// batches over ranks and sums. Rank 0 alone writes metrics, progress and
// checkpoints; every rank reads the checkpoint it resumes from. The train
// loader must already shard by the communicator's rank (DataLoaderOptions).
//
// Resuming from a checkpoint (resume) reads and verifies the whole file,
// compares its job fingerprint and its position with this run's, then loads
// it into the components (rebuilt from scratch, as at the start of a job) and
// continues from its step; on the CPU the result is bit-identical to a run
// that was never interrupted. The run continues the checkpoint's run id when
// it resumes from that run's newest checkpoint, else draws a new one (a
// fork); with checkpoint_dir it writes its run marker there before the first
// step (train/checkpoint_files.h). Metrics records after the resumed step are
// dropped from the metrics file before it is appended to. Top-k residuals
// (grad_sync.topk_fraction) are not checkpointed: they restart at zero, and
// the resume says so.
//
// Errors are thrown as coppice::Error (a failed checkpoint load or write, a
// metrics file that cannot be opened, bad components).
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
#include "optim/mask_updater.h"
#include "optim/optimizer.h"
#include "tensor/device.h"
#include "train/fingerprint.h"
#include "train/metrics.h"

namespace coppice {

struct EvalResult {
  double loss = 0.0;      // mean cross-entropy over the examples
  double accuracy = 0.0;  // fraction of argmax == target
  int64_t examples = 0;
};

// Mean loss and accuracy of `model` (in eval mode, no grad) over `loader`'s
// epoch 0, at most max_batches batches (0: all). Restores the model's mode.
// With `comm`, rank r evaluates batches r, r + world_size, ... and the sums
// are reduced, so every rank gets the result over all the batches.
EvalResult evaluate(Module& model, const DataLoader& loader, int64_t max_batches = 0, Communicator* comm = nullptr);

struct TrainComponents {
  TrainComponents(Module& model_in, DataLoader train_in, Optimizer& optimizer_in)
      : model(model_in), train(std::move(train_in)), optimizer(optimizer_in) {}

  Module& model;
  DataLoader train;
  std::optional<DataLoader> validation;
  std::optional<DataLoader> test;
  Optimizer& optimizer;  // over model.parameters()
  LrScheduler* scheduler = nullptr;  // stepped after every optimizer step
  // At most one of the two. The updater's layers are parameter names of
  // `model` (added with their current values); run_training replaces its
  // state remap with its own.
  MaskUpdater* mask_updater = nullptr;
  const GmpPruner* gmp = nullptr;
  std::vector<std::string> gmp_layers;  // empty: every sparse parameter of dim >= 2

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

  // Data-parallel training (see the top of this file); null: one rank.
  Communicator* comm = nullptr;
  GradSyncOptions grad_sync;

  // Called on each step that materializes dense gradients, once per layer
  // (for tests and tracing).
  std::function<void(int64_t step, const std::string& layer)> on_dense_gradient;
  // Called after each step's optimizer step, LR step and mask change, with
  // the step's index t (gradients of unchanged parameters are still there).
  std::function<void(int64_t step)> on_step_end;
};

struct MaskUpdateStats {
  int64_t step = 0;
  std::map<std::string, int64_t> dropped, grown;
  std::map<std::string, double> itop_rate;
};

struct TrainingSummary {
  int64_t start_step = 0;  // > 0 when resumed
  int64_t final_step = 0;  // optimizer steps done
  int64_t total_steps = 0;
  std::vector<double> losses;      // per step run, in order
  std::vector<double> accuracies;  // per step run (training batch)
  std::vector<int64_t> dense_gradient_steps;  // steps that materialized dense gradients
  std::vector<MaskUpdateStats> mask_updates;
  std::vector<int64_t> skipped_steps;    // steps the loss scaler skipped (inf/NaN gradients)
  double final_loss_scale = 1.0;         // the loss scaler's scale at the end (1: none)
  std::optional<EvalResult> validation;  // the last evaluation
  std::optional<EvalResult> test;        // at the end
  ModelStats model;                      // at the end
  std::map<std::string, int64_t> fallback_counts;  // dense fallbacks during the run (Dispatcher::fallback_counts)
  int64_t peak_memory_bytes = -1;        // CPU allocator high-water mark since the process started
  std::string last_checkpoint;           // "" when none was written
  int rank = 0;
  int world_size = 1;
  // Gradient bytes this rank sent per step (GradSyncStats::bytes; 0 with one
  // rank): the mean over ordinary steps and over dense-gradient steps, and
  // the last ordinary step's split by kind.
  double exchange_bytes_per_step = 0.0;
  double exchange_bytes_per_dense_step = 0.0;
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

TrainingSummary run_training(TrainComponents& components);

// The steps a run takes: components.steps, or components.epochs times the
// train loader's batches per epoch; throws coppice::Error naming both when
// the product overflows int64.
int64_t total_training_steps(const TrainComponents& components);

// Makes every rank's parameters rank 0's: values, and the pattern of sparse
// ones (a rank whose pattern differs gets rank 0's as a new leaf in the
// model). Call it before an optimizer or a mask updater takes the
// parameters (run_job does).
void replicate_parameters(Module& model, Communicator& comm);

// The summary as readable lines (test accuracy, per-layer densities,
// parameters and Linear FLOPs dense vs sparse, fallbacks, peak memory).
std::string format_summary(const TrainingSummary& summary);
JsonObject summary_json(const TrainingSummary& summary);

}  // namespace coppice

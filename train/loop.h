// The training loop over plain components (docs/architecture.md, layer 7). The
// job-config glue builds the components (train/components.h); run_training
// drives them: a short loop over the phases of a Trainer (train/trainer.h),
// one method per part of the step below. Resuming lives in train/resume.h,
// the dense-gradient swap of step 3 in models/dense_gradient_view.h.
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
//      would give it. On one rank, weights in a block format (bsr,
//      blocked_ell) are not swapped: their gradient's factors are probed and
//      the updater gets block scores (models/dense_gradient_view.h). On
//      every other step gradients stay compact.
//   4. movement scores (prune criterion kMovement) accumulate, SR-STE's
//      sparse-refined term joins the gradients, gradient clipping (global
//      norm), optimizer step, LR scheduler step,
//   5. on the steps where the mask schedule (optim/mask_schedule.h, over the
//      mask updater, the GMP pruner or SR-STE) changes masks, its update:
//      through the run's ParameterStore (train/model_parameters.h, over
//      Optimizer::set_value) the parameter's Variable takes the new value in
//      place, so the model and the optimizer hold it with its remapped state,
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
// metrics file that cannot be opened, bad components).#pragma once

#include "distributed/communicator.h"
#include "models/module.h"
#include "train/components.h"
#include "train/evaluate.h"
#include "train/summary.h"

namespace coppice {

// One run over `components`: the short loop over the phases of a Trainer
// (train/trainer.h).
TrainingSummary run_training(TrainComponents& components);

// Makes every rank's parameters rank 0's: values, and the pattern of sparse
// ones (a rank whose pattern differs gets rank 0's as a new leaf in the
// model). Call it before an optimizer or a mask updater takes the
// parameters (run_job does).
void replicate_parameters(Module& model, Communicator& comm);

}  // namespace coppice

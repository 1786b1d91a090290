// A training run in phases. run_training (train/loop.h) is the loop over
// them; each phase is one concept of the step that loop.h describes, and
// every piece of state that lives across steps (the resumed position, the
// outputs, the gradient exchange, the CUDA graph, counters for the summary)
// is a member here rather than a local of one long function.
//
// Per step t, in this order (the order is part of the behaviour: random
// draws, collectives over ranks and the metrics file all follow it):
//   begin_step(t)      the batch of step t; gradients zeroed; the model's
//                      sparsity step set
//   forward_backward() forward and backward (replayed from a CUDA graph when
//                      one fits), through the dense-gradient view on the
//                      steps the mask updater asks for; on several ranks the
//                      gradient exchange starts, overlapped with backward
//   synchronize()      waits for the exchange (every gradient is now the
//                      average over ranks) and closes the dense-gradient
//                      view, so the updater sees averaged dense gradients
//   step()             movement scores (or SR-STE's sparse-refined term),
//                      clipping, the optimizer (through the loss scaler) and
//                      the LR schedule; the batch's loss and accuracy over
//                      all ranks, read with the step's non-finite flags
//                      (every gradient, folded on the device): a step whose
//                      loss or gradients are inf or NaN stops the run or is
//                      skipped (training.on_nonfinite, nonfinite_guard.h)
//   update_sparsity()  the mask schedule's change of the masks (the mask
//                      updater's, the GMP pruner's or SR-STE's:
//                      optim/mask_schedule.h) with the optimizer state
//                      remapped, and the ranks' patterns checked to agree;
//                      after step densify_step - 1, every sparse weight
//                      made dense (optim/densify.h) and the mask method
//                      ended
//   record()           on_step_end and the step's entries in the summary
//   log()              the metrics record and the progress line, when due
//   evaluate()         evaluation on the validation (or test) split, when due
//   checkpoint()       a checkpoint, when due
//   end_step()         lets go of the step's batch, outputs and gradients
//                      (so that they do not outlive the step, as before)
// and finish() once: the last checkpoint, the test split, the summary.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/loader.h"
#include "distributed/grad_sync.h"
#include "models/dense_gradient_view.h"
#include "optim/finite_check.h"
#include "optim/mask_schedule.h"
#include "train/components.h"
#include "train/graph_step.h"
#include "train/metrics.h"
#include "train/model_parameters.h"
#include "train/nonfinite_guard.h"
#include "train/progress.h"
#include "train/resume.h"
#include "train/run_lock.h"

namespace coppice {

class Trainer {
 public:
  // Checks the components and makes them ready to run: parameters named, the
  // mask schedule built over the mask updater, the GMP pruner or SR-STE
  // (whose views it sets on the model; its changes reach the model and the
  // optimizer through train/model_parameters.h), the
  // run started fresh or resumed (train/resume.h), metrics opened, CUDA
  // graphs prepared or declined.
  explicit Trainer(TrainComponents& components);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The steps this run takes: [first_step(), stop_step()).
  int64_t first_step() const { return run_.step; }
  int64_t stop_step() const { return stop_; }

  void begin_step(int64_t t);
  void forward_backward();
  void synchronize();
  void step();
  void update_sparsity();
  void record();
  void log();
  void evaluate();
  void checkpoint();
  void end_step();
  TrainingSummary finish();

 private:
  using Clock = std::chrono::steady_clock;

  // What one step carries from phase to phase; begin_step starts it afresh,
  // end_step lets go of its tensors.
  struct Step {
    int64_t t = 0;
    double grad_scale = 1.0;  // the loss scale backward runs with
    Batch batch;
    bool dense_gradient = false;                         // through the dense-gradient view
    std::map<std::string, GrowthSignal> growth_signals;  // what the view returned
    StepOutputs outputs;
    bool skipped = false;  // the optimizer step was skipped (by the loss scaler, or as non-finite)
    // Non-finite values (optim/finite_check.h): a flag per parameter the
    // optimizer updates and one for the dense gradients, read with the loss.
    NonfiniteFlag health;
    bool finite = true;              // the loss and every gradient
    int64_t first_nonfinite = -1;    // the first flag set (a parameter's index), or -1
    std::string clip_nonfinite;      // with grad_clip: the first parameter whose gradient's norm is not finite
    bool nonfinite_skipped = false;  // skipped under training.on_nonfinite: skip_step (masks too)
    double loss = 0.0;               // over every rank's examples
    double accuracy = 0.0;
    double lr = 0.0;
    std::optional<MaskUpdateStats> mask_stats;
    Clock::time_point start;  // begin_step's call
  };

  void prepare_graph();
  void report_graph_off();
  StepOutputs eager_forward_backward(const Tensor& inputs, const Tensor& targets);
  void measure_batch();
  void watch_for_nonfinite(bool gradients);
  void skip_nonfinite_step();
  std::string nonfinite_cause() const;
  std::string last_finite_checkpoint() const;
  void change_masks();
  void densify();
  void end_mask_method();  // no mask schedule, and no mask state in checkpoints
  void check_masks(const std::vector<std::string>& layers);
  void write_train_record(double elapsed, double samples_per_second);
  void write_checkpoint(int64_t step);
  void write_metrics(const JsonObject& record);
  [[noreturn]] void fail_output(const absl::Status& status) const;
  void fill_summary();

  TrainComponents& c_;
  Module& model_;
  Optimizer& optimizer_;
  MaskState* mask_state_;                   // the mask method's state, saved in checkpoints
  std::shared_ptr<ModelParameters> store_;  // what mask schedules and densify change
  std::unique_ptr<MaskSchedule> masks_;     // null: masks never change
  Communicator* comm_;
  int world_ = 1;
  bool lead_ = true;              // writes metrics, progress, checkpoints
  LossScaler* scaler_ = nullptr;  // enabled, or null
  NonfiniteGuard nonfinite_;      // what a non-finite step does
  DType dtype_ = DType::kF32;     // the model's (inputs are cast to it)
  std::optional<GradientSync> sync_;
  std::optional<GraphedStep> graph_;
  bool graph_off_reported_ = false;

  int64_t nb_ = 0;     // batches per epoch
  int64_t total_ = 0;  // the run's steps (schedules see them all)
  int64_t stop_ = 0;   // this invocation stops here
  ProgressReporter progress_;
  RunLock run_lock_;  // on the checkpoint directory, held by the writing rank
  RunStart run_;
  MetricsWriter metrics_;
  TrainingSummary summary_;

  Step step_;
  DenseGradientView dense_view_;
  std::shared_ptr<const std::vector<int64_t>> shard_;  // the order of shard_epoch_'s examples
  int64_t shard_epoch_ = -1;
  int64_t last_checkpoint_step_ = -1;

  std::map<std::string, int64_t> fallbacks_before_;
  Clock::time_point t_start_, t_window_;
  int64_t window_samples_ = 0;
  int64_t total_samples_ = 0;
  double exchange_bytes_ = 0.0, dense_exchange_bytes_ = 0.0;
  double exchange_hook_seconds_ = 0.0, exchange_end_seconds_ = 0.0;  // host time, ordinary steps
  int64_t exchange_steps_ = 0, dense_exchange_steps_ = 0;
};

}  // namespace coppice

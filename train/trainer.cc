#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "autograd/functions/elementwise.h"
#include "autograd/functions/nn.h"
#include "autograd/functions/shape.h"
#include "distributed/replica_sync.h"
#include "models/attention.h"
#include "optim/clip.h"
#include "optim/densify.h"
#include "sparse/route_choices.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/checked_math.h"
#include "tensor/dispatcher.h"
#include "tensor/error.h"
#include "tensor/ops.h"
#include "train/checkpoint.h"
#include "train/checkpoint_files.h"
#include "train/evaluate.h"
#include "train/mixed_precision.h"
#include "train/model_parameters.h"
#include "train/summary.h"

namespace coppice {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The weights GMP prunes: those the components name, else every sparse
// parameter of dim >= 2.
std::vector<std::string> gmp_layers_of(const TrainComponents& c) {
  std::vector<std::string> layers = c.gmp_layers;
  if (c.gmp != nullptr && layers.empty()) {
    for (const auto& [name, p] : c.model.named_parameters()) {
      if (p.value().is_sparse() && p.dim() >= 2) layers.push_back(name);
    }
  }
  return layers;
}

}  // namespace

Trainer::Trainer(TrainComponents& c)
    : c_(c),
      model_(c.model),
      optimizer_(c.optimizer),
      mask_state_(mask_state(c, 0)),
      comm_(c.comm),
      progress_(c.comm == nullptr || c.comm->rank() == 0 ? c.progress_out : nullptr, c.progress_interactive) {
  check_components(c);
  name_parameters(model_);
  world_ = comm_ != nullptr ? comm_->world_size() : 1;
  lead_ = comm_ == nullptr || comm_->rank() == 0;
  if (comm_ != nullptr) sync_.emplace(*comm_, c.grad_sync);

  nb_ = c.train.num_batches();
  total_ = total_training_steps(c);
  // The examples the run counts (total x batch x ranks) fit their counters.
  checked_mul(checked_mul(total_, c.train.options().batch_size, "run_training: steps * batch_size"), int64_t{world_},
              "run_training: steps * batch_size * world_size");
  stop_ = c.stop_at_step >= 0 ? std::min(total_, c.stop_at_step) : total_;
  summary_.total_steps = total_;
  summary_.world_size = world_;
  summary_.rank = comm_ != nullptr ? comm_->rank() : 0;

  // The schedule of mask changes (optim/mask_schedule.h): a mask change
  // replaces the parameter in the model and in the optimizer, which carries
  // its state over to the new pattern.
  store_ = std::make_shared<ModelParameters>(model_, optimizer_);
  if (c.mask_updater != nullptr) {
    masks_ = make_prune_and_regrow_schedule(*c.mask_updater, store_);
  } else if (c.gmp != nullptr) {
    masks_ = make_gmp_schedule(*c.gmp, gmp_layers_of(c), store_);
  } else if (c.sr_ste != nullptr) {
    // Forward sees each dense weight through its n:m projection.
    for (const std::string& name : c.sr_ste->layers()) model_.set_parameter_view(name, c.sr_ste->view(name));
    masks_ = make_sr_ste_schedule(*c.sr_ste, store_);
  }

  // One run per checkpoint directory, locked before anything there is read
  // or written.
  if (lead_ && !c.checkpoint_dir.empty()) {
    absl::StatusOr<RunLock> lock = RunLock::acquire(c.checkpoint_dir, "checkpoint.dir");
    if (!lock.ok()) fail("run_training: ", lock.status().message());
    run_lock_ = std::move(*lock);
  }
  run_ = start_run(c, nb_, total_, new_run_id(), progress_);
  run_lock_.set_run_id(run_.run_id);
  // Resumed past densify_step: the weights were made dense as the checkpoint was loaded.
  if (is_densified(c, run_.step)) end_mask_method();
  summary_.start_step = run_.step;
  if (lead_ && !c.checkpoint_dir.empty()) mark_run(c, run_, progress_);
  if (lead_ && !c.metrics_path.empty()) {
    // A resumed run drops the records after its step, then appends.
    if (run_.step > 0) {
      if (absl::Status st = truncate_metrics(c.metrics_path, run_.step); !st.ok()) fail("run_training: ", st.message());
    }
    if (absl::Status st = metrics_.open(c.metrics_path, /*append=*/run_.step > 0); !st.ok())
      fail("run_training: ", st.message());
  }

  model_.train();
  fallbacks_before_ = Dispatcher::instance().fallback_counts();
  t_start_ = Clock::now();
  t_window_ = t_start_;
  scaler_ = c.loss_scaler != nullptr && c.loss_scaler->enabled() ? c.loss_scaler : nullptr;
  nonfinite_ = NonfiniteGuard(c.nonfinite);
  dtype_ = model_dtype(model_);
  prepare_graph();
}

// What the key of a GraphedStep cannot see is declined up front: another
// device, a gradient exchange during backward, output sparsifiers whose
// decisions may depend on the step.
void Trainer::prepare_graph() {
  if (c_.cuda_graph) {
    graph_.emplace(c_.device);
    if (!c_.device.is_cuda()) {
      graph_->decline(str_cat("the model is on ", c_.device.to_string(), ", not a CUDA device"));
    }
    if (comm_ != nullptr) graph_->decline("data-parallel steps exchange gradients during the backward pass");
    if (c_.sr_ste != nullptr) graph_->decline("sr_ste projects its weights anew, on masks that change, every step");
    for (const auto& [name, m] : model_.named_modules()) {
      if (m->output_rule() != nullptr) {
        graph_->decline(str_cat("module '", name, "' sparsifies its output, which may depend on the step"));
      }
      if (m->type_name() == "MoE") {
        graph_->decline(str_cat("module '", name, "' routes tokens to experts, a grouping read on the host"));
      }
      const auto* attention = dynamic_cast<const MultiheadAttention*>(m);
      if (attention != nullptr && attention->pattern().kind == AttentionPattern::Kind::kRouted) {
        graph_->decline(str_cat("module '", name, "' routes attention blocks from scores read on the host"));
      }
    }
  }
  report_graph_off();
}

// Says once, when graphs are asked for, why they are off.
void Trainer::report_graph_off() {
  if (graph_off_reported_ || !graph_ || graph_->declined().empty()) return;
  progress_.message(str_cat("cuda_graph: off: ", graph_->declined()));
  graph_off_reported_ = true;
}

void Trainer::begin_step(int64_t t) {
  step_ = Step{};
  step_.t = t;
  step_.start = Clock::now();
  step_.grad_scale = scaler_ != nullptr ? scaler_->scale() : 1.0;
  // Each epoch's order is the loader's seeded one, drawn once per epoch.
  const int64_t epoch = t / nb_;
  if (epoch != shard_epoch_) {
    shard_ = std::make_shared<const std::vector<int64_t>>(c_.train.shard_indices(epoch));
    shard_epoch_ = epoch;
  }
  step_.batch = *DataLoader::Iterator(&c_.train, shard_, t % nb_);

  optimizer_.zero_grad();
  model_.zero_grad();
  model_.set_sparsity_step(static_cast<uint64_t>(t));
}

// Forward (loss in f32 on flattened logits) and backward of one batch.
StepOutputs Trainer::eager_forward_backward(const Tensor& inputs, const Tensor& targets) {
  const Variable l = logits_for_loss(model_(Variable(cast_inputs(inputs, dtype_))));
  auto [l2, t1] = flatten_for_loss(l, targets);
  const Variable loss_var = cross_entropy(l2, t1);
  // What is differentiated: the loss plus the model's auxiliary losses (a
  // mixture of experts' load balancing); the loss alone is reported.
  Variable objective = loss_var;
  for (const Variable& aux : model_.auxiliary_losses()) objective = add(objective, to_dtype(aux, loss_var.dtype()));
  (scaler_ != nullptr ? scaler_->scale_loss(objective) : objective).backward();
  return StepOutputs{loss_var.value(), l2.value(), t1};
}

void Trainer::forward_backward() {
  const int64_t t = step_.t;
  // Dense gradients on the steps that need them only.
  step_.dense_gradient = masks_ != nullptr && masks_->needs_dense_gradient(t);
  if (step_.dense_gradient) {
    summary_.dense_gradient_steps.push_back(t);
    // One rank ranks block-format weights by block scores formed from the
    // gradient's factors; ranks must agree on an average, which needs the
    // dense gradient itself.
    dense_view_.open(
        model_, masks_->layers(),
        [&](const std::string& name) {
          if (c_.on_dense_gradient) c_.on_dense_gradient(t, name);
        },
        /*probe_blocks=*/world_ == 1);
  }
  if (sync_) {
    NamedLeaves leaves;
    for (const auto& [name, p] : model_.named_parameters()) {
      if (p.requires_grad()) leaves.emplace_back(name, p);
    }
    sync_->begin(leaves);
  }
  const bool graphed = graph_.has_value() && !step_.dense_gradient && !sync_;
  const Batch& batch = step_.batch;
  step_.outputs = graphed ? graph_->run(model_, batch.inputs, batch.targets, step_.grad_scale,
                                        [this](const Tensor& inputs, const Tensor& targets) {
                                          return eager_forward_backward(inputs, targets);
                                        })
                          : eager_forward_backward(batch.inputs, batch.targets);
  if (graphed) report_graph_off();
}

void Trainer::synchronize() {
  if (sync_) {
    sync_->end();  // every leaf's gradient is now the average over ranks
    const double bytes = static_cast<double>(sync_->last_stats().bytes);
    if (step_.dense_gradient) {
      dense_exchange_bytes_ += bytes;
      ++dense_exchange_steps_;
    } else {
      exchange_bytes_ += bytes;
      exchange_hook_seconds_ += sync_->last_stats().hook_seconds;
      exchange_end_seconds_ += sync_->last_stats().end_seconds;
      ++exchange_steps_;
      summary_.last_exchange = sync_->last_stats();
    }
  }
  if (dense_view_.is_open()) step_.growth_signals = dense_view_.close(step_.grad_scale);
}

void Trainer::step() {
  // Runs before the optimizer step, only on steps that are taken (a loss
  // scaler skips those with inf/NaN gradients). The gradients carry the
  // loss scale: movement scores see them unscaled, clipping compares their
  // norm with grad_clip times the scale, and the optimizer divides it out.
  auto before_step = [&](double scale) {
    if (masks_ != nullptr) masks_->before_optimizer_step(scale);
    if (c_.grad_clip > 0.0)
      step_.clip_nonfinite = clip_grad_norm_checked(model_.parameters(), c_.grad_clip * scale).first_nonfinite;
  };
  // Whether the step is finite is known with the host read of its loss.
  // Where the update depends on it (a loss scaler, skip_step) that read comes
  // first; otherwise it stays after the update is queued, as it always was,
  // so that an ordinary step waits no longer: under stop a non-finite step
  // then ends the run before its mask update, records or checkpoint.
  const bool decide_first = scaler_ != nullptr || nonfinite_.decides_before_update();
  // Where the read comes after the update, no pass of its own looks at the
  // gradients and the step reads nothing to the host: with grad_clip, the
  // norm is taken on the device and each parameter whose gradient norm is
  // not finite has its flag set there; the optimizer's kernels multiply the
  // gradients by the clip factor as they read them, and a norm that is not
  // finite makes them leave every parameter and state as it was (the run
  // then stops at the read). Without, the optimizer checks each gradient as
  // its step reads it (the fused step kernels set the parameter's flag,
  // optim/optimizer.h).
  const bool checked_by_clip = !decide_first && c_.grad_clip > 0.0;
  const bool checked_in_step = !decide_first && !checked_by_clip;
  watch_for_nonfinite(/*gradients=*/decide_first);
  if (decide_first) {
    measure_batch();
    if (!step_.finite) skip_nonfinite_step();  // or stops the run
  }
  if (!step_.skipped) {
    if (scaler_ != nullptr) {
      scaler_->step(optimizer_, /*found_inf=*/false, before_step);
    } else if (checked_by_clip) {
      if (masks_ != nullptr) masks_->before_optimizer_step(1.0);
      // Slots in the optimizer's order, as watch_for_nonfinite made them.
      const DeviceClip clip =
          clip_grad_norm_on_device(optimizer_parameters(optimizer_), c_.grad_clip, 2.0, &step_.health);
      optimizer_.step(1.0, nullptr, clip.factor);
    } else {
      before_step(1.0);
      if (step_.clip_nonfinite.empty()) optimizer_.step(1.0, checked_in_step ? &step_.health : nullptr);
    }
  }
  if (c_.scheduler != nullptr) c_.scheduler->step();
  if (!decide_first) {
    measure_batch();
    if (!step_.finite) nonfinite_.on_nonfinite(step_.t, nonfinite_cause(), last_finite_checkpoint());  // stops
  }
  if (step_.finite) nonfinite_.on_finite();
  step_.lr = optimizer_.param_groups().empty() ? 0.0 : optimizer_.option(0, "lr");
}

// The step's health, folded on the device with no host read: a flag per
// parameter the optimizer updates (so that a failing step can name it) and
// one for the dense gradients a mask update will rank by (folded here, on
// the steps that have them). With `gradients`, each parameter's gradient is
// folded here, as backward and the exchange left it (before clipping);
// without, clipping's norm names it (grad_clip) or the optimizer's step
// folds it into the same slot as it reads it (Optimizer::step's `nonfinite`).
void Trainer::watch_for_nonfinite(bool gradients) {
  const std::vector<Variable> params = optimizer_parameters(optimizer_);
  const int64_t dense_slot = static_cast<int64_t>(params.size());
  step_.health = NonfiniteFlag(dense_slot + 1);
  if (gradients) {
    for (int64_t i = 0; i < dense_slot; ++i) step_.health.add(params[static_cast<size_t>(i)].grad(), i);
  }
  for (const auto& [name, s] : step_.growth_signals) step_.health.add(s.tensor(), dense_slot);
}

// A non-finite step whose update is still to come. Gradients that overflowed
// under an f16 loss scale while the loss is finite are the scaler's to skip
// (it backs off; GradScaler's semantics, not divergence); anything else is
// the guard's: skipped, or the run stops. Either way the step is skipped once
// and listed once among the summary's skipped steps.
void Trainer::skip_nonfinite_step() {
  if (scaler_ != nullptr && std::isfinite(step_.loss)) {
    scaler_->step(optimizer_, /*found_inf=*/true);
  } else {
    nonfinite_.on_nonfinite(step_.t, nonfinite_cause(), last_finite_checkpoint());
    step_.nonfinite_skipped = true;
  }
  step_.skipped = true;
  summary_.skipped_steps.push_back(step_.t);
}

// What was not finite, for the line that stops the run: the loss, else the
// first parameter (in the optimizer's order) whose gradient was not.
std::string Trainer::nonfinite_cause() const {
  if (!std::isfinite(step_.loss)) {
    return str_cat("the loss is ", std::isnan(step_.loss) ? "nan" : step_.loss > 0 ? "inf" : "-inf");
  }
  if (!step_.clip_nonfinite.empty()) return str_cat("the gradient of '", step_.clip_nonfinite, "' is not finite");
  const std::vector<Variable> params = optimizer_parameters(optimizer_);
  const int64_t i = step_.first_nonfinite;
  if (i >= 0 && i < static_cast<int64_t>(params.size())) {
    const std::string& name = params[static_cast<size_t>(i)].name();
    return str_cat("the gradient of '", name.empty() ? str_cat("parameter ", i) : name, "' is not finite");
  }
  for (const auto& [name, s] : step_.growth_signals) {
    if (!all_finite(s.tensor()))
      return str_cat("the ", growth_signal_kind_name(s.kind()), " of '", name, "' is not finite");
  }
  return "a gradient is not finite";
}

// Every checkpoint is finite (train/checkpoint.cc refuses to write one that
// is not), so a diverged run goes back to the last one written, or to the one
// it resumed from.
std::string Trainer::last_finite_checkpoint() const {
  if (!summary_.last_checkpoint.empty()) return summary_.last_checkpoint;
  if (!run_.resumed_from.empty()) return run_.resumed_from;
  return "none written";
}

// The batch's loss and accuracy over every rank's examples, and whether the
// step is finite, in one host read a step. On the device: [loss * scored,
// correct, scored, flagged, loss, the step's non-finite flags...] (f64; the
// counts are exact); with ranks the first four are summed in place by one
// all-reduce there, waited for with the communicator's deadline, before the
// read. It used to take three reads (the loss and flags, the predictions,
// the targets) and, with ranks, a host round trip of the four sums: each a
// wait that leaves the GPU idle (docs/benchmarks.md, issue 37).
void Trainer::measure_batch() {
  const Tensor& flags = step_.health.value();
  const Tensor loss = step_.outputs.loss.reshape({1}).to(DType::kF64);
  const Tensor counts = correct_and_scored(step_.outputs.logits, step_.outputs.targets).to(loss.device());
  const Tensor scored = counts.narrow(0, 1, 1);
  Tensor flagged = full({1}, step_.clip_nonfinite.empty() ? 0.0 : 1.0, loss.options());
  std::vector<Tensor> parts = {mul(loss, scored), counts, flagged, loss};
  if (flags.defined()) {
    const Tensor local = flags.to(DType::kF64).to(loss.device()).reshape({-1});
    parts[2] = add(flagged, gt(sum(ne(local, 0.0).to(DType::kF64)), 0.0).to(DType::kF64).reshape({1}));
    parts.push_back(local);
  }
  const Tensor all = cat(parts);  // [loss * scored, correct, scored, flagged, loss, flags...]
  if (comm_ != nullptr) comm_->all_reduce(all.narrow(0, 0, 4), ReduceOp::kSum).wait();
  const std::vector<double> read = all.to(Device::cpu()).to_vector<double>();
  step_.first_nonfinite = -1;
  for (size_t i = 5; i < read.size() && step_.first_nonfinite < 0; ++i) {
    if (read[i] != 0.0) step_.first_nonfinite = static_cast<int64_t>(i) - 5;
  }
  const double correct = read[1], n = read[2], flagged_ranks = read[3];
  const double loss_value = comm_ != nullptr ? (n > 0 ? read[0] / n : 0.0) : read[4];
  step_.loss = loss_value;
  step_.finite = std::isfinite(loss_value) && flagged_ranks == 0.0;
  step_.accuracy = n > 0 ? correct / n : 0.0;
}

// Masks change after the optimizer step, as the schedule says; every rank
// then holds the same patterns. After step densify_step - 1 the weights
// become dense.
void Trainer::update_sparsity() {
  change_masks();
  if (c_.densify_step > 0 && step_.t + 1 == c_.densify_step) densify();
}

void Trainer::change_masks() {
  // A step skipped as non-finite changes no mask either.
  if (masks_ == nullptr || step_.nonfinite_skipped || !masks_->changes_masks(step_.t, step_.skipped)) return;
  try {
    step_.mask_stats = masks_->update(step_.t, step_.growth_signals);
  } catch (const NonfiniteError& e) {
    // The schedule refused to rank inf or NaN scores (a weight that the
    // update made non-finite, say) before changing any mask: stop, or leave
    // this step's mask update out under skip_step.
    nonfinite_.on_nonfinite(step_.t, e.what(), last_finite_checkpoint());
    step_.nonfinite_skipped = true;
    return;
  }
  summary_.mask_updates.push_back(*step_.mask_stats);
  check_masks(masks_->layers());
  // The update's kernels finish here, not in the next step's time.
  coppice::synchronize(c_.device);
}

// Every sparse weight becomes dense, its values where they were and zeros
// elsewhere, with the optimizer's state carried over (optim/densify.h); by
// the step alone, a skipped step included, so that every checkpoint from
// densify_step on is dense, which is how a resumed run knows. It is
// recorded as a mask change that grew every unstored entry (merged with the
// step's own mask update, if any), and the mask method ends: dense weights
// have no mask to change.
void Trainer::densify() {
  const std::map<std::string, int64_t> gained = densify_parameters(*store_, sparse_parameter_names(model_));
  end_mask_method();
  const bool merged = step_.mask_stats.has_value();
  MaskUpdateStats& stats = merged ? *step_.mask_stats : step_.mask_stats.emplace();
  stats.step = step_.t;
  int64_t entries = 0;
  for (const auto& [name, n] : gained) {
    stats.dropped[name] += 0;  // named, as every changed layer is; nothing dropped
    stats.grown[name] += n;
    entries += n;
  }
  if (merged) {
    summary_.mask_updates.back() = stats;
  } else {
    summary_.mask_updates.push_back(stats);
  }
  progress_.message(str_cat("densify: after step ", step_.t + 1, " every sparse weight is dense (", gained.size(),
                            " weights, ", entries, " entries added at zero); training goes on dense"));
  coppice::synchronize(c_.device);
}

void Trainer::end_mask_method() {
  masks_.reset();
  mask_state_ = nullptr;
}

// After a mask change every rank must hold the same patterns.
void Trainer::check_masks(const std::vector<std::string>& layers) {
  if (comm_ == nullptr) return;
  std::map<std::string, Tensor> patterns;
  for (const std::string& name : layers)
    patterns[name] = c_.sr_ste != nullptr ? c_.sr_ste->projection(name).pattern() : model_.parameter(name).value();
  check_patterns_agree(*comm_, patterns, str_cat("run_training: mask update at step ", step_.t));
}

void Trainer::record() {
  // An ordinary step has waited for its kernels (measure_batch reads the
  // loss), an update step too (update_sparsity).
  const double step_s = seconds_since(step_.start);
  if (step_.mask_stats) {
    summary_.update_step_seconds += step_s;
  } else {
    summary_.ordinary_step_seconds += step_s;
    ++summary_.ordinary_steps;
  }
  if (c_.on_step_end) c_.on_step_end(step_.t);
  if (c_.keep_going && !c_.keep_going(step_.t + 1, step_.loss)) {
    stop_ = step_.t + 1;  // the loop ends here; its last records, checkpoint and summary say so
  }
  summary_.losses.push_back(step_.loss);
  summary_.accuracies.push_back(step_.accuracy);
  summary_.final_step = step_.t + 1;
  window_samples_ += step_.batch.size() * world_;
  total_samples_ += step_.batch.size() * world_;
}

// Metrics every log_every steps, on mask-update steps and at the end;
// progress every progress_every steps and at the end. Samples per second
// are over the window since the last report.
void Trainer::log() {
  const int64_t done = step_.t + 1;
  const bool log_now =
      metrics_.is_open() && ((c_.log_every > 0 && done % c_.log_every == 0) || step_.mask_stats || done == stop_);
  const bool progress_now = (c_.progress_every > 0 && done % c_.progress_every == 0) || done == stop_;
  if (!log_now && !progress_now) return;
  const double window_s = seconds_since(t_window_);
  const double sps = window_s > 0 ? static_cast<double>(window_samples_) / window_s : 0.0;
  const double elapsed = seconds_since(t_start_);
  if (log_now) write_train_record(elapsed, sps);
  if (progress_now) {
    const int64_t run = done - run_.step;
    ProgressLine pl;
    pl.epoch = step_.t / nb_;
    pl.step = done;
    pl.total = total_;
    pl.loss = step_.loss;
    pl.accuracy = step_.accuracy;
    pl.samples_per_second = sps;
    pl.eta_seconds = run > 0 ? elapsed / static_cast<double>(run) * static_cast<double>(stop_ - done) : -1.0;
    progress_.report(pl);
  }
  t_window_ = Clock::now();
  window_samples_ = 0;
}

// One "train" record of the metrics file (train/metrics.h).
void Trainer::write_train_record(double elapsed, double samples_per_second) {
  JsonObject rec;
  rec.add("kind", "train").add("step", step_.t + 1).add("epoch", step_.t / nb_).add("loss", step_.loss);
  rec.add("accuracy", step_.accuracy).add("lr", step_.lr).add("density", layer_densities(model_));
  if (step_.mask_stats) {
    JsonObject mu;
    mu.add("dropped", step_.mask_stats->dropped).add("grown", step_.mask_stats->grown);
    if (!step_.mask_stats->itop_rate.empty()) mu.add("itop_rate", step_.mask_stats->itop_rate);
    rec.add("mask_update", mu);
  }
  rec.add("time_s", elapsed).add("samples_per_s", samples_per_second);
  const int64_t peak = peak_cpu_memory_bytes();
  if (peak >= 0) rec.add("peak_memory_bytes", peak);
  write_metrics(rec);
}

// Every eval_every steps, or at the end of every epoch (eval_every 0), on
// the validation split, else the test split, else nothing.
void Trainer::evaluate() {
  const int64_t done = step_.t + 1;
  if (!((c_.eval_every > 0 && done % c_.eval_every == 0) || (c_.eval_every == 0 && done % nb_ == 0))) return;
  const DataLoader* loader = c_.validation ? &*c_.validation : (c_.test ? &*c_.test : nullptr);
  if (loader == nullptr) return;
  const EvalResult r = coppice::evaluate(model_, *loader, c_.eval_max_batches, comm_);
  summary_.validation = r;
  JsonObject rec;
  rec.add("kind", "eval").add("split", c_.validation ? "validation" : "test").add("step", done);
  rec.add("loss", r.loss).add("perplexity", std::exp(r.loss)).add("accuracy", r.accuracy).add("examples", r.examples);
  write_metrics(rec);
  progress_.message(str_cat("eval (", c_.validation ? "validation" : "test", ") at step ", done, ": loss ",
                            json_number(r.loss), " (perplexity ", json_number(std::exp(r.loss)), ") accuracy ",
                            json_number(r.accuracy)));
}

void Trainer::checkpoint() {
  const int64_t done = step_.t + 1;
  if (c_.checkpoint_dir.empty() || c_.checkpoint_every <= 0 || done % c_.checkpoint_every != 0) return;
  write_checkpoint(done);
  last_checkpoint_step_ = done;
}

// Rank 0 alone writes; every rank's state is the same.
void Trainer::write_checkpoint(int64_t step) {
  if (!lead_) return;
  auto path = save_checkpoint(c_.checkpoint_dir, model_, optimizer_, mask_state_, trainer_state(c_, nb_, run_, step),
                              c_.keep_last);
  if (!path.ok()) fail("run_training: ", path.status().message());
  summary_.last_checkpoint = *path;
}

// A record that cannot be written (a full disk, a failed flush) ends the
// run: a metrics file missing records must not pass for a finished run.
void Trainer::write_metrics(const JsonObject& record) {
  if (absl::Status st = metrics_.write(record); !st.ok()) fail_output(st);
}

// Where the run can go on from is named on the line that ends it (every
// checkpoint is finite, so the last one written is the last finite one).
void Trainer::fail_output(const absl::Status& status) const {
  fail("run_training: ", status.message(), "; last checkpoint: ", last_finite_checkpoint());
}

void Trainer::end_step() { step_ = Step{}; }

TrainingSummary Trainer::finish() {
  // A run that ends on steps skipped as non-finite diverged: it fails here,
  // before a final checkpoint or summary could pass it for finished.
  nonfinite_.on_end(std::max(run_.step, stop_), last_finite_checkpoint());
  progress_.finish();
  const int64_t final_step = std::max(run_.step, stop_);
  summary_.final_step = final_step;
  // The end of the run (or of an interrupted part of it) has a checkpoint,
  // unless the last step wrote one already.
  if (!c_.checkpoint_dir.empty() && last_checkpoint_step_ != final_step && final_step > run_.step)
    write_checkpoint(final_step);
  if (c_.test) summary_.test = coppice::evaluate(model_, *c_.test, 0, comm_);
  fill_summary();
  if (metrics_.is_open()) {
    write_metrics(JsonObject(summary_json(summary_)));
    if (absl::Status st = metrics_.close(); !st.ok()) fail_output(st);
  }
  if (c_.progress_out != nullptr && c_.summary_on_progress) {
    std::string text = format_summary(summary_);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    progress_.message(text);
  }
  return summary_;
}

// The run's totals: loss scale, graphs, time, throughput, the model, dense
// fallbacks during the run, memory, gradient exchange.
void Trainer::fill_summary() {
  if (scaler_ != nullptr) summary_.final_loss_scale = scaler_->scale();
  if (graph_) {
    summary_.cuda_graph = true;
    summary_.graph_captures = graph_->captures();
    summary_.graph_replays = graph_->replays();
    summary_.graph_declined = graph_->declined();
  }
  summary_.seconds = seconds_since(t_start_);
  summary_.samples_per_second = summary_.seconds > 0 ? static_cast<double>(total_samples_) / summary_.seconds : 0.0;
  summary_.model = model_stats(model_);
  for (const auto& [op, count] : Dispatcher::instance().fallback_counts()) {
    auto it = fallbacks_before_.find(op);
    const int64_t during = count - (it == fallbacks_before_.end() ? 0 : it->second);
    if (during > 0) summary_.fallback_counts[op] = during;
  }
  if (std::string routes = route_choices_json(); routes != "[]") summary_.route_choices = std::move(routes);
  summary_.peak_memory_bytes = peak_cpu_memory_bytes();
  if (exchange_steps_ > 0) {
    const double steps = static_cast<double>(exchange_steps_);
    summary_.exchange_bytes_per_step = exchange_bytes_ / steps;
    summary_.exchange_hook_ms_per_step = 1e3 * exchange_hook_seconds_ / steps;
    summary_.exchange_end_ms_per_step = 1e3 * exchange_end_seconds_ / steps;
  }
  if (dense_exchange_steps_ > 0)
    summary_.exchange_bytes_per_dense_step = dense_exchange_bytes_ / static_cast<double>(dense_exchange_steps_);
}

}  // namespace coppice

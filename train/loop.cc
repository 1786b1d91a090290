#include "train/loop.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "autograd/autograd.h"
#include "autograd/functions/nn.h"
#include "autograd/functions/reduce.h"
#include "autograd/functions/shape.h"
#include "autograd/functions/sparse.h"
#include "autograd/no_grad.h"
#include "autograd/sparse_grad.h"
#include "distributed/replica_sync.h"
#include "optim/clip.h"
#include "sparse/sparse_impl.h"
#include "tensor/checked_math.h"
#include "tensor/dispatcher.h"
#include "tensor/error.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "train/checkpoint.h"
#include "train/checkpoint_files.h"
#include "train/graph_step.h"
#include "train/mixed_precision.h"
#include "train/progress.h"

namespace coppice {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Logits [..., C] as [N, C], targets [...] as [N].
std::pair<Variable, Tensor> flatten_for_loss(const Variable& logits, const Tensor& targets) {
  if (logits.dim() <= 2) return {logits, targets};
  const int64_t c = logits.size(logits.dim() - 1);
  return {reshape(logits, {-1, c}), targets.reshape({-1})};
}

int64_t count_correct(const Variable& logits2d, const Tensor& targets) {
  const std::vector<int64_t> pred = argmax(logits2d, 1).to_vector<int64_t>();
  const std::vector<int64_t> tgt = targets.to_vector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < pred.size() && i < tgt.size(); ++i) correct += pred[i] == tgt[i] ? 1 : 0;
  return correct;
}

// The optimizer's momentum-like state of `param` as a dense tensor of its
// shape (zeros before the first step).
Tensor dense_momentum(const Optimizer& optimizer, const Variable& param) {
  const ParamState* st = optimizer.state(param);
  const Tensor* m = nullptr;
  if (st != nullptr) {
    for (const char* key : {"momentum_buffer", "exp_avg"}) {
      auto it = st->tensors.find(key);
      if (it != st->tensors.end()) {
        m = &it->second;
        break;
      }
    }
  }
  if (m == nullptr) return zeros(param.shape(), {param.dtype(), param.device()});
  return param.value().is_dense() ? *m : to_dense(with_values(param.value(), *m));
}

// The loss scaler's state rides in the checkpoint's trainer extras; %.17g
// keeps the scale exact.
constexpr const char* kLossScaleKey = "loss_scale";
constexpr const char* kLossScaleTrackerKey = "loss_scale_growth_tracker";

void save_loss_scaler(const LossScaler& scaler, TrainerState& s) {
  if (!scaler.enabled()) return;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", scaler.scale());
  s.extra[kLossScaleKey] = buf;
  s.extra[kLossScaleTrackerKey] = std::to_string(scaler.growth_tracker());
}

void restore_loss_scaler(LossScaler& scaler, const TrainerState& s, const std::string& path) {
  if (!scaler.enabled()) return;
  auto scale = s.extra.find(kLossScaleKey);
  auto tracker = s.extra.find(kLossScaleTrackerKey);
  // A checkpoint of a run without scaling: start from the initial scale.
  if (scale == s.extra.end() || tracker == s.extra.end()) return;
  char* end = nullptr;
  const double v = std::strtod(scale->second.c_str(), &end);
  const bool scale_ok = !scale->second.empty() && end == scale->second.c_str() + scale->second.size() &&
                        std::isfinite(v) && v > 0.0;
  end = nullptr;
  errno = 0;
  const long long t = std::strtoll(tracker->second.c_str(), &end, 10);
  const bool tracker_ok = !tracker->second.empty() && errno == 0 &&
                          end == tracker->second.c_str() + tracker->second.size() && t >= 0;
  COPPICE_CHECK(scale_ok && tracker_ok, "run_training: resume: checkpoint '", path, "' has a bad loss scale '",
                scale->second, "' (a finite number > 0) or growth tracker '", tracker->second, "' (an integer >= 0)");
  scaler.restore(v, t);
}

void check_components(const TrainComponents& c) {
  COPPICE_CHECK((c.steps > 0) != (c.epochs > 0), "run_training: exactly one of steps (", c.steps, ") and epochs (",
                c.epochs, ") must be positive");
  COPPICE_CHECK(c.mask_updater == nullptr || c.gmp == nullptr,
                "run_training: a mask updater and a GMP pruner cannot both drive the masks");
  COPPICE_CHECK(c.train.num_batches() > 0, "run_training: the train loader yields no batch (", c.train.shard_size(),
                " examples, batch size ", c.train.options().batch_size, ")");
  COPPICE_CHECK(c.grad_clip >= 0.0, "run_training: grad_clip must be >= 0, got ", c.grad_clip);
  COPPICE_CHECK(c.log_every >= 0 && c.eval_every >= 0 && c.checkpoint_every >= 0 && c.keep_last >= 0,
                "run_training: log_every, eval_every, checkpoint_every and keep_last must be >= 0");
}

// Loads the checkpoint that c.resume names into the components, after
// reading and verifying all of it and checking it against this run (its job
// fingerprint, loader seed and position); returns the step to start from and
// sets the run id (continued, or new for a fork) and resumed_from.
int64_t resume(TrainComponents& c, int64_t nb, int64_t total, std::string& run_id, std::string& resumed_from,
               ProgressReporter& progress) {
  auto resolved = resolve_checkpoint(c.resume);
  if (!resolved.ok()) fail("run_training: resume: ", resolved.status().message());
  const std::string path = resolved->path;
  auto file = read_checkpoint(path);
  if (!file.ok()) fail("run_training: resume: ", file.status().message());
  const TrainerState& state = file->state;

  bool seed_changed = false;
  if (!c.fingerprint.empty()) {
    std::vector<FingerprintChange> structural, refused, accepted;
    for (FingerprintChange& change : fingerprint_changes(state.fingerprint, c.fingerprint)) {
      if (is_structural_key(change.key)) {
        structural.push_back(std::move(change));
      } else if (change_allowed(change.key, c.allowed_changes)) {
        accepted.push_back(std::move(change));
      } else {
        refused.push_back(std::move(change));
      }
    }
    if (!structural.empty()) {
      fail("run_training: resume: checkpoint '", path, "' holds the state of another job, which this job cannot load: ",
           describe_changes(structural), " (these shape the saved tensors; resume with the job that wrote it, or start "
           "a new run)");
    }
    if (!refused.empty()) {
      std::vector<std::string> keys;
      for (const FingerprintChange& change : refused) keys.push_back(change.key);
      fail("run_training: resume: checkpoint '", path, "' was written by a job with other settings: ",
           describe_changes(refused), "; to resume with these changes on purpose, pass --allow-changes ",
           str_join(keys, ","), " (or list them in checkpoint.allow_changes)");
    }
    if (!accepted.empty()) progress.message(str_cat("resume: changes accepted: ", describe_changes(accepted)));
    for (const FingerprintChange& change : accepted) seed_changed = seed_changed || change.key == "data.shuffle_seed";
  }
  COPPICE_CHECK(seed_changed || state.data_seed == c.train.options().seed, "run_training: resume: checkpoint '", path,
                "' was written with train loader seed ", state.data_seed, ", the loader has ", c.train.options().seed);
  COPPICE_CHECK(state.step <= total, "run_training: resume: checkpoint '", path, "' is at step ", state.step,
                ", past the run's ", total, " steps");
  COPPICE_CHECK(state.epoch == state.step / nb && state.batch == state.step % nb, "run_training: resume: checkpoint '",
                path, "' stands at epoch ", state.epoch, " batch ", state.batch, " but the train loader has ", nb,
                " batches per epoch (step ", state.step, ")");
  COPPICE_CHECK(c.scheduler == nullptr || state.lr_step >= 0, "run_training: resume: checkpoint '", path,
                "' has no LR scheduler position but a scheduler was given");
  if (c.loss_scaler != nullptr) restore_loss_scaler(*c.loss_scaler, state, path);

  if (absl::Status st = apply_checkpoint(*file, c.model, c.optimizer, c.mask_updater,
                                         /*restore_hyperparameters=*/c.fingerprint.empty());
      !st.ok()) {
    fail("run_training: resume: ", st.message());
  }
  manual_seed(state.rng_seed);
  default_generator().set_offset(state.rng_offset);
  if (c.scheduler != nullptr) c.scheduler->set_step(state.lr_step);

  if (!state.run_id.empty() && is_newest_of_its_run(path, state.run_id)) {
    run_id = state.run_id;
  } else if (!state.run_id.empty()) {
    progress.message(str_cat("resume: '", path, "' is not the newest checkpoint of run ", state.run_id,
                             "; continuing from it as a new run ", run_id));
  }
  resumed_from = path;
  progress.message(str_cat("resume: from step ", state.step, " of '", path, "'",
                           resolved->why.empty() ? std::string() : str_cat(" (", resolved->why, ")")));
  if (c.comm != nullptr && c.grad_sync.topk_fraction > 0.0) {
    progress.message("resume: the top-k residuals of distributed.topk_fraction are not checkpointed; they restart at "
                     "zero");
  }
  return state.step;
}

}  // namespace

int64_t total_training_steps(const TrainComponents& c) {
  if (c.steps > 0) return c.steps;
  const int64_t nb = c.train.num_batches();
  return checked_mul(c.epochs, nb, [&] { return str_cat("run_training: ", c.epochs, " epochs of ", nb, " steps"); });
}

EvalResult evaluate(Module& model, const DataLoader& loader, int64_t max_batches, Communicator* comm) {
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  EvalResult r;
  double loss_sum = 0.0;
  int64_t correct = 0;
  const int64_t batches = max_batches > 0 ? std::min(max_batches, loader.num_batches()) : loader.num_batches();
  const int64_t first = comm != nullptr ? comm->rank() : 0;
  const int64_t stride = comm != nullptr ? comm->world_size() : 1;
  auto order = std::make_shared<const std::vector<int64_t>>(loader.shard_indices(0));
  const DType dtype = model_dtype(model);
  for (int64_t i = first; i < batches; i += stride) {
    const Batch b = *DataLoader::Iterator(&loader, order, i);
    const Variable logits = logits_for_loss(model(Variable(cast_inputs(b.inputs, dtype))));
    auto [l2, t1] = flatten_for_loss(logits, b.targets);
    const int64_t n = t1.numel();
    loss_sum += cross_entropy(l2, t1).item() * static_cast<double>(n);
    correct += count_correct(l2, t1);
    r.examples += n;
  }
  model.train(was_training);
  if (comm != nullptr) {
    const std::vector<double> sums =
        all_reduce_scalars(*comm, {loss_sum, static_cast<double>(correct), static_cast<double>(r.examples)});
    loss_sum = sums[0];
    correct = static_cast<int64_t>(sums[1]);
    r.examples = static_cast<int64_t>(sums[2]);
  }
  if (r.examples > 0) {
    r.loss = loss_sum / static_cast<double>(r.examples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.examples);
  }
  return r;
}

void replicate_parameters(Module& model, Communicator& comm) {
  NoGradGuard no_grad;
  for (const auto& [name, p] : model.named_parameters()) {
    const Tensor root = broadcast_any(comm, p.value(), 0, name);
    if (!root.is_same(p.value())) model.set_parameter(name, Variable(root, p.requires_grad(), name));
  }
}

TrainingSummary run_training(TrainComponents& c) {
  check_components(c);
  Module& model = c.model;
  Optimizer& optimizer = c.optimizer;
  MaskUpdater* updater = c.mask_updater;
  name_parameters(model);
  Communicator* comm = c.comm;
  const int world = comm != nullptr ? comm->world_size() : 1;
  const bool lead = comm == nullptr || comm->rank() == 0;  // writes metrics, progress, checkpoints
  std::optional<GradientSync> sync;
  if (comm != nullptr) sync.emplace(*comm, c.grad_sync);

  const int64_t nb = c.train.num_batches();
  const int64_t total = total_training_steps(c);
  // The examples the run counts (total x batch x ranks) fit their counters.
  checked_mul(checked_mul(total, c.train.options().batch_size, "run_training: steps * batch_size"), int64_t{world},
              "run_training: steps * batch_size * world_size");
  const int64_t end = c.stop_at_step >= 0 ? std::min(total, c.stop_at_step) : total;

  TrainingSummary summary;
  summary.total_steps = total;
  summary.world_size = world;
  summary.rank = comm != nullptr ? comm->rank() : 0;

  if (updater != nullptr) {
    updater->set_state_remap([&model, &optimizer](const std::string& name, const Tensor& new_param,
                                                  const Tensor& keep_from) {
      const Variable old = model.parameter(name);
      model.set_parameter(name, optimizer.replace_value(old, new_param, keep_from));
    });
  }
  std::vector<std::string> gmp_layers = c.gmp_layers;
  if (c.gmp != nullptr && gmp_layers.empty()) {
    for (const auto& [name, p] : model.named_parameters()) {
      if (p.value().is_sparse() && p.dim() >= 2) gmp_layers.push_back(name);
    }
  }

  ProgressReporter progress(lead ? c.progress_out : nullptr, c.progress_interactive);
  int64_t start = 0;
  std::string run_id = new_run_id();
  std::string resumed_from;
  if (!c.resume.empty()) start = resume(c, nb, total, run_id, resumed_from, progress);
  if (c.resume.empty()) manual_seed(c.seed);  // dropout and other draws of the default generator
  summary.start_step = start;
  if (lead && !c.checkpoint_dir.empty()) {
    const RunMarker marker{run_id, resumed_from, static_cast<int64_t>(std::time(nullptr))};
    if (absl::Status st = write_run_marker(c.checkpoint_dir, marker); !st.ok()) fail("run_training: ", st.message());
    const std::string others = other_runs_note(c.checkpoint_dir, run_id);
    if (!others.empty()) {
      progress.message(str_cat("checkpoint.dir '", c.checkpoint_dir, "' also holds ", others,
                               "; they are kept, and this run (", run_id, ") writes and prunes only its own"));
    }
  }

  MetricsWriter metrics;
  if (lead && !c.metrics_path.empty()) {
    if (start > 0) {
      if (absl::Status st = truncate_metrics(c.metrics_path, start); !st.ok()) fail("run_training: ", st.message());
    }
    if (absl::Status st = metrics.open(c.metrics_path, /*append=*/start > 0); !st.ok()) fail("run_training: ", st.message());
  }

  auto trainer_state = [&](int64_t step) {
    TrainerState s;
    s.step = step;
    s.epoch = step / nb;
    s.batch = step % nb;
    s.rng_seed = default_generator().seed();
    s.rng_offset = default_generator().offset();
    s.lr_step = c.scheduler != nullptr ? c.scheduler->current_step() : -1;
    s.data_seed = c.train.options().seed;
    s.run_id = run_id;
    s.resumed_from = resumed_from;
    s.fingerprint = c.fingerprint;
    if (c.loss_scaler != nullptr) save_loss_scaler(*c.loss_scaler, s);
    return s;
  };
  auto checkpoint = [&](int64_t step) {
    if (!lead) return;
    auto path = save_checkpoint(c.checkpoint_dir, model, optimizer, updater, trainer_state(step), c.keep_last);
    if (!path.ok()) fail("run_training: ", path.status().message());
    summary.last_checkpoint = *path;
  };
  auto run_eval = [&](int64_t step) {
    const DataLoader* loader = c.validation ? &*c.validation : (c.test ? &*c.test : nullptr);
    if (loader == nullptr) return;
    const EvalResult r = evaluate(model, *loader, c.eval_max_batches, comm);
    summary.validation = r;
    JsonObject rec;
    rec.add("kind", "eval").add("split", c.validation ? "validation" : "test").add("step", step);
    rec.add("loss", r.loss).add("accuracy", r.accuracy).add("examples", r.examples);
    (void)metrics.write(rec);
    progress.message(str_cat("eval (", c.validation ? "validation" : "test", ") at step ", step, ": loss ",
                             json_number(r.loss), " accuracy ", json_number(r.accuracy)));
  };

  model.train();
  const std::map<std::string, int64_t> fallbacks_before = Dispatcher::instance().fallback_counts();
  const Clock::time_point t_start = Clock::now();
  Clock::time_point t_window = t_start;
  int64_t window_samples = 0;
  int64_t total_samples = 0;
  std::shared_ptr<const std::vector<int64_t>> shard;
  int64_t shard_epoch = -1;
  int64_t last_checkpoint_step = -1;
  double exchange_bytes = 0.0, dense_exchange_bytes = 0.0;
  int64_t exchange_steps = 0, dense_exchange_steps = 0;
  // After a mask change every rank must hold the same patterns.
  auto check_masks = [&](int64_t step, const std::vector<std::string>& layers) {
    if (comm == nullptr) return;
    std::map<std::string, Tensor> patterns;
    for (const std::string& name : layers) patterns[name] = model.parameter(name).value();
    check_patterns_agree(*comm, patterns, str_cat("run_training: mask update at step ", step));
  };

  LossScaler* scaler = c.loss_scaler != nullptr && c.loss_scaler->enabled() ? c.loss_scaler : nullptr;
  const DType dtype = model_dtype(model);
  std::optional<GraphedStep> graph;
  if (c.cuda_graph) {
    graph.emplace(c.device);
    if (!c.device.is_cuda()) graph->decline(str_cat("the model is on ", c.device.to_string(), ", not a CUDA device"));
    if (comm != nullptr) graph->decline("data-parallel steps exchange gradients during the backward pass");
    for (const auto& [name, m] : model.named_modules()) {
      if (m->output_rule() != nullptr) {
        graph->decline(str_cat("module '", name, "' sparsifies its output, which may depend on the step"));
      }
    }
  }
  bool graph_off_reported = false;
  auto report_graph_off = [&] {
    if (graph_off_reported || !graph || graph->declined().empty()) return;
    progress.message(str_cat("cuda_graph: off: ", graph->declined()));
    graph_off_reported = true;
  };
  report_graph_off();
  // Forward (loss in f32 on flattened logits) and backward of one batch.
  auto forward_backward = [&](const Tensor& inputs, const Tensor& targets) {
    const Variable l = logits_for_loss(model(Variable(cast_inputs(inputs, dtype))));
    auto [l2, t1] = flatten_for_loss(l, targets);
    const Variable loss_var = cross_entropy(l2, t1);
    (scaler != nullptr ? scaler->scale_loss(loss_var) : loss_var).backward();
    return StepOutputs{loss_var.value(), l2.value(), t1};
  };
  for (int64_t t = start; t < end; ++t) {
    const double grad_scale = scaler != nullptr ? scaler->scale() : 1.0;
    const int64_t epoch = t / nb;
    const int64_t index = t % nb;
    if (epoch != shard_epoch) {
      shard = std::make_shared<const std::vector<int64_t>>(c.train.shard_indices(epoch));
      shard_epoch = epoch;
    }
    const Batch batch = *DataLoader::Iterator(&c.train, shard, index);

    optimizer.zero_grad();
    model.zero_grad();
    model.set_sparsity_step(static_cast<uint64_t>(t));

    // Dense gradients on the steps that need them only.
    const bool dense_step = updater != nullptr && updater->needs_dense_gradient(t);
    struct Swapped {
      std::string name;
      Variable sparse;
      Variable dense;
    };
    std::vector<Swapped> swapped;
    std::map<std::string, Tensor> dense_grads;
    if (dense_step) {
      summary.dense_gradient_steps.push_back(t);
      for (const std::string& name : updater->layers()) {
        const Variable w = model.parameter(name);
        if (!w.value().is_sparse()) continue;
        Variable wd(to_dense(w.value()), true, name);
        model.set_parameter(name, wd);
        swapped.push_back({name, w, wd});
        if (c.on_dense_gradient) c.on_dense_gradient(t, name);
      }
    }

    Variable logits;
    Variable loss;
    Tensor flat_targets;
    try {
      if (sync) {
        NamedLeaves leaves;
        for (const auto& [name, p] : model.named_parameters()) {
          if (p.requires_grad()) leaves.emplace_back(name, p);
        }
        sync->begin(leaves);
      }
      const bool graphed = graph.has_value() && !dense_step && !sync;
      const StepOutputs out = graphed ? graph->run(model, batch.inputs, batch.targets, grad_scale, forward_backward)
                                      : forward_backward(batch.inputs, batch.targets);
      if (graphed) report_graph_off();
      logits = Variable(out.logits);
      loss = Variable(out.loss);
      flat_targets = out.targets;
      if (sync) {
        sync->end();  // every leaf's gradient is now the average over ranks
        const double bytes = static_cast<double>(sync->last_stats().bytes);
        if (dense_step) {
          dense_exchange_bytes += bytes;
          ++dense_exchange_steps;
        } else {
          exchange_bytes += bytes;
          ++exchange_steps;
          summary.last_exchange = sync->last_stats();
        }
      }
    } catch (...) {
      for (const Swapped& s : swapped) model.set_parameter(s.name, s.sparse);
      throw;
    }
    for (const Swapped& s : swapped) {
      model.set_parameter(s.name, s.sparse);
      const Tensor& g = s.dense.grad();
      // The updater ranks the dense gradient: unscaled, and in f32 for 16-bit weights.
      const DType score_dtype = optimizer_state_dtype(s.dense.dtype());
      const Tensor dense_g = g.defined() ? mul(g.to(score_dtype), 1.0 / grad_scale)
                                         : zeros(s.dense.shape(), {score_dtype, s.dense.device()});
      dense_grads[s.name] = dense_g;
      if (g.defined()) s.sparse.set_grad(project_grad(g, s.sparse.value(), "run_training"));
    }

    // Runs before the optimizer step, only on steps that are taken (a loss
    // scaler skips those with inf/NaN gradients). The gradients carry the
    // loss scale: movement scores see them unscaled, clipping compares their
    // norm with grad_clip times the scale, and the optimizer divides it out.
    auto before_step = [&](double scale) {
      if (updater != nullptr && updater->config().prune == PruneCriterion::kMovement) {
        for (const std::string& name : updater->layers()) {
          const Variable& w = model.parameter(name);
          if (w.grad().defined()) updater->accumulate_movement(name, w.value(), unscale_gradient(w.grad(), scale));
        }
      }
      if (c.grad_clip > 0.0) clip_grad_norm(model.parameters(), c.grad_clip * scale);
    };
    bool step_skipped = false;
    if (scaler != nullptr) {
      step_skipped = !scaler->step(optimizer, before_step);
      if (step_skipped) summary.skipped_steps.push_back(t);
    } else {
      before_step(1.0);
      optimizer.step();
    }
    if (c.scheduler != nullptr) c.scheduler->step();

    // Over every rank's examples.
    double loss_value = loss.item();
    double correct = static_cast<double>(count_correct(logits, flat_targets));
    double n = static_cast<double>(flat_targets.numel());
    if (comm != nullptr) {
      const std::vector<double> sums = all_reduce_scalars(*comm, {loss_value * n, correct, n});
      loss_value = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
      correct = sums[1];
      n = sums[2];
    }
    const double accuracy = n > 0 ? correct / n : 0.0;
    const double lr = optimizer.param_groups().empty() ? 0.0 : optimizer.option(0, "lr");

    // Mask changes after the step. A step the loss scaler skipped has
    // inf/NaN gradients, which would steer growth: its update is left out
    // (the same on every rank: the check reads the all-reduced gradients).
    std::optional<MaskUpdateStats> mask_stats;
    if (updater != nullptr && updater->is_update_step(t) && !step_skipped) {
      const bool need_momentum = updater->needs_momentum(t);
      std::map<std::string, LayerInputs> inputs;
      for (const std::string& name : updater->layers()) {
        const Variable& w = model.parameter(name);
        LayerInputs in;
        in.param = w.value();
        auto it = dense_grads.find(name);
        if (it != dense_grads.end()) in.dense_gradient = it->second;
        if (need_momentum) in.momentum = dense_momentum(optimizer, w);
        inputs[name] = in;
      }
      const MaskUpdateResult r = updater->update(t, inputs);
      MaskUpdateStats ms;
      ms.step = t;
      for (const LayerUpdate& l : r.layers) {
        ms.dropped[l.name] = l.dropped;
        ms.grown[l.name] = l.grown;
        ms.itop_rate[l.name] = l.itop_rate;
      }
      mask_stats = ms;
      summary.mask_updates.push_back(ms);
      check_masks(t, updater->layers());
    }
    if (c.gmp != nullptr && c.gmp->is_prune_step(t)) {
      MaskUpdateStats ms;
      ms.step = t;
      for (const std::string& name : gmp_layers) {
        const Variable w = model.parameter(name);
        const MaskChange change = c.gmp->prune(t, w.value());
        ms.dropped[name] = static_cast<int64_t>(change.dropped.size());
        ms.grown[name] = 0;
        if (!change.keep_from.defined()) continue;
        model.set_parameter(name, optimizer.replace_value(w, change.param, change.keep_from));
      }
      mask_stats = ms;
      summary.mask_updates.push_back(ms);
      check_masks(t, gmp_layers);
    }

    if (c.on_step_end) c.on_step_end(t);
    const int64_t done = t + 1;
    summary.losses.push_back(loss_value);
    summary.accuracies.push_back(accuracy);
    summary.final_step = done;
    window_samples += batch.size() * world;
    total_samples += batch.size() * world;

    const bool log_now = metrics.is_open() && ((c.log_every > 0 && done % c.log_every == 0) || mask_stats ||
                                               done == end);
    const bool progress_now = (c.progress_every > 0 && done % c.progress_every == 0) || done == end;
    if (log_now || progress_now) {
      const double window_s = seconds_since(t_window);
      const double sps = window_s > 0 ? static_cast<double>(window_samples) / window_s : 0.0;
      const double elapsed = seconds_since(t_start);
      const int64_t run = done - start;
      const double eta = run > 0 ? elapsed / static_cast<double>(run) * static_cast<double>(end - done) : -1.0;
      if (log_now) {
        JsonObject rec;
        rec.add("kind", "train").add("step", done).add("epoch", epoch).add("loss", loss_value);
        rec.add("accuracy", accuracy).add("lr", lr).add("density", layer_densities(model));
        if (mask_stats) {
          JsonObject mu;
          mu.add("dropped", mask_stats->dropped).add("grown", mask_stats->grown);
          if (!mask_stats->itop_rate.empty()) mu.add("itop_rate", mask_stats->itop_rate);
          rec.add("mask_update", mu);
        }
        rec.add("time_s", elapsed).add("samples_per_s", sps);
        const int64_t peak = peak_cpu_memory_bytes();
        if (peak >= 0) rec.add("peak_memory_bytes", peak);
        (void)metrics.write(rec);
      }
      if (progress_now) {
        ProgressLine pl;
        pl.epoch = epoch;
        pl.step = done;
        pl.total = total;
        pl.loss = loss_value;
        pl.accuracy = accuracy;
        pl.samples_per_second = sps;
        pl.eta_seconds = eta;
        progress.report(pl);
      }
      t_window = Clock::now();
      window_samples = 0;
    }

    if ((c.eval_every > 0 && done % c.eval_every == 0) || (c.eval_every == 0 && done % nb == 0)) run_eval(done);
    if (!c.checkpoint_dir.empty() && c.checkpoint_every > 0 && done % c.checkpoint_every == 0) {
      checkpoint(done);
      last_checkpoint_step = done;
    }
  }
  progress.finish();

  const int64_t final_step = std::max(start, end);
  summary.final_step = final_step;
  if (!c.checkpoint_dir.empty() && last_checkpoint_step != final_step && final_step > start) checkpoint(final_step);
  if (c.test) summary.test = evaluate(model, *c.test, 0, comm);

  if (scaler != nullptr) summary.final_loss_scale = scaler->scale();
  if (graph) {
    summary.cuda_graph = true;
    summary.graph_captures = graph->captures();
    summary.graph_replays = graph->replays();
    summary.graph_declined = graph->declined();
  }
  summary.seconds = seconds_since(t_start);
  summary.samples_per_second = summary.seconds > 0 ? static_cast<double>(total_samples) / summary.seconds : 0.0;
  summary.model = model_stats(model);
  for (const auto& [op, count] : Dispatcher::instance().fallback_counts()) {
    auto it = fallbacks_before.find(op);
    const int64_t during = count - (it == fallbacks_before.end() ? 0 : it->second);
    if (during > 0) summary.fallback_counts[op] = during;
  }
  summary.peak_memory_bytes = peak_cpu_memory_bytes();
  if (exchange_steps > 0) summary.exchange_bytes_per_step = exchange_bytes / static_cast<double>(exchange_steps);
  if (dense_exchange_steps > 0)
    summary.exchange_bytes_per_dense_step = dense_exchange_bytes / static_cast<double>(dense_exchange_steps);
  if (metrics.is_open()) (void)metrics.write(JsonObject(summary_json(summary)));
  if (c.progress_out != nullptr && c.summary_on_progress) {
    std::string text = format_summary(summary);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    progress.message(text);
  }
  return summary;
}

JsonObject summary_json(const TrainingSummary& s) {
  JsonObject o;
  o.add("kind", "summary").add("step", s.final_step).add("total_steps", s.total_steps);
  if (!s.losses.empty()) o.add("final_loss", s.losses.back());
  if (s.validation) o.add("validation_accuracy", s.validation->accuracy).add("validation_loss", s.validation->loss);
  if (s.test) o.add("test_accuracy", s.test->accuracy).add("test_loss", s.test->loss);
  std::map<std::string, double> dens;
  for (const LayerStats& l : s.model.layers) dens[l.name] = l.density;
  o.add("density", dens);
  o.add("parameters_dense", s.model.dense_parameters).add("parameters_stored", s.model.stored_parameters);
  o.add("linear_flops_dense", s.model.linear_flops_dense).add("linear_flops_sparse", s.model.linear_flops_sparse);
  o.add("fallback_counts", s.fallback_counts);
  if (s.final_loss_scale != 1.0 || !s.skipped_steps.empty()) {
    o.add("loss_scale", s.final_loss_scale).add("skipped_steps", static_cast<int64_t>(s.skipped_steps.size()));
  }
  if (s.peak_memory_bytes >= 0) o.add("peak_memory_bytes", s.peak_memory_bytes);
  o.add("time_s", s.seconds).add("samples_per_s", s.samples_per_second);
  if (s.world_size > 1) {
    o.add("world_size", s.world_size).add("exchange_bytes_per_step", s.exchange_bytes_per_step);
    o.add("exchange_bytes_per_dense_step", s.exchange_bytes_per_dense_step);
  }
  if (s.cuda_graph) {
    JsonObject g;
    g.add("captures", s.graph_captures).add("replays", s.graph_replays);
    if (!s.graph_declined.empty()) g.add("off", s.graph_declined);
    o.add("cuda_graph", g);
  }
  if (!s.last_checkpoint.empty()) o.add("checkpoint", s.last_checkpoint);
  return o;
}

std::string format_summary(const TrainingSummary& s) {
  std::ostringstream os;
  os << "trained " << s.final_step << "/" << s.total_steps << " steps in " << s.seconds << " s ("
     << static_cast<int64_t>(s.samples_per_second) << " samples/s)";
  if (!s.losses.empty()) os << ", final loss " << s.losses.back();
  os << "\n";
  if (s.validation) os << "validation accuracy " << 100.0 * s.validation->accuracy << " %\n";
  if (s.test) os << "test accuracy " << 100.0 * s.test->accuracy << " % (loss " << s.test->loss << ")\n";
  os << "layers:\n";
  for (const LayerStats& l : s.model.layers) {
    os << "  " << l.name << "  " << l.format << "  " << l.nnz << "/" << l.numel << "  density " << l.density << "\n";
  }
  os << "parameters: " << s.model.stored_parameters << " stored of " << s.model.dense_parameters << " dense\n";
  os << "Linear FLOPs per example: " << s.model.linear_flops_sparse << " sparse vs " << s.model.linear_flops_dense
     << " dense\n";
  if (s.fallback_counts.empty()) {
    os << "dense fallbacks: none\n";
  } else {
    os << "dense fallbacks:";
    for (const auto& [k, v] : s.fallback_counts) os << " " << k << "=" << v;
    os << "\n";
  }
  if (s.final_loss_scale != 1.0 || !s.skipped_steps.empty()) {
    os << "loss scale " << s.final_loss_scale << " at the end; " << s.skipped_steps.size()
       << " steps skipped for inf/NaN gradients\n";
  }
  if (s.cuda_graph) {
    os << "cuda graphs: " << s.graph_replays << " steps replayed, " << s.graph_captures << " captures";
    if (!s.graph_declined.empty()) os << "; off: " << s.graph_declined;
    os << "\n";
  }
  if (s.peak_memory_bytes >= 0) os << "peak CPU memory: " << s.peak_memory_bytes << " bytes\n";
  if (s.world_size > 1) {
    os << "data-parallel over " << s.world_size << " ranks: " << static_cast<int64_t>(s.exchange_bytes_per_step)
       << " gradient bytes sent per step by each rank (dense " << s.last_exchange.dense_bytes << ", compact sparse "
       << s.last_exchange.compact_bytes << ", top-k " << s.last_exchange.topk_bytes << ")";
    if (s.exchange_bytes_per_dense_step > 0)
      os << ", " << static_cast<int64_t>(s.exchange_bytes_per_dense_step) << " on dense-gradient steps";
    os << "\n";
  }
  if (!s.last_checkpoint.empty()) os << "checkpoint: " << s.last_checkpoint << "\n";
  return os.str();
}

}  // namespace coppice

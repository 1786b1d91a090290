#include "train/resume.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "optim/densify.h"
#include "sparse/route_choices.h"
#include "tensor/error.h"
#include "tensor/generator.h"
#include "train/checkpoint_files.h"
#include "train/fingerprint.h"
#include "train/model_parameters.h"

namespace coppice {
namespace {

// The loss scaler's state rides in the checkpoint's trainer extras; %.17g
// keeps the scale exact.
constexpr const char* kLossScaleKey = "loss_scale";
constexpr const char* kLossScaleTrackerKey = "loss_scale_growth_tracker";
// The product planners' measured decisions (sparse/route_choices.h), so that
// a resumed run computes with the kernels of the run it continues.
constexpr const char* kRouteChoicesKey = "route_choices";

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
  const bool scale_ok =
      !scale->second.empty() && end == scale->second.c_str() + scale->second.size() && std::isfinite(v) && v > 0.0;
  end = nullptr;
  errno = 0;
  const long long t = std::strtoll(tracker->second.c_str(), &end, 10);
  const bool tracker_ok =
      !tracker->second.empty() && errno == 0 && end == tracker->second.c_str() + tracker->second.size() && t >= 0;
  COPPICE_CHECK(scale_ok && tracker_ok, "run_training: resume: checkpoint '", path, "' has a bad loss scale '",
                scale->second, "' (a finite number > 0) or growth tracker '", tracker->second, "' (an integer >= 0)");
  scaler.restore(v, t);
}

// Compares the checkpoint's job fingerprint with this run's: a change of a
// structural key (one that shapes the saved tensors) or one that
// allowed_changes does not list is refused; accepted changes are reported.
// Returns whether the loader's shuffle seed is among the accepted changes.
bool check_fingerprint(const TrainComponents& c, const TrainerState& state, const std::string& path,
                       ProgressReporter& progress) {
  if (c.fingerprint.empty()) return false;
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
    fail("run_training: resume: checkpoint '", path,
         "' holds the state of another job, which this job cannot load: ", describe_changes(structural),
         " (these shape the saved tensors; resume with the job that wrote it, or start "
         "a new run)");
  }
  if (!refused.empty()) {
    std::vector<std::string> keys;
    for (const FingerprintChange& change : refused) keys.push_back(change.key);
    fail("run_training: resume: checkpoint '", path,
         "' was written by a job with other settings: ", describe_changes(refused),
         "; to resume with these changes on purpose, pass --allow-changes ", str_join(keys, ","),
         " (or list them in checkpoint.allow_changes)");
  }
  if (!accepted.empty()) progress.message(str_cat("resume: changes accepted: ", describe_changes(accepted)));
  bool seed_changed = false;
  for (const FingerprintChange& change : accepted) seed_changed = seed_changed || change.key == "data.shuffle_seed";
  return seed_changed;
}

// The checkpoint must stand where this run's loader and schedule can go on
// from: the same shuffle (unless a seed change was accepted), a step within
// the run, the same batches per epoch, and an LR position when there is a
// scheduler.
void check_position(const TrainComponents& c, const TrainerState& state, const std::string& path, bool seed_changed,
                    int64_t nb, int64_t total) {
  COPPICE_CHECK(seed_changed || state.data_seed == c.train.options().seed, "run_training: resume: checkpoint '", path,
                "' was written with train loader seed ", state.data_seed, ", the loader has ", c.train.options().seed);
  COPPICE_CHECK(state.step <= total, "run_training: resume: checkpoint '", path, "' is at step ", state.step,
                ", past the run's ", total, " steps");
  COPPICE_CHECK(state.epoch == state.step / nb && state.batch == state.step % nb, "run_training: resume: checkpoint '",
                path, "' stands at epoch ", state.epoch, " batch ", state.batch, " but the train loader has ", nb,
                " batches per epoch (step ", state.step, ")");
  COPPICE_CHECK(c.scheduler == nullptr || state.lr_step >= 0, "run_training: resume: checkpoint '", path,
                "' has no LR scheduler position but a scheduler was given");
}

// Loads the checkpoint that c.resume names into the components, after
// reading and verifying all of it and checking it against this run; returns
// the step to start from, the run id (continued, or new for a fork) and the
// file resumed from.
RunStart resume(TrainComponents& c, int64_t nb, int64_t total, const std::string& new_run_id,
                ProgressReporter& progress) {
  auto resolved = resolve_checkpoint(c.resume);
  if (!resolved.ok()) fail("run_training: resume: ", resolved.status().message());
  const std::string path = resolved->path;
  auto file = read_checkpoint(path);
  if (!file.ok()) fail("run_training: resume: ", file.status().message());
  const TrainerState& state = file->state;
  // A name that lies (a checkpoint renamed to a later step) would make
  // directory resumes pick it as the newest and lose steps silently.
  if (absl::Status st = check_checkpoint_name(path, state.step, state.run_id); !st.ok())
    fail("run_training: resume: ", st.message());

  const bool seed_changed = check_fingerprint(c, state, path, progress);
  check_position(c, state, path, seed_changed, nb, total);
  if (c.loss_scaler != nullptr) restore_loss_scaler(*c.loss_scaler, state, path);
  if (auto it = state.extra.find(kRouteChoicesKey); it != state.extra.end()) {
    restore_route_choices(it->second, str_cat("run_training: resume: checkpoint '", path, "'"));
  }

  // A checkpoint at or after densify_step holds the weights dense and no
  // mask-method state (densify_step is structural in the fingerprint, so the
  // job that wrote it densified at the same step): the model's sparse
  // weights become dense before it is loaded into them. Should the load
  // fail, the run fails with it, as the components are then this run's alone.
  if (is_densified(c, state.step)) {
    ModelParameters store(c.model, c.optimizer);
    densify_parameters(store, sparse_parameter_names(c.model));
  }
  if (absl::Status st = apply_checkpoint(*file, c.model, c.optimizer, mask_state(c, state.step),
                                         /*restore_hyperparameters=*/c.fingerprint.empty());
      !st.ok()) {
    fail("run_training: resume: ", st.message());
  }
  manual_seed(state.rng_seed);
  default_generator().set_offset(state.rng_offset);
  if (c.scheduler != nullptr) c.scheduler->set_step(state.lr_step);

  RunStart run;
  run.run_id = new_run_id;
  if (!state.run_id.empty() && is_newest_of_its_run(path, state.run_id)) {
    run.run_id = state.run_id;
  } else if (!state.run_id.empty()) {
    progress.message(str_cat("resume: '", path, "' is not the newest checkpoint of run ", state.run_id,
                             "; continuing from it as a new run ", run.run_id));
  }
  run.resumed_from = path;
  progress.message(str_cat("resume: from step ", state.step, " of '", path, "'",
                           resolved->why.empty() ? std::string() : str_cat(" (", resolved->why, ")")));
  if (c.comm != nullptr && c.grad_sync.topk_fraction > 0.0) {
    progress.message(
        "resume: the top-k residuals of distributed.topk_fraction are not checkpointed; they restart at "
        "zero");
  }
  run.step = state.step;
  return run;
}

}  // namespace

RunStart start_run(TrainComponents& c, int64_t nb, int64_t total, const std::string& new_run_id,
                   ProgressReporter& progress) {
  if (!c.resume.empty()) return resume(c, nb, total, new_run_id, progress);
  manual_seed(c.seed);  // dropout and other draws of the default generator
  RunStart run;
  run.run_id = new_run_id;
  return run;
}

void mark_run(const TrainComponents& c, const RunStart& run, ProgressReporter& progress) {
  const RunMarker marker{run.run_id, run.resumed_from, static_cast<int64_t>(std::time(nullptr))};
  if (absl::Status st = write_run_marker(c.checkpoint_dir, marker); !st.ok()) fail("run_training: ", st.message());
  const std::string others = other_runs_note(c.checkpoint_dir, run.run_id);
  if (!others.empty()) {
    progress.message(str_cat("checkpoint.dir '", c.checkpoint_dir, "' also holds ", others,
                             "; they are kept, and this run (", run.run_id, ") writes and prunes only its own"));
  }
}

TrainerState trainer_state(const TrainComponents& c, int64_t nb, const RunStart& run, int64_t step) {
  TrainerState s;
  s.step = step;
  s.epoch = step / nb;
  s.batch = step % nb;
  s.rng_seed = default_generator().seed();
  s.rng_offset = default_generator().offset();
  s.lr_step = c.scheduler != nullptr ? c.scheduler->current_step() : -1;
  s.data_seed = c.train.options().seed;
  s.run_id = run.run_id;
  s.resumed_from = run.resumed_from;
  s.fingerprint = c.fingerprint;
  if (c.loss_scaler != nullptr) save_loss_scaler(*c.loss_scaler, s);
  if (std::string routes = route_choices_json(); routes != "[]") s.extra[kRouteChoicesKey] = std::move(routes);
  return s;
}

}  // namespace coppice

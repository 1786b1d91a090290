// The job configuration of the trainer (docs/architecture.md, layer 7): a plain
// struct tree that a YAML job file fills one to one, and its loader.
//
// Each section holds the plain config structs of the layer that consumes it
// (ModelConfig, FashionMnistOptions, DataLoaderOptions, SparsitySchedule,
// DensityOptions, SgdOptions / AdamOptions, MaskUpdaterConfig, GmpConfig,
// SrSteConfig), so the trainer hands them on without translating. The keys,
// their types and defaults are listed in config_schema.h (and README.md,
// "Configuring a job").
//
// load_validated_job validates the whole job before any work starts,
// building the model and resolving the sparsity schedule once, and hands
// them on with the job (ValidatedJob); it returns the first problem as one
// line that names the key path, e.g.
//   optimizer.lr: must be in (0, 10000], got -0.1
//   optimizer.lrr: unknown key; did you mean 'optimizer.lr'?
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/doc_graph.h"
#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "data/text.h"
#include "models/module.h"
#include "models/zoo.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/density.h"
#include "optim/gmp.h"
#include "optim/loss_scaler.h"
#include "optim/mask_updater.h"
#include "optim/sgd.h"
#include "optim/sr_ste.h"
#include "sparse/levels/level_format.h"
#include "sparsifiers/schedule.h"
#include "train/nonfinite_guard.h"

namespace coppice {

enum class DatasetKind { kFashionMnist, kSynthetic, kText, kDocGraph };
const char* dataset_kind_name(DatasetKind kind);  // "fashion_mnist", "synthetic", "text", "docgraph"

struct DataConfig {
  DatasetKind dataset = DatasetKind::kFashionMnist;
  // data.path: the Fashion-MNIST directory or the text file ("" = the default).
  std::string path;
  double validation_split = 0.0;  // fraction of the training set held out, in [0, 1)
  // data.batch_size, shuffle, shuffle_seed, drop_last. rank, world_size and
  // device are the trainer's to fill.
  DataLoaderOptions loader;
  int64_t eval_batch_size = 0;          // 0: loader.batch_size
  FashionMnistOptions fashion_mnist;    // dir (= path or the default), flatten, normalize, mean, std
  TextDatasetOptions text;              // seq_len, stride; the file is text_path()
  BlobsOptions synthetic;               // n, features, classes, center_scale, spread, seed
  int64_t synthetic_test_examples = 0;  // held out from the same draw of blobs (0: none)
  // docgraph: the tree is docgraph.path (= path; "" = kLinuxDocCorpus); the
  // graph is one full batch per split (data/doc_graph.h).
  DocGraphOptions docgraph;

  std::string text_path() const { return path.empty() ? std::string(kDefaultTextCorpus) : path; }
};

// device: "auto" (a GPU when there is one), "cpu", "cuda" or "cuda:N".
struct DeviceConfig {
  bool is_auto = true;
  Device device = Device::cpu();  // meaningful when !is_auto
  std::string to_string() const { return is_auto ? "auto" : device.to_string(); }
};

struct SparsityConfig {
  // sparsity.formats: the formats declared by their levels, by name, in file
  // order; the reader registers each (sparse/levels/level_impl.h) before it
  // reads the rules that name them.
  std::vector<std::pair<std::string, levels::LevelFormat>> formats;
  // The rules (parameters: format, density, initial sparsifier; outputs:
  // forward/backward sparsifiers), as sparsifiers/schedule.h.
  SparsitySchedule schedule;
  // How the overall density is split over the parameters selected by rules
  // without a density of their own (optim/density.h). `distribution.density`
  // is 1 when the job leaves it out.
  DensityOptions distribution;
  bool has_density = false;  // sparsity.density was given
  // sparsity.propagate: output rules inferred from the attributes propagated
  // through the model (models/propagation) join the job's own; sparsity.plan:
  // where the plan is written ("" = <--run-dir>/plan.jsonl, else nowhere).
  bool propagate = false;
  double propagate_max_density = 0.1;  // sparsity.propagate_max_density
  std::string plan;

  // True when some parameter rule asks for fewer than all entries.
  bool sparse_weights() const;
};

enum class OptimizerKind { kSgd, kAdam, kAdamW, kAdagrad };
const char* optimizer_kind_name(OptimizerKind kind);  // "sgd", "adam", "adamw", "adagrad"

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  SgdOptions sgd;          // for kSgd (lr, momentum, dampening, nesterov, weight_decay)
  AdamOptions adam;        // for kAdam and kAdamW (lr, beta1, beta2, eps, weight_decay)
  AdagradOptions adagrad;  // for kAdagrad (lr, lr_decay, initial_accumulator_value, eps, weight_decay)
  double grad_clip = 0.0;  // max global gradient norm; 0: no clipping

  double lr() const {
    return kind == OptimizerKind::kSgd ? sgd.lr : kind == OptimizerKind::kAdagrad ? adagrad.lr : adam.lr;
  }
};

enum class LrScheduleKind { kConstant, kStep, kCosine };
const char* lr_schedule_kind_name(LrScheduleKind kind);  // "constant", "step", "cosine"

struct LrScheduleConfig {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  int64_t step_size = 0;  // step: decay every step_size steps (> 0)
  double gamma = 0.1;     // step
  int64_t t_max = 0;      // cosine: period in steps; 0 = training steps - warmup_steps
  double eta_min = 0.0;   // cosine
  int64_t warmup_steps = 0;
  double warmup_start_factor = 0.0;  // lr factor at step 0 of the warm-up, in [0, 1]
};

// kRigLNm: RigL on n:m layers alone, each group regrowing what it dropped
// (optim/group_regrow.h); set, rigl and snfs regrow n:m layers that way too,
// beside other formats. kSrSte: dense weights trained through their n:m
// projection (optim/sr_ste.h); every rule must be nm.
enum class MaskMethod { kDense, kStatic, kSet, kRigL, kRigLNm, kSnfs, kGmp, kSrSte };
// "dense", "static", "set", "rigl", "rigl_nm", "snfs", "gmp", "sr_ste"
const char* mask_method_name(MaskMethod m);
// The growth policy a prune-and-regrow method uses unless mask_update.growth
// names another: random (set), momentum (snfs), gradient (rigl, rigl_nm).
const char* default_growth(MaskMethod m);

struct MaskUpdateConfig {
  MaskMethod method = MaskMethod::kDense;
  // set / rigl, rigl_nm / snfs: growth is "random" / "gradient" / "momentum".
  MaskUpdaterConfig updater;
  // gmp
  GmpConfig gmp;
  // sr_ste: interval, decay
  SrSteConfig sr_ste;
  // Sparse to dense (SPDF, optim/densify.h): > 0 makes every sparse weight
  // dense after this many steps, for the rest of the run; 0: never. Any
  // method but dense and sr_ste, after its last mask change.
  int64_t densify_step = 0;
  // > 0 (with densify_step): for the W steps from densify_step on, every
  // parameter's learning rate is the schedule's times (step - densify_step +
  // 1) / W, then the schedule's again (train/job.cc, optim/lr_schedule.h's
  // linear_ramp); 0: no ramp. densify_step + W <= the training steps.
  int64_t densify_warmup_steps = 0;

  bool is_prune_and_regrow() const {
    return method == MaskMethod::kSet || method == MaskMethod::kRigL || method == MaskMethod::kRigLNm ||
           method == MaskMethod::kSnfs;
  }
};

struct TrainingConfig {
  // Exactly one of the two is set.
  std::optional<int64_t> epochs;
  std::optional<int64_t> steps;
  bool cuda_graph = false;     // replay ordinary steps from a CUDA graph (train/graph_step.h)
  NonfiniteOptions nonfinite;  // on_nonfinite, max_consecutive_skips (train/nonfinite_guard.h)
};

enum class EvalSplit { kValidation, kTest };

struct EvaluationConfig {
  int64_t every_steps = 0;  // 0: at the end of each epoch (and of training)
  EvalSplit split = EvalSplit::kTest;
  int64_t max_batches = 0;  // 0: the whole split
};

struct CheckpointConfig {
  std::string dir;          // "" = no checkpoints
  int64_t every_steps = 0;  // 0: only at the end
  int64_t keep_last = 0;    // 0: keep all
  std::string resume;       // a checkpoint file or directory to resume from ("" = none); must exist
  // Fingerprint keys (train/fingerprint.h) a resume may change on purpose:
  // exact keys, "prefix.*" or "*"; structural keys are refused.
  std::vector<std::string> allow_changes;
};

struct LoggingConfig {
  std::string metrics;   // a JSONL file, one record per logged step ("" = none)
  bool progress = true;  // a progress line on stderr
  int64_t every_steps = 50;
};

enum class CommBackend { kInProc, kNccl };

enum class SparseExchange { kCompact, kDense };
const char* sparse_exchange_name(SparseExchange e);  // "compact", "dense"

// Data-parallel training (distributed/grad_sync.h). data.loader.batch_size
// is per rank: a step sees world_size * batch_size examples in all.
//   inproc  world_size ranks as threads of the trainer process, on the CPU
//           (tests, CI, and trying a distributed job on one machine);
//   nccl    one process per GPU, started by tools/launch (or mpirun, srun),
//           whose environment must give the same world size.
struct DistributedConfig {
  int64_t world_size = 1;
  CommBackend backend = CommBackend::kInProc;
  double timeout_s = 300.0;  // a collective not done by then aborts the job
  double bucket_mb = 25.0;   // dense gradient buckets
  SparseExchange sparse_exchange = SparseExchange::kCompact;
  double topk_fraction = 0.0;  // (0, 1): top-k with error feedback for dense gradients; 0: off
};

// Numeric settings of the run (tensor/precision.h, optim/loss_scaler.h).
struct PrecisionConfig {
  bool allow_tf32 = false;  // f32 dense matrix products on CUDA may use TF32 tensor cores
  // Parameters (dense and sparse values) and activations; bf16/f16 train
  // with f32 master weights in the optimizer and an f32 loss.
  DType dtype = DType::kF32;
  // precision.loss_scale: dynamic (GradScaler) | none | a number (static);
  // default dynamic for f16, none otherwise.
  LossScalerOptions loss_scale;
};

struct JobConfig {
  std::string name;  // for logs; default: the file's stem
  uint64_t seed = 0;
  DeviceConfig device;
  ModelConfig model;
  DataConfig data;
  SparsityConfig sparsity;
  OptimizerConfig optimizer;
  LrScheduleConfig lr_schedule;
  MaskUpdateConfig mask_update;
  TrainingConfig training;
  EvaluationConfig evaluation;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  DistributedConfig distributed;
  PrecisionConfig precision;
};

// The job's parameter rules resolved against a model's parameters (name and
// shape, in the model's order): one exact rule per parameter that a rule
// selects (an exact rule wins over regex rules), with its density filled in.
// A rule's own density, or its sparsifier's (1 - sparsity; n/m for nm), is
// kept; parameters in sparsity.dense get no rule (they stay dense); the
// others share sparsity.density (for gmp: mask_update.initial_density) by
// sparsity.distribution (optim/density.h, with sparsity.overrides). Rules
// whose sparsifier fixes no density (threshold, keep_all) keep none. Output
// rules are copied. Throws coppice::Error as layer_densities does.
SparsitySchedule resolve_schedule(const JobConfig& job, const std::vector<LayerShape>& parameters);

// A job that passed validation, with what validation built to check it,
// which the run takes over instead of building it again (run_job,
// train/job.h). Move-only: the model goes to one run, which trains it.
struct ValidatedJob {
  JobConfig config;
  // make_model(config.model) as the zoo builds it: on the CPU, untrained,
  // with no sparsity applied. The zoo draws its weights from the model's own
  // generator (seeded by model.options.seed, which defaults to the job's
  // seed), never from the thread's default stream, so building it during
  // validation leaves the run's random draws as they were.
  ModulePtr model;
  // The job's parameter rules resolved against the model's parameters
  // (resolve_schedule): what the run applies and its checkpoints fingerprint.
  SparsitySchedule schedule;

  ValidatedJob(JobConfig c, ModulePtr m, SparsitySchedule s)
      : config(std::move(c)), model(std::move(m)), schedule(std::move(s)) {}
  ValidatedJob(ValidatedJob&&) = default;
  ValidatedJob& operator=(ValidatedJob&&) = default;
  ValidatedJob(const ValidatedJob&) = delete;
  ValidatedJob& operator=(const ValidatedJob&) = delete;
};

// Reads the YAML job at `path`, applies `overrides` ("key.path=value", as
// given to --set; the value is read as a YAML scalar or flow sequence/map) to
// the tree, and validates everything: each key as it is read, then the keys
// against each other, and the job against its model (built here, once) and
// its data. An error Status (InvalidArgument for a bad job, NotFound for a
// missing file) has one line naming the key path. The file and each value
// are held to the size, nesting and node limits of yaml_limits.h before
// anything walks them.
absl::StatusOr<ValidatedJob> load_validated_job(const std::string& path,
                                                const std::vector<std::string>& overrides = {});
// The same from YAML text (`source` names it in messages about the file
// itself; the job's name defaults to "job").
absl::StatusOr<ValidatedJob> parse_validated_job(const std::string& yaml_text,
                                                 const std::vector<std::string>& overrides = {},
                                                 const std::string& source = "<string>");
// The checks across keys and against the model and the data, for a job made
// or edited in C++ (the checks of each key's own value are the reader's).
absl::StatusOr<ValidatedJob> validate_job(JobConfig job);

// The same as load_validated_job and parse_validated_job, keeping only the
// job (the model they built is dropped).
absl::StatusOr<JobConfig> load_job_config(const std::string& path, const std::vector<std::string>& overrides = {});
absl::StatusOr<JobConfig> parse_job_config(const std::string& yaml_text, const std::vector<std::string>& overrides = {},
                                           const std::string& source = "<string>");

// For the binary: exit code 2 is a bad job (the configuration's fault).
inline constexpr int kConfigErrorExitCode = 2;
// Prints "<path>: <message>" on one line to `err` and returns kConfigErrorExitCode.
int config_error(const std::string& path, const absl::Status& status, std::ostream& err);

}  // namespace coppice

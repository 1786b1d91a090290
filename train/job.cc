#include "train/job.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/doc_graph.h"
#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "data/text.h"
#include "distributed/inproc_communicator.h"
#include "distributed/launch_env.h"
#include "distributed/nccl.h"
#include "distributed/route_agreement.h"
#include "models/graph_net.h"
#include "models/module.h"
#include "models/zoo.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/density.h"
#include "optim/gmp.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/mask_updater.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
#include "optim/sr_ste.h"
#include "sparse/convert.h"
#include "sparse/formats.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/error.h"
#include "tensor/generator.h"
#include "tensor/precision.h"
#include "train/config_schema.h"
#include "train/job_fingerprint.h"
#include "train/job_sparsity.h"
#include "train/mixed_precision.h"
#include "train/propagated_rules.h"
#include "train/run_paths.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;

struct Splits {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> validation;  // null: none
  std::shared_ptr<const Dataset> test;        // null: none
  std::shared_ptr<const DocGraph> graph;      // docgraph: the graph a graph model is given
};

int64_t validation_size(int64_t n, double fraction) {
  // As config.cc's planned_steps: floor(n * validation_split) held out.
  return static_cast<int64_t>(std::floor(static_cast<double>(n) * fraction));
}

// The last floor(fraction * n) examples of `rest` become the validation
// split, the others the training split.
void split_last_validation(const std::shared_ptr<const Dataset>& rest, double fraction, Splits& s) {
  const int64_t nv = validation_size(rest->size(), fraction);
  if (nv > 0) {
    TrainValidation tv = split_last(rest, nv);
    s.train = tv.train;
    s.validation = tv.validation;
  } else {
    s.train = rest;
  }
}

Splits load_data(const JobConfig& job) {
  const DataConfig& d = job.data;
  Splits s;
  switch (d.dataset) {
    case DatasetKind::kFashionMnist: {
      auto train = load_fashion_mnist(FashionMnistSplit::kTrain, d.fashion_mnist);
      if (!train.ok()) fail("data: ", train.status().message());
      auto test = load_fashion_mnist(FashionMnistSplit::kTest, d.fashion_mnist);
      if (!test.ok()) fail("data: ", test.status().message());
      std::shared_ptr<const Dataset> all = *train;
      const int64_t nv = validation_size(all->size(), d.validation_split);
      if (nv > 0) {
        TrainValidation tv = split_random(all, nv, job.seed);
        s.train = tv.train;
        s.validation = tv.validation;
      } else {
        s.train = all;
      }
      s.test = *test;
      break;
    }
    case DatasetKind::kSynthetic: {
      // One draw of examples + test_examples blobs, so that the held-out
      // examples come from the same class centres as the training ones (a
      // second draw with another seed would draw other centres).
      BlobsOptions b = d.synthetic;
      b.n = d.synthetic.n + d.synthetic_test_examples;
      std::shared_ptr<const Dataset> all = make_blobs(b).dataset;
      std::shared_ptr<const Dataset> rest = all;
      if (d.synthetic_test_examples > 0) {
        TrainValidation tt = split_last(all, d.synthetic_test_examples);
        rest = tt.train;
        s.test = tt.validation;
      }
      split_last_validation(rest, d.validation_split, s);
      break;
    }
    case DatasetKind::kText: {
      // Bounded as config.cc's validation read it (data/text.h).
      absl::StatusOr<std::shared_ptr<CharTextDataset>> text = CharTextDataset::from_path(d.text_path(), d.text);
      if (!text.ok()) fail("data: ", text.status().message());
      std::shared_ptr<const Dataset> all = *text;
      // The last windows validate (with a stride below seq_len, the first
      // validation windows overlap the last training ones by a few bytes).
      split_last_validation(all, d.validation_split, s);
      break;
    }
    case DatasetKind::kDocGraph: {
      // The whole graph is each split's one example; a split's nodes are
      // the ones scored (data/doc_graph.h), every node is seen.
      absl::StatusOr<DocGraph> graph = load_doc_graph(d.docgraph);
      if (!graph.ok()) fail("data: ", graph.status().message());
      s.graph = std::make_shared<const DocGraph>(std::move(*graph));
      s.train = std::make_shared<DocGraphSplitDataset>(s.graph, NodeSplit::kTrain);
      if (d.docgraph.validation_fraction > 0.0)
        s.validation = std::make_shared<DocGraphSplitDataset>(s.graph, NodeSplit::kValidation);
      if (d.docgraph.train_fraction + d.docgraph.validation_fraction < 1.0)
        s.test = std::make_shared<DocGraphSplitDataset>(s.graph, NodeSplit::kTest);
      break;
    }
  }
  COPPICE_CHECK(s.train != nullptr && s.train->size() > 0, "data: the training split of ", dataset_kind_name(d.dataset),
                " is empty");
  return s;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& o, std::vector<Variable> params) {
  switch (o.kind) {
    case OptimizerKind::kSgd: return std::make_unique<Sgd>(std::move(params), o.sgd);
    case OptimizerKind::kAdam: return std::make_unique<Adam>(std::move(params), o.adam);
    case OptimizerKind::kAdagrad: return std::make_unique<Adagrad>(std::move(params), o.adagrad);
    case OptimizerKind::kAdamW: {
      AdamWOptions w;
      static_cast<AdamOptions&>(w) = o.adam;  // the job's weight decay (config.cc defaults it to AdamW's 1e-2)
      return std::make_unique<AdamW>(std::move(params), w);
    }
  }
  fail("optimizer: unknown kind");
}

// Linear warm-up from a factor of 0 (config.h allows warmup_start_factor 0,
// and it is the default; optim's linear_warmup, like torch's LinearLR,
// refuses 0): base_lr * step / warmup_steps for step < warmup_steps, then
// `then` at step - warmup_steps. The same formula as linear_warmup's with
// start_factor 0.
class WarmupFromZero final : public LrSchedule {
 public:
  WarmupFromZero(int64_t warmup_steps, LrSchedulePtr then) : warmup_(warmup_steps), then_(std::move(then)) {}
  double lr(double base_lr, int64_t step) const override {
    if (step < warmup_) return base_lr * static_cast<double>(step) / static_cast<double>(warmup_);
    return then_->lr(base_lr, step - warmup_);
  }

 private:
  int64_t warmup_;
  LrSchedulePtr then_;
};

LrSchedulePtr make_lr_schedule(const LrScheduleConfig& c, int64_t total_steps) {
  LrSchedulePtr then;
  switch (c.kind) {
    case LrScheduleKind::kConstant: then = constant_lr(); break;
    case LrScheduleKind::kStep: then = step_lr(c.step_size, c.gamma); break;
    case LrScheduleKind::kCosine: {
      // t_max 0: the training steps after the warm-up (config.h).
      const int64_t t_max = c.t_max > 0 ? c.t_max : std::max<int64_t>(1, total_steps - c.warmup_steps);
      then = cosine_lr(t_max, c.eta_min);
      break;
    }
  }
  if (c.warmup_steps > 0 && c.warmup_start_factor <= 0.0) return std::make_shared<WarmupFromZero>(c.warmup_steps, then);
  if (c.warmup_steps > 0) return linear_warmup(c.warmup_steps, c.warmup_start_factor, then);
  return then;
}

void make_parent_dirs(const std::string& file) {
  const fs::path parent = fs::path(file).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) fail("cannot create the directory '", parent.string(), "': ", ec.message());
}

// A JobConfig made in C++ skips the loader: a number that is converted to
// an integer here is checked against its key's range (config_schema.h)
// first, so that the conversion is defined and the result fits.
template <typename T>
void check_in_range(const char* key, T v) {
  const KeyRange* r = key_range(key);
  COPPICE_CHECK(r != nullptr && r->contains(v), key, ": must be ", r != nullptr ? r->text() : "?", ", got ", v);
}

GradSyncOptions grad_sync_options(const DistributedConfig& d) {
  GradSyncOptions g;
  check_in_range("distributed.bucket_mb", d.bucket_mb);
  g.bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(d.bucket_mb * 1024.0 * 1024.0));
  g.compact_sparse = d.sparse_exchange == SparseExchange::kCompact;
  g.topk_fraction = d.topk_fraction;
  return g;
}

std::chrono::milliseconds timeout_of(const DistributedConfig& d) {
  // At most kMaxTimeoutSeconds: deadlines of now + timeout fit the clocks.
  check_in_range("distributed.timeout_s", d.timeout_s);
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(d.timeout_s * 1000.0)));
}

// One rank of the job (comm null: the only one) on `device`, with the
// schedule that validation resolved and the model it built (null: build it).
TrainingSummary run_rank(const JobConfig& job, const SparsitySchedule& schedule, ModulePtr model,
                         const JobRunOptions& opts, Communicator* comm, Device device);

}  // namespace

LrSchedulePtr job_lr_schedule(const JobConfig& job, int64_t total_steps) {
  LrSchedulePtr s = make_lr_schedule(job.lr_schedule, total_steps);
  // After densify_step, the ramp over every parameter's lr (not only the
  // entries made dense: one factor for all groups); none without the key, so
  // that such a job's learning rates are the schedule's bit for bit.
  const MaskUpdateConfig& m = job.mask_update;
  if (m.densify_step > 0 && m.densify_warmup_steps > 0) s = linear_ramp(m.densify_step, m.densify_warmup_steps, s);
  return s;
}

Device resolve_job_device(const DeviceConfig& config) {
  if (config.is_auto) return cuda_available() ? Device::cuda(0) : Device::cpu();
  const Device d = config.device;
  if (d.is_cpu()) return d;
  if (find_backend(DeviceType::kCuda) == nullptr)
    fail("device ", d.to_string(), ": this build has no CUDA (built with --define=cuda=0); use device cpu or auto");
  const int count = cuda_device_count();
  if (count == 0) fail("device ", d.to_string(), ": no CUDA GPU is visible on this machine; use device cpu or auto");
  if (d.index < 0 || d.index >= count)
    fail("device ", d.to_string(), ": this machine has ", count, " CUDA GPU", count == 1 ? "" : "s");
  return d;
}

std::string job_metrics_path(const JobConfig& job, const JobRunOptions& opts) {
  if (!job.logging.metrics.empty()) return job.logging.metrics;
  if (!opts.run_dir.empty()) return (fs::path(opts.run_dir) / "metrics.jsonl").string();
  return "";
}

TrainingSummary run_job(const JobConfig& job, const JobRunOptions& opts) {
  absl::StatusOr<ValidatedJob> validated = validate_job(job);
  if (!validated.ok()) fail(validated.status().message());
  return run_job(std::move(*validated), opts);
}

namespace {

// The schedule the ranks apply: the job's, and with sparsity.propagate the
// output rules inferred from a traced step on the first training batch
// (train/propagated_rules.h), the plan written by one process only.
SparsitySchedule propagated(const JobConfig& job, const SparsitySchedule& schedule, const JobRunOptions& opts) {
  if (!job.sparsity.propagate) return schedule;
  const DistributedConfig& d = job.distributed;
  DeviceType device = DeviceType::kCpu;
  bool writes_plan = true;
  if (d.world_size == 1) {
    device = resolve_job_device(job.device).type;
  } else if (d.backend != CommBackend::kInProc) {
    device = DeviceType::kCuda;
    auto env = launch_env();
    writes_plan = env.ok() && env->rank == 0;
  }
  DataLoaderOptions first;
  first.batch_size = job.data.loader.batch_size;
  const Tensor inputs = DataLoader(load_data(job).train, first).batch(0, 0).inputs;
  const std::string plan = writes_plan ? job_plan_path(job, opts.run_dir) : "";
  if (!plan.empty()) make_parent_dirs(plan);
  return with_propagated_rules(job, schedule, inputs, device, plan);
}

}  // namespace

TrainingSummary run_job(ValidatedJob validated, const JobRunOptions& opts) {
  const JobConfig& job = validated.config;
  // No output may overwrite an input or another output (the trainer binary
  // checks it first, with the job file among the inputs).
  if (absl::Status st = check_outputs_apart(run_paths(job, "", opts.resume, opts.run_dir)); !st.ok())
    fail(st.message());
  set_allow_tf32(job.precision.allow_tf32);  // process-wide, like the job itself
  const DistributedConfig& d = job.distributed;
  check_in_range("distributed.world_size", d.world_size);
  const int world = static_cast<int>(d.world_size);
  const SparsitySchedule schedule = propagated(job, validated.schedule, opts);
  if (world == 1)
    return run_rank(job, schedule, std::move(validated.model), opts, nullptr, resolve_job_device(job.device));

  if (d.backend == CommBackend::kInProc) {
    // Ranks as threads of this process, on the CPU (config.cc refuses a
    // CUDA device here); rank 0's summary is the job's. Each rank trains a
    // model of its own: rank 0 the one validation built, the others the same
    // built again (the zoo draws from the model's own seeded generator, so
    // they are equal; replicate_parameters makes them so in any case).
    InprocOptions io;
    io.timeout = timeout_of(d);
    std::vector<TrainingSummary> summaries(static_cast<size_t>(world));
    ModulePtr built = std::move(validated.model);
    run_inproc(
        world,
        [&](Communicator& comm) {
          ModulePtr model = comm.rank() == 0 ? std::move(built) : nullptr;  // only rank 0's thread touches `built`
          summaries[static_cast<size_t>(comm.rank())] =
              run_rank(job, schedule, std::move(model), opts, &comm, Device::cpu());
        },
        io);
    return summaries[0];
  }

  // NCCL: this process is one rank, started by tools/launch, mpirun or srun.
  auto env = launch_env();
  if (!env.ok()) fail("distributed: ", env.status().message());
  if (env->world_size != world)
    fail("distributed.world_size is ", world, " but this process was started as rank ", env->rank, " of ",
         env->world_size, " (launcher: ", launcher_name(env->launcher), "); start the ranks with tools/launch -n ",
         world, " -- trainer --config ... (tools/train does it for you)");
  if (!job.device.is_auto && job.device.device.is_cpu()) fail("distributed.backend nccl needs CUDA devices");
  if (find_backend(DeviceType::kCuda) == nullptr)
    fail("distributed.backend nccl: this build has no CUDA (build with --define=cuda=1), or use backend inproc");
  // Each rank takes the GPU of its local rank.
  const int gpus = cuda_device_count();
  if (gpus == 0) fail("distributed.backend nccl: no CUDA GPU is visible on this machine; use backend inproc");
  if (!nccl_available()) fail("distributed.backend nccl: NCCL is not available: ", nccl_unavailable_reason());
  if (env->local_rank >= gpus)
    fail("distributed: local rank ", env->local_rank, " needs GPU ", env->local_rank, " but this machine has ", gpus,
         " GPU", gpus == 1 ? "" : "s");
  NcclOptions nccl;
  nccl.timeout = timeout_of(d);
  nccl.init_timeout = nccl.timeout;  // the rendezvous and NCCL's init too, not their 300 s default
  std::unique_ptr<Communicator> comm = make_nccl_communicator(*env, env->local_rank, nccl);
  // Every rank takes rank 0's measured routes (distributed/route_agreement.h).
  const ScopedRouteAgreement agreement(route_agreement(*comm));
  return run_rank(job, schedule, std::move(validated.model), opts, comm.get(), Device::cuda(env->local_rank));
}

namespace {

// The train loader shards by rank; the evaluation loaders do not
// (evaluate() splits batches over ranks), keep their order and every example.
struct LoaderOptions {
  DataLoaderOptions train, eval;
};

LoaderOptions loader_options(const JobConfig& job, Communicator* comm, Device device) {
  LoaderOptions o;
  o.train = job.data.loader;
  o.train.device = device;
  o.eval = o.train;
  if (comm != nullptr) {
    o.train.rank = comm->rank();
    o.train.world_size = comm->world_size();
  }
  o.eval.shuffle = false;
  o.eval.drop_last = false;
  if (job.data.eval_batch_size > 0) o.eval.batch_size = job.data.eval_batch_size;
  return o;
}

// Sparsity: one exact rule per selected parameter with its density, then the
// parameters in their formats and the output rules attached
// (apply_job_sparsity; SR-STE's weights stay dense, attach_mask_update).
// Returns the parameters a rule selects.
std::vector<std::string> sparsify(Module& model, const JobConfig& job, const SparsitySchedule& schedule) {
  std::vector<std::string> ruled;
  for (const ParameterRule& r : schedule.parameters) ruled.push_back(r.selector.pattern);
  apply_job_sparsity(model, job, schedule);
  return ruled;
}

// GMP prunes sparse weights in place (run_training prunes the parameters of
// gmp_layers; by default every sparse one). config.cc refuses gmp with a
// dense or n:m rule format, so every ruled weight should be sparse here; a
// weight that the schedule nevertheless left dense (e.g. a format that
// keeps density 1 as dense) is converted to masked, which the pruner
// handles entry by entry, so that GMP has a pattern to shrink.
std::vector<std::string> prepare_gmp_layers(Module& model, const JobConfig& job,
                                            const std::vector<std::string>& ruled) {
  std::vector<std::string> gmp_layers;
  if (job.mask_update.method != MaskMethod::kGmp) return gmp_layers;
  for (const std::string& name : ruled) {
    const Variable p = model.parameter(name);
    if (p.dim() < 2) continue;
    if (!p.value().is_sparse()) {
      model.set_parameter(name, Variable(to_format(p.value(), "masked"), p.requires_grad(), name));
    }
    gmp_layers.push_back(name);
  }
  COPPICE_CHECK(!gmp_layers.empty(), "mask_update: gmp selects no weight of dim >= 2 to prune");
  return gmp_layers;
}

// SR-STE over the ruled weights (dense), each with its rule's n:m grouping;
// the first masks come from the weights as they are now (cast and
// replicated over ranks).
void attach_sr_ste(const Module& model, const SparsitySchedule& schedule, std::optional<SrSte>& sr_ste,
                   const MaskUpdateConfig& config) {
  sr_ste.emplace(config.sr_ste);
  for (const ParameterRule& r : schedule.parameters) {
    const std::string& name = r.selector.pattern;
    const bool transposable = r.sparsifier && r.sparsifier->params.count("transposable") &&
                              r.sparsifier->params.at("transposable").boolean() == true;
    const std::optional<NmGroups> groups = format_nm_groups(format_spec(r.format.name, "sr_ste"), r.format.options);
    COPPICE_CHECK(groups.has_value(), "mask_update: sr_ste needs an n:m format for '", name, "', got ", r.format.name);
    sr_ste->add_layer(name, model.parameter(name).value(), groups->n, groups->m, transposable, r.format.name);
  }
  COPPICE_CHECK(!sr_ste->layers().empty(), "mask_update: sr_ste has no n:m weight to train");
}

// What drives the masks during the run: a prune-and-regrow updater over the
// ruled weights that are sparse, or a GMP pruner over gmp_layers, or SR-STE
// over the ruled weights, or none.
void attach_mask_update(const JobConfig& job, const Module& model, const SparsitySchedule& schedule,
                        const std::vector<std::string>& ruled, const std::vector<std::string>& gmp_layers,
                        std::optional<MaskUpdater>& updater, std::optional<GmpPruner>& gmp,
                        std::optional<SrSte>& sr_ste, TrainComponents& c) {
  if (job.mask_update.is_prune_and_regrow()) {
    updater.emplace(job.mask_update.updater);
    for (const std::string& name : ruled) {
      const Variable& p = model.parameter(name);
      if (p.value().is_sparse()) updater->add_layer(name, p.value());
    }
    COPPICE_CHECK(!updater->layers().empty(), "mask_update: ", mask_method_name(job.mask_update.method),
                  " has no sparse weight to update");
    c.mask_updater = &*updater;
  } else if (job.mask_update.method == MaskMethod::kGmp) {
    gmp.emplace(job.mask_update.gmp);
    c.gmp = &*gmp;
    c.gmp_layers = gmp_layers;
  } else if (job.mask_update.method == MaskMethod::kSrSte) {
    attach_sr_ste(model, schedule, sr_ste, job.mask_update);
    c.sr_ste = &*sr_ste;
  }
}

// Evaluation, metrics, progress, checkpoints and resume as the job and the
// command line say.
void set_reporting(const JobConfig& job, const JobRunOptions& opts, const SparsitySchedule& schedule,
                   TrainComponents& c) {
  c.eval_every = job.evaluation.every_steps;
  c.eval_max_batches = job.evaluation.max_batches;

  c.metrics_path = job_metrics_path(job, opts);
  if (!c.metrics_path.empty()) make_parent_dirs(c.metrics_path);
  c.log_every = job.logging.every_steps;
  c.progress_out = job.logging.progress ? opts.progress_out : nullptr;
  c.progress_interactive = opts.progress_interactive;
  c.summary_on_progress = opts.summary_on_progress;

  c.checkpoint_dir = job.checkpoint.dir;
  c.checkpoint_every = job.checkpoint.every_steps;
  c.keep_last = job.checkpoint.keep_last;
  c.resume = opts.resume.empty() ? job.checkpoint.resume : opts.resume;
  c.fingerprint = job_fingerprint(job, schedule);
  c.allowed_changes = job.checkpoint.allow_changes;
  c.allowed_changes.insert(c.allowed_changes.end(), opts.allow_changes.begin(), opts.allow_changes.end());
}

// One rank's run: the model, data, sparsity and optimizer from the job in
// this order (each step's random draws come after the previous step's), then
// handed to run_training.
TrainingSummary run_rank(const JobConfig& job, const SparsitySchedule& schedule, ModulePtr model,
                         const JobRunOptions& opts, Communicator* comm, Device device) {
  manual_seed(job.seed);

  // The model (validation's, or built now: either way drawn from its own
  // generator, not from the stream just seeded), on the device; the data and
  // loaders. The schedule was resolved against the same model's parameters.
  if (model == nullptr) model = make_model(job.model);
  model->to(device);
  const Splits data = load_data(job);
  const LoaderOptions loaders = loader_options(job, comm, device);

  const std::vector<std::string> ruled = sparsify(*model, job, schedule);
  const std::vector<std::string> gmp_layers = prepare_gmp_layers(*model, job, ruled);

  // bf16/f16: parameters (sparse values included) in the job's dtype before
  // anyone takes them; the optimizer keeps f32 master weights for them.
  cast_parameters(*model, job.precision.dtype);

  // A graph model is given its graph once, in its weights' dtype as cast;
  // the mlp baseline reads the same node features without it.
  if (auto* net = dynamic_cast<GraphNet*>(model.get())) {
    COPPICE_CHECK(data.graph != nullptr, "data.dataset: model ", job.model.name, " needs a graph (docgraph), got ",
                  dataset_kind_name(job.data.dataset));
    net->set_graph(to_device(data.graph->adjacency(), device));
  }

  // Every rank starts from rank 0's parameters, sparse patterns included.
  if (comm != nullptr) replicate_parameters(*model, *comm);

  // The optimizer over the parameters as apply_sparsity left them.
  std::unique_ptr<Optimizer> optimizer = make_optimizer(job.optimizer, model->parameters());

  TrainComponents c(*model, DataLoader(data.train, loaders.train), *optimizer);
  if (data.validation != nullptr && job.evaluation.split == EvalSplit::kValidation)
    c.validation.emplace(data.validation, loaders.eval);
  if (data.test != nullptr) c.test.emplace(data.test, loaders.eval);
  c.device = device;
  c.seed = job.seed;
  c.comm = comm;
  if (comm != nullptr) c.grad_sync = grad_sync_options(job.distributed);
  c.grad_clip = job.optimizer.grad_clip;
  LossScaler scaler(job.precision.loss_scale);
  c.loss_scaler = &scaler;
  if (job.training.steps)
    c.steps = *job.training.steps;
  else
    c.epochs = *job.training.epochs;
  c.cuda_graph = job.training.cuda_graph;
  c.nonfinite = job.training.nonfinite;
  const int64_t total_steps = total_training_steps(c);
  c.stop_at_step = opts.stop_at_step;
  c.keep_going = opts.keep_going;

  // Always a scheduler (constant included), so that every checkpoint records
  // its position and a resumed run finds one.
  LrScheduler scheduler(*optimizer, job_lr_schedule(job, total_steps));
  c.scheduler = &scheduler;

  std::optional<MaskUpdater> updater;
  std::optional<GmpPruner> gmp;
  std::optional<SrSte> sr_ste;
  attach_mask_update(job, *model, schedule, ruled, gmp_layers, updater, gmp, sr_ste, c);
  c.densify_step = job.mask_update.densify_step;
  set_reporting(job, opts, schedule, c);
  return run_training(c);
}

}  // namespace

}  // namespace coppice

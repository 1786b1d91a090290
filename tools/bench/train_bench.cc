// train: steady-state training steps of whole models, per weight format and
// numeric mode (issue 8), beside tools/bench/torch_train.py (PyTorch, same
// models, dense and masked).
//
// Models:
//   mlp       MLP H-H-H-H-10 at batch B (H 4096, B 4096 on CUDA; 256 and 64
//             on the CPU; --hidden, --batch); sparse: the three HxH weights
//   lenet300  the model, batch size and sparsified weights (the rules'
//             selection) of configs/lenet300_rigl_90.yaml: LeNet-300-100,
//             batch 128, fc1..fc3 weights
//   gpt       the same of configs/gpt_bsr_static_90.yaml (not run unless
//             named): the GPT decoder (d 1024, 8 blocks, 16 heads, context
//             512), batch 32 of random token ids, its four block linears per
//             block (on the CPU a small one: context 64, width 64, 2 blocks
//             of 4 heads, batch 4); needs the job's corpus to validate the job
//   gpt_moe   configs/gpt_moe.yaml's model the same way (every block's MLP
//             8 experts, top-1; its load-balancing loss added to the loss
//             that is differentiated, as the trainer adds it); dense only
//             (the job sparsifies nothing)
//   vit       the same of configs/vit_sparse_attention.yaml: a ViT on 7x7
//             patches of 28x28 images with block-sparse attention, batch
//             128, blocks.*.mlp.fc1/fc2 weights. The transformer job of the
//             two because its step is a plain classification step (the
//             loop's cross-entropy on [N, classes] logits, like the other
//             two models), its inputs are synthetic (though validating its
//             job reads Fashion-MNIST's path, so its rows need the dataset
//             installed, which the GPU machine lacks), and its attention
//             already runs sparse (SDDMM, row softmax, SpMM) in the step.
// The job models are the ones validation builds from the job's own
// ModelConfig (load_validated_job on --config-dir/<job>.yaml), fed a fixed
// synthetic batch of what the model reads (model_input).
//
// Variants (--formats): dense; csr and bsr (32x32 blocks, or the largest
// power of two that divides a weight: LeNet gets 4x4 and 2x2) at 90, 95 and
// 98 % sparsity (--sparsity X: at X alone); nm 2:4 (its own 50 %). Only the weights named above are
// sparse; the rest stay dense.
// Modes (--modes): f32, tf32 (set_allow_tf32 for the case; CUDA only), bf16
// (the trainer's precision.dtype bf16: bf16 parameters and activations, f32
// master weights and momentum, the loss on f32 logits; no loss scale).
//
// --cuda-graph: the forward and backward of each step go through the
// trainer's GraphedStep (train/graph_step.h), replayed from a CUDA graph
// after one eager warm-up step and the capture; the rows are named
// "<model>+graph". Where a step cannot be captured the row says why.
//
// --step-read loss: each step also reads its loss to the host, as the
// trainer does ("<model>+loss" rows); --step-read check: with the trainer's
// non-finite check, the flags set by the fused step kernels and read with
// the loss ("<model>+check"): issue 30's cost, the two rows side by side;
// --step-read paired: the two alternate step by step in one process
// ("<model>+paired": the check's steps, with loss_read_median_ms and
// check_overhead beside them).
//
// --optimizer adamw: the GPT jobs' update instead of SGD (AdamW, lr 6e-4,
// weight decay 0.1, gradients clipped to norm 1.0 as the trainer clips
// them; "<model>+adamw" rows): the step the trainer's own is held to.
//
// --propagate on: before the steps, the output rules that sparsity
// propagation infers from one traced forward pass (models/propagation) are
// attached, every candidate whatever its density, as a job with
// sparsity.propagate and propagate_max_density 1 runs ("<model>+propagate" rows,
// inferred_rules beside them): the mlp's relu outputs become its next
// linears' CSR inputs where the weights are dense.
//
// --gelu tanh: the transformer models (vit, gpt) built with the job's
// model.options.gelu set to tanh (GPT-2's tanh GELU; torch_train.py --gelu
// tanh runs the same), rows "<model>+gelu_tanh"; erf (the default) sets it
// to the exact GELU, which is what every job runs today.
//
// Every case builds its model afresh (the masks are drawn once per variant
// and reused for every mode), then times the step: zero grads,
// forward, cross-entropy, backward, SGD (lr 0.01, momentum 0.9; the same for
// every model so that PyTorch runs the same update); warm-up steps, then
// each step timed on its own with the device synchronized.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "models/propagation/propagation.h"
#include "models/propagation/step_trace.h"
#include "models/zoo.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/density.h"
#include "optim/finite_check.h"
#include "optim/sgd.h"
#include "tensor/backend.h"
#include "tensor/dispatcher.h"
#include "tensor/error.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tensor/precision.h"
#include "tools/bench/suites.h"
#include "tools/bench/train_step_util.h"
#include "train/config.h"
#include "train/evaluate.h"
#include "train/graph_step.h"
#include "train/mixed_precision.h"

namespace coppice::bench {

namespace {

constexpr int64_t kClasses = 10;
constexpr uint64_t kModelSeed = 20261122;
constexpr uint64_t kDataSeed = 0xDA7Aull;

// A model ready to train: its module, one fixed batch, and the weights the
// sparse variants make sparse.
struct TrainModel {
  ModulePtr module;
  Tensor x, y;
  std::vector<std::string> sparse_weights;
  std::vector<int64_t> shape;  // the Result's shape: the input's, then the MLP's widths
};

struct TrainSetup {
  DeviceCase dc;
  Device device = Device::cpu();
  int64_t hidden = 0, batch = 0;  // mlp only
  int warmup = 0, steps = 0;
  std::string config_dir;
  bool cuda_graph = false;
  std::string step_read;   // "", "loss" or "check" (--step-read)
  std::string optimizer;   // "sgd" or "adamw" (--optimizer)
  int64_t block = 32;      // bsr (--block)
  std::string gelu;        // "erf" or "tanh" (--gelu): the transformer models' model.options.gelu
  bool propagate = false;  // --propagate on: inferred output rules attached
};

// The models built with a GELU MLP, whose activation --gelu sets.
bool has_gelu(const std::string& model) { return model == "vit" || model == "gpt" || model == "gpt_moe"; }

struct Variant {
  std::string format;  // "dense", "csr", "bsr", "nm"
  double sparsity;     // NaN for dense
};

struct Mode {
  std::string name;  // the Result's dtype: "f32", "tf32", "bf16"
  bool allow_tf32;
  // The parameters' and activations' dtype; bf16 trains as the trainer's
  // precision.dtype bf16 does (train/mixed_precision.h): bf16 parameters,
  // f32 master weights and momentum in the optimizer, the loss on f32 logits.
  DType dtype;
};

// The GPT jobs' update (configs/gpt_dense.yaml's optimizer section).
constexpr double kGptLr = 6e-4, kGptWeightDecay = 0.1, kGptGradClip = 1.0;

// --optimizer: SGD with momentum (torch_train.py's update) or the GPT jobs' AdamW.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const std::vector<Variable>& params) {
  if (name == "adamw") {
    AdamWOptions o;
    o.lr = kGptLr;
    o.weight_decay = kGptWeightDecay;
    return std::make_unique<AdamW>(params, o);
  }
  SgdOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  return std::make_unique<Sgd>(params, so);
}

std::string job_path(const TrainSetup& s, const std::string& model) {
  if (model == "lenet300") return s.config_dir + "/lenet300_rigl_90.yaml";
  if (model == "vit") return s.config_dir + "/vit_sparse_attention.yaml";
  if (model == "gpt") return s.config_dir + "/gpt_bsr_static_90.yaml";
  if (model == "gpt_moe") return s.config_dir + "/gpt_moe.yaml";
  return "";
}

TrainModel make_mlp(const TrainSetup& s) {
  Generator model_gen(kModelSeed);
  LayerOptions lo;
  lo.dtype = DType::kF32;
  lo.device = s.device;
  TrainModel m;
  const std::vector<int64_t> sizes = {s.hidden, s.hidden, s.hidden, s.hidden, kClasses};
  m.module = std::make_shared<MLP>(sizes, lo, model_gen);
  m.sparse_weights = {"fc1.weight", "fc2.weight", "fc3.weight"};
  m.shape = {s.batch};
  m.shape.insert(m.shape.end(), sizes.begin(), sizes.end());
  Generator data_gen = Generator::keyed(kDataSeed, 1, 0, 0);
  m.x = randn({s.batch, s.hidden}, TensorOptions(DType::kF32, s.device), data_gen);
  m.y = randint(0, kClasses, {s.batch}, TensorOptions(DType::kI64, s.device), data_gen);
  return m;
}

// A job's model as run_job gets it (the one validation built), with the
// parameters its resolved sparsity rules select, and a synthetic batch of
// what the model reads (model_input).
TrainModel make_job_model(const TrainSetup& s, const std::string& name) {
  const std::string path = job_path(s, name);
  // On the CPU the GPT job's own model takes minutes a step: a small one of
  // the same shape (torch_train.py's GPT_CPU: context 64, width 64, 2 blocks
  // of 4 heads, batch 4).
  std::vector<std::string> overrides;
  if ((name == "gpt" || name == "gpt_moe") && !s.device.is_cuda()) {
    overrides = {"model.options.dim=64", "model.options.layers=2", "model.options.heads=4", "model.options.context=64",
                 "data.seq_len=64",      "data.stride=64",         "data.batch_size=4"};
  }
  if (has_gelu(name)) overrides.push_back("model.options.gelu=" + s.gelu);
  absl::StatusOr<ValidatedJob> job = load_validated_job(path, overrides);
  if (!job.ok()) fail("bench train: ", path, ": ", job.status().message());
  TrainModel m;
  m.module = std::move(job->model);
  m.module->to(s.device);
  for (const ParameterRule& r : job->schedule.parameters) {
    if (m.module->parameter(r.selector.pattern).dim() == 2) m.sparse_weights.push_back(r.selector.pattern);
  }
  const ModelInput in = model_input(job->config.model);
  Shape input = {job->config.data.loader.batch_size};
  input.insert(input.end(), in.example.begin(), in.example.end());
  m.shape.assign(input.begin(), input.end());
  Generator data_gen = Generator::keyed(kDataSeed, 1, 0, 0);
  if (in.kind == InputKind::kTokens) {  // token ids [N, T] and the next token of every position
    m.x = randint(0, in.classes, input, TensorOptions(DType::kI64, s.device), data_gen);
    m.y = randint(0, in.classes, input, TensorOptions(DType::kI64, s.device), data_gen);
  } else {
    m.x = randn(input, TensorOptions(DType::kF32, s.device), data_gen);
    m.y = randint(0, in.classes, {input.front()}, TensorOptions(DType::kI64, s.device), data_gen);
  }
  return m;
}

TrainModel make_train_model(const TrainSetup& s, const std::string& name) {
  return name == "mlp" ? make_mlp(s) : make_job_model(s, name);
}

// Why a mode does not run on this device, or "" when it does.
std::string mode_skip_reason(const Mode& mode, bool cuda) {
  if (mode.allow_tf32 && !cuda) return "skipped: TF32 is a CUDA mode (on the CPU it would repeat f32)";
  return "";
}

std::vector<Variant> variants_of(const Config& config) {
  std::vector<std::string> formats = config.train_formats;
  if (formats.empty()) formats = {"dense", "csr", "bsr", "nm"};
  std::vector<Variant> out;
  for (const std::string& f : formats) {
    if (f == "dense") out.push_back({f, kNaN});
    if (f == "csr" || f == "bsr") {
      const std::vector<double> sparsities =
          config.sparsity_given ? std::vector<double>{config.sparsity} : std::vector<double>{0.9, 0.95, 0.98};
      for (double sp : sparsities) out.push_back({f, sp});
    }
    if (f == "nm") out.push_back({f, 0.5});
  }
  return out;
}

std::vector<Mode> modes_of(const Config& config) {
  std::vector<std::string> names = config.train_modes;
  if (names.empty()) names = {"f32", "tf32", "bf16"};
  std::vector<Mode> out;
  for (const std::string& n : names) out.push_back({n, n == "tf32", n == "bf16" ? DType::kBF16 : DType::kF32});
  return out;
}

Result base_result(const TrainSetup& s, const std::string& model, const Variant& v, const Mode& mode) {
  Result r;
  r.suite = "train";
  r.op = model;
  if (has_gelu(model) && s.gelu == "tanh") r.op += "+gelu_tanh";
  if (s.cuda_graph) r.op += "+graph";
  if (!s.step_read.empty()) r.op += "+" + s.step_read;
  if (s.optimizer != "sgd") r.op += "+" + s.optimizer;
  if (s.propagate) r.op += "+propagate";
  r.device = s.dc.label;
  r.dtype = mode.name;
  r.format = v.format;
  r.sparsity = v.sparsity;
  describe_device(s.dc.cuda, mode.dtype, "gflops", &r);
  return r;
}

int64_t total_fallbacks() {
  int64_t n = 0;
  for (const auto& [key, count] : Dispatcher::instance().fallback_counts()) n += count;
  return n;
}

void run_case(const TrainSetup& s, const std::string& model_name, const Variant& v, const Mode& mode, MaskCache* masks,
              Result* r) {
  TrainModel m = make_train_model(s, model_name);
  r->shape = m.shape;
  int64_t dense_numel = 0, stored = 0, sparse_nnz = 0;
  for (const auto& [name, p] : m.module->named_parameters()) dense_numel += p.numel();
  double smallest_block = kNaN;
  if (v.format != "dense") {
    WeightPattern pattern;
    pattern.format = v.format;
    pattern.sparsity = v.sparsity;
    pattern.block = s.block;
    uint64_t purpose = 1;
    for (const std::string& name : m.sparse_weights) {
      const Shape& shape = m.module->parameter(name).shape();
      if (v.format == "nm" && shape[1] % pattern.m != 0) {
        fail(name, " [", shape[0], ", ", shape[1], "]: ", pattern.n, ":", pattern.m, " needs columns divisible by ",
             pattern.m);
      }
      if (v.format == "bsr") {
        smallest_block =
            std::fmin(smallest_block, static_cast<double>(bsr_block_for(shape[0], shape[1], pattern.block)));
      }
      sparse_nnz += sparsify_parameter(*m.module, name, pattern, purpose++, masks);
    }
    r->nnz = sparse_nnz;
  }
  for (const auto& [name, p] : m.module->named_parameters()) {
    stored += p.value().is_sparse() ? sparse_impl(p.value(), "bench train").nnz() : p.numel();
  }
  if (s.propagate) {
    // As a job with sparsity.propagate: the rules inferred from a traced step, attached.
    const propagation::StepTrace trace = propagation::trace_forward(*m.module, Variable(m.x));
    SparsitySchedule inferred;
    propagation::PropagateOptions every_candidate;  // the structural choice, whatever the density
    every_candidate.max_density = 1.0;
    inferred.outputs = propagation::inferred_rules(propagation::propagate(trace, s.device.type, {}, every_candidate));
    if (!inferred.outputs.empty()) m.module->apply_sparsity(inferred);
    r->extra.emplace_back("inferred_rules", static_cast<double>(inferred.outputs.size()));
  }
  // As run_job: the cast after sparsifying (patterns kept), before the optimizer takes the parameters.
  if (mode.dtype != DType::kF32) cast_parameters(*m.module, mode.dtype);
  const Tensor x = cast_inputs(m.x, model_dtype(*m.module));
  const std::vector<Variable> params = trainable_parameters(*m.module);
  std::unique_ptr<Optimizer> optimizer = make_optimizer(s.optimizer, params);
  const double grad_clip = s.optimizer == "adamw" ? kGptGradClip : 0.0;

  Tensor last_loss;
  auto forward_backward = [&](const Tensor& inputs, const Tensor& targets) {
    // A language model's [N, T, vocab] logits: every position an example, as the trainer counts them.
    const auto [logits, flat_targets] = flatten_for_loss(logits_for_loss((*m.module)(Variable(inputs))), targets);
    const Variable loss = cross_entropy(logits, flat_targets);
    Variable objective = loss;  // plus a mixture of experts' load balancing, as the trainer's
    for (const Variable& aux : m.module->auxiliary_losses()) objective = add(objective, to_dtype(aux, loss.dtype()));
    objective.backward();
    return StepOutputs{loss.value(), logits.value(), flat_targets};
  };
  std::optional<GraphedStep> graph;
  if (s.cuda_graph) graph.emplace(s.device);
  double read_sink = 0.0;
  int64_t calls = 0;  // "paired": odd calls with the check, even ones without
  auto step = [&] {
    optimizer->zero_grad();
    last_loss = graph ? graph->run(*m.module, x, m.y, 1.0, forward_backward).loss : forward_backward(x, m.y).loss;
    const bool check = s.step_read == "check" || (s.step_read == "paired" && calls++ % 2 == 1);
    // The trainer's step under training.on_nonfinite: stop (train/trainer.cc):
    // with check, a flag per parameter set by the fused step kernels (and by
    // clipping's norms), read with the loss; with clipping, the norm and its
    // factor stay on the device and the optimizer's kernels apply it.
    std::optional<NonfiniteFlag> flags;
    if (check) flags.emplace(static_cast<int64_t>(params.size()) + 1);
    NonfiniteFlag* health = flags ? &*flags : nullptr;
    const Tensor factor = grad_clip > 0.0 ? clip_grad_norm_on_device(params, grad_clip, 2.0, health).factor : Tensor();
    optimizer->step(1.0, grad_clip > 0.0 ? nullptr : health, factor);
    if (!check) {
      if (!s.step_read.empty()) read_sink += Variable(last_loss).item();  // the trainer's read before issue 30
      return;
    }
    const Tensor loss = last_loss.reshape({1});
    read_sink += cat({loss, flags->value().to(loss.dtype()).to(loss.device())})
                     .to(Device::cpu())
                     .to(DType::kF64)
                     .to_vector<double>()[0];
  };
  const bool tf32_before = allow_tf32();
  set_allow_tf32(mode.allow_tf32);
  Dispatcher::instance().reset_fallback_counts();
  std::vector<double> samples;
  try {
    samples = time_steps(step, s.device, s.warmup, s.steps);
  } catch (...) {
    set_allow_tf32(tf32_before);
    throw;
  }
  set_allow_tf32(tf32_before);
  const int64_t fallbacks = total_fallbacks();
  if (fallbacks > 0) {
    std::string keys;
    for (const auto& [key, count] : Dispatcher::instance().fallback_counts()) keys += " " + key;
    std::fprintf(stderr, "train %s %s: dense fallbacks:%s\n", model_name.c_str(), v.format.c_str(), keys.c_str());
  }
  if (graph && graph->replays() == 0) {
    fail("cuda graph: no step was replayed (", graph->declined().empty() ? "never captured" : graph->declined(), ")");
  }
  if (std::isnan(read_sink)) r->extra.emplace_back("nonfinite_loss_read", 1.0);
  if (s.step_read == "paired") {
    // Steps alternate in one process: the check's cost without the spread
    // between processes. The row times the steps with the check; the steps
    // without it are its "loss_read_median_ms".
    std::vector<double> with, without;
    for (size_t k = 0; k < samples.size(); ++k)
      ((s.warmup + static_cast<int64_t>(k)) % 2 == 1 ? with : without).push_back(samples[k]);
    Result plain;
    fill_step_timing(without, &plain);
    samples = with;
    r->extra.emplace_back("loss_read_median_ms", plain.median_ms);
  }
  fill_step_timing(samples, r);
  if (s.step_read == "paired")
    r->extra.emplace_back("check_overhead", r->median_ms / extra_value(*r, "loss_read_median_ms") - 1.0);
  const int64_t batch = m.shape[0];
  if (model_name == "mlp") r->flops = 6.0 * static_cast<double>(batch) * static_cast<double>(stored);
  r->extra.emplace_back("batch", static_cast<double>(batch));
  r->extra.emplace_back("samples_per_s", static_cast<double>(batch) / (r->median_ms * 1e-3));
  if (m.x.dtype() == DType::kI64) {
    r->extra.emplace_back("tokens_per_s", static_cast<double>(m.x.numel()) / (r->median_ms * 1e-3));
  }
  r->extra.emplace_back("sparse_weights", static_cast<double>(m.sparse_weights.size()));
  r->extra.emplace_back("params_dense", static_cast<double>(dense_numel));
  r->extra.emplace_back("params_stored", static_cast<double>(stored));
  r->extra.emplace_back("bsr_block", smallest_block);
  r->extra.emplace_back("training_state_bytes", training_state_bytes(params, *optimizer));
  r->extra.emplace_back("dense_fallbacks_per_step",
                        static_cast<double>(fallbacks) / static_cast<double>(s.warmup + s.steps));
  r->extra.emplace_back("final_loss", last_loss.defined() ? last_loss.item() : kNaN);
  if (graph) r->extra.emplace_back("graph_replays", static_cast<double>(graph->replays()));
}

void log_train_result(const Result& r) {
  std::string what = r.op + " " + r.format;
  if (std::isfinite(r.sparsity)) what += str_cat(" ", std::llround(r.sparsity * 100), "%");
  if (r.status != "ok") {
    std::fprintf(stderr, "train %-6s %-4s %-18s %s\n", r.device.c_str(), r.dtype.c_str(), what.c_str(),
                 r.status.c_str());
    return;
  }
  std::fprintf(stderr, "train %-6s %-4s %-18s %10.3f ms/step  state %.2f MB  loss %g\n", r.device.c_str(),
               r.dtype.c_str(), what.c_str(), r.median_ms, extra_value(r, "training_state_bytes") * 1e-6,
               extra_value(r, "final_loss"));
}

}  // namespace

void run_train(const Config& config, std::vector<Result>* results) {
  std::vector<std::string> models = config.train_models;
  if (models.empty()) models = {"mlp", "lenet300", "vit"};
  for (const DeviceCase& dc : devices_to_run(config)) {
    TrainSetup s;
    s.dc = dc;
    s.device = dc.cuda ? Device::cuda(0) : Device::cpu();
    s.hidden = config.hidden > 0 ? config.hidden : (dc.cuda ? kTrainHidden : kTrainCpuHidden);
    s.batch = config.batch > 0 ? config.batch : (dc.cuda ? kTrainBatch : kTrainCpuBatch);
    s.steps = config.steps > 0 ? config.steps : (dc.cuda ? kTrainSteps : kTrainCpuSteps);
    s.warmup = config.warmup_given ? config.warmup : (dc.cuda ? kTrainWarmup : kTrainCpuWarmup);
    s.config_dir = config.config_dir;
    s.cuda_graph = config.cuda_graph;
    s.step_read = config.step_read;
    s.optimizer = config.optimizer;
    s.block = config.train_block;
    s.gelu = config.train_gelu;
    s.propagate = config.train_propagate;
    if (s.cuda_graph) s.warmup = std::max(s.warmup, 2);  // the eager step and the capture are not timed
    const std::string device_skip = dc.cuda ? cuda_skip_reason() : "";
    for (const std::string& model : models) {
      for (const Variant& v : variants_of(config)) {
        MaskCache masks;  // the variant's masks (on the device), drawn once for all modes
        for (const Mode& mode : modes_of(config)) {
          Result r = base_result(s, model, v, mode);
          r.status = !device_skip.empty() ? device_skip : mode_skip_reason(mode, dc.cuda);
          if (r.status.empty()) {
            r.status = "ok";
            try {
              run_case(s, model, v, mode, &masks, &r);
            } catch (const std::exception& e) { r.status = std::string("error: ") + e.what(); }
          }
          log_train_result(r);
          results->push_back(std::move(r));
        }
      }
    }
  }
}

}  // namespace coppice::bench

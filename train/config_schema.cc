#include "train/config_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <sstream>

#include "models/zoo.h"
#include "sparse/formats.h"
#include "tensor/error.h"
#include "train/error_quote.h"
#include "train/yaml_limits.h"
#include "yaml-cpp/yaml.h"

namespace coppice {

const char* key_type_name(KeyType type) {
  switch (type) {
    case KeyType::kSection: return "a section (a map)";
    case KeyType::kList: return "a list";
    case KeyType::kFreeMap: return "a map";
    case KeyType::kInt: return "an integer";
    case KeyType::kDouble: return "a number";
    case KeyType::kBool: return "a boolean (true/false)";
    case KeyType::kString: return "a string";
    case KeyType::kStringList: return "a list of strings";
    case KeyType::kScalar: return "a scalar (or a list of scalars)";
  }
  return "?";
}

namespace {

using K = KeyType;

// The job's identity and device, the model and the data.
std::vector<SchemaKey> job_keys() {
  return {
      {"name", K::kString, "the job's name in logs (default: the file name without .yaml)"},
      {"seed", K::kInt, "seed of initialization, masks and random sparsifiers (0)"},
      {"device", K::kString, "auto | cpu | cuda | cuda:N (auto: the GPU when there is one)"},

      {"model", K::kSection, "the model, built by models/zoo.h's make_model"},
      {"model.name", K::kString, str_cat(str_join(model_names(), " | "), " (required)")},
      {"model.options", K::kFreeMap,
       "the model's options (models/zoo.h), e.g. sizes: [784, 300, 100, 10]; seed defaults to the job's"},
      {"model.options.*", K::kScalar, "an option value"},

      {"data", K::kSection, "the dataset and batching"},
      {"data.dataset", K::kString, "fashion_mnist | synthetic | text (fashion_mnist)"},
      {"data.path", K::kString,
       "fashion_mnist: the IDX directory; text: the text file, or a directory whose files (data.suffix) are read "
       "in path order (default: the installed perldiag.pod)"},
      {"data.batch_size", K::kInt, "training batch size, >= 1 (64)"},
      {"data.eval_batch_size", K::kInt, "evaluation batch size (0: batch_size)"},
      {"data.validation_split", K::kDouble, "fraction of the training set held out for validation, in [0, 1) (0)"},
      {"data.shuffle", K::kBool, "shuffle every epoch (true)"},
      {"data.shuffle_seed", K::kInt, "seed of the shuffle (default: seed)"},
      {"data.drop_last", K::kBool, "leave out a final short batch (false)"},
      {"data.flatten", K::kBool, "fashion_mnist: images as [N, 784] instead of [N, 1, 28, 28] (false)"},
      {"data.normalize", K::kBool, "fashion_mnist: (x - mean) / std after scaling to [0, 1] (true)"},
      {"data.mean", K::kDouble, "fashion_mnist: normalization mean (0.2860)"},
      {"data.std", K::kDouble, "fashion_mnist: normalization std, > 0 (0.3530)"},
      {"data.seq_len", K::kInt, "text: tokens per window, >= 1 (64)"},
      {"data.stride", K::kInt, "text: distance between window starts (0: seq_len)"},
      {"data.suffix", K::kString,
       "text, a directory: read the files whose names end in this, e.g. .rst.txt (\"\": every file)"},
      {"data.vocab", K::kString, "text: distinct (the corpus's distinct bytes) | bytes (all 256) (distinct)"},
      {"data.synthetic", K::kSection, "synthetic: Gaussian blobs (data/synthetic.h)"},
      {"data.synthetic.examples", K::kInt, "training examples, >= 1 (1000)"},
      {"data.synthetic.test_examples", K::kInt, "test examples, held out from the same draw (0: none)"},
      {"data.synthetic.features", K::kInt, "features per example, >= 1 (2)"},
      {"data.synthetic.classes", K::kInt, "classes, >= 1 (3)"},
      {"data.synthetic.center_scale", K::kDouble, "std of the class centers, >= 0 (5)"},
      {"data.synthetic.spread", K::kDouble, "std around a center, >= 0 (1)"},
      {"data.synthetic.seed", K::kInt, "seed of the data (default: seed)"},
  };
}

// Which weights are sparse and how; outputs sparsified.
std::vector<SchemaKey> sparsity_keys() {
  return {
      {"sparsity", K::kSection, "which weights are sparse, in which format, and sparsified outputs"},
      {"sparsity.density", K::kDouble,
       "overall density of the weights that rules select, in (0, 1] (1); gmp: its final density"},
      {"sparsity.distribution", K::kString, "uniform | er | erk: how density is split over layers (erk)"},
      {"sparsity.overrides", K::kFreeMap, "fixed densities by parameter name, e.g. fc3.weight: 0.5"},
      {"sparsity.overrides.*", K::kDouble, "a density in (0, 1]"},
      {"sparsity.dense", K::kStringList, "parameters kept dense by name"},
      {"sparsity.rules", K::kList, "parameter rules (sparsifiers/schedule.h)"},
      {"sparsity.rules[]", K::kSection, "one rule: name or regex, format, density, sparsifier"},
      {"sparsity.rules[].name", K::kString, "select a parameter by exact name"},
      {"sparsity.rules[].regex", K::kString,
       "select parameters whose whole name matches (RE2 syntax, at most 1000 bytes)"},
      {"sparsity.rules[].format", K::kString, str_cat(str_join(format_names(), " | "), " (dense)")},
      {"sparsity.rules[].block_rows", K::kInt,
       str_cat(str_join(block_format_names(), " / "), ": block rows (required for them)")},
      {"sparsity.rules[].block_cols", K::kInt,
       str_cat(str_join(block_format_names(), " / "), ": block columns (default: block_rows)")},
      {"sparsity.rules[].n", K::kInt, "nm: kept values per group (2, or the nm sparsifier's n)"},
      {"sparsity.rules[].m", K::kInt, "nm: group size (4, or the nm sparsifier's m)"},
      {"sparsity.rules[].transposable", K::kBool,
       "nm: the mask n:m along columns too, the best pattern of each m x m tile, so W^T is n:m (m <= 4; "
       "static masks only) (false)"},
      {"sparsity.rules[].density", K::kDouble,
       "this rule's density, in (0, 1] (default: sparsity.density split by distribution); without a sparsifier, "
       "magnitude (block_magnitude for bsr and blocked_ell: whole blocks)"},
      {"sparsity.rules[].sparsifier", K::kFreeMap,
       "initial sparsifier {name: magnitude, sparsity: 0.9} (format nm: the nm sparsifier)"},
      {"sparsity.rules[].sparsifier.*", K::kScalar, "the sparsifier's name or a parameter"},
      {"sparsity.outputs", K::kList, "module output rules: sparsifiers on activations and gradients"},
      {"sparsity.outputs[]", K::kSection, "one rule: name or regex of a module, forward, backward"},
      {"sparsity.outputs[].name", K::kString, "select a module by exact name"},
      {"sparsity.outputs[].regex", K::kString, "select modules whose whole name matches (RE2 syntax)"},
      {"sparsity.outputs[].forward", K::kList, "one stage per module output"},
      {"sparsity.outputs[].forward[]", K::kSection, "inline, temporary_format, external, format"},
      {"sparsity.outputs[].forward[].inline", K::kFreeMap, "inline sparsifier {name, params} (none: keep all)"},
      {"sparsity.outputs[].forward[].inline.*", K::kScalar, "the sparsifier's name or a parameter"},
      {"sparsity.outputs[].forward[].temporary_format", K::kString, "format between the two sparsifiers (dense)"},
      {"sparsity.outputs[].forward[].external", K::kFreeMap, "external sparsifier {name, params} (none: keep all)"},
      {"sparsity.outputs[].forward[].external.*", K::kScalar, "the sparsifier's name or a parameter"},
      {"sparsity.outputs[].forward[].format", K::kString, "the output's format (dense)"},
      {"sparsity.outputs[].backward", K::kList, "one stage per module input's gradient (same keys as forward)"},
      {"sparsity.outputs[].backward[]", K::kSection, "inline, temporary_format, external, format"},
      {"sparsity.outputs[].backward[].inline", K::kFreeMap, "inline sparsifier {name, params}"},
      {"sparsity.outputs[].backward[].inline.*", K::kScalar, "the sparsifier's name or a parameter"},
      {"sparsity.outputs[].backward[].temporary_format", K::kString, "format between the two sparsifiers"},
      {"sparsity.outputs[].backward[].external", K::kFreeMap, "external sparsifier {name, params}"},
      {"sparsity.outputs[].backward[].external.*", K::kScalar, "the sparsifier's name or a parameter"},
      {"sparsity.outputs[].backward[].format", K::kString, "the gradient's format"},
  };
}

// The optimizer, its learning-rate schedule and how masks change.
std::vector<SchemaKey> optimization_keys() {
  return {
      {"optimizer", K::kSection, "the optimizer (optim/sgd.h, optim/adam.h)"},
      {"optimizer.name", K::kString, "sgd | adam | adamw (sgd)"},
      {"optimizer.lr", K::kDouble, "learning rate, > 0 (1e-3)"},
      {"optimizer.momentum", K::kDouble, "sgd: momentum in [0, 1) (0)"},
      {"optimizer.dampening", K::kDouble, "sgd: dampening in [0, 1] (0)"},
      {"optimizer.nesterov", K::kBool, "sgd: Nesterov momentum; needs momentum > 0 and dampening 0 (false)"},
      {"optimizer.beta1", K::kDouble, "adam/adamw: in [0, 1) (0.9)"},
      {"optimizer.beta2", K::kDouble, "adam/adamw: in [0, 1) (0.999)"},
      {"optimizer.eps", K::kDouble, "adam/adamw: > 0 (1e-8)"},
      {"optimizer.weight_decay", K::kDouble, ">= 0 (sgd/adam 0, adamw 0.01)"},
      {"optimizer.grad_clip", K::kDouble, "max global gradient norm, >= 0 (0: off)"},

      {"lr_schedule", K::kSection, "learning-rate schedule (optim/lr_schedule.h)"},
      {"lr_schedule.name", K::kString, "constant | step | cosine (constant)"},
      {"lr_schedule.step_size", K::kInt, "step: multiply by gamma every step_size steps (required, >= 1)"},
      {"lr_schedule.gamma", K::kDouble, "step: factor in (0, 1] (0.1)"},
      {"lr_schedule.t_max", K::kInt, "cosine: period in steps (0: training steps - warmup_steps)"},
      {"lr_schedule.eta_min", K::kDouble, "cosine: final lr, in [0, lr] (0)"},
      {"lr_schedule.warmup_steps", K::kInt, "linear warm-up steps before the schedule, >= 0 (0)"},
      {"lr_schedule.warmup_start_factor", K::kDouble, "lr factor at the first warm-up step, in [0, 1] (0)"},

      {"mask_update", K::kSection, "how masks change (optim/mask_updater.h, optim/gmp.h, optim/sr_ste.h)"},
      {"mask_update.method", K::kString,
       "dense | static | set | rigl | rigl_nm (RigL within the groups of nm layers) | snfs | gmp | sr_ste (dense "
       "weights trained through their n:m projection, every rule nm) (dense)"},
      {"mask_update.start_step", K::kInt, "set/rigl/snfs/gmp: first update step, >= 0 (0)"},
      {"mask_update.end_step", K::kInt, "set/rigl/snfs/gmp: no update at or after it, > start_step (required)"},
      {"mask_update.interval", K::kInt,
       "set/rigl/snfs: steps between updates, >= 1 (100); sr_ste: steps between recomputations of the n:m masks "
       "from the dense weights, >= 1 (1)"},
      {"mask_update.drop_fraction", K::kDouble, "set/rigl/snfs: fraction of each layer's nnz dropped, in (0, 1] (0.3)"},
      {"mask_update.drop_schedule", K::kString, "set/rigl/snfs: constant | cosine | linear decay (cosine)"},
      {"mask_update.prune", K::kString, "set/rigl/snfs: magnitude | movement (magnitude)"},
      {"mask_update.growth", K::kString,
       "set/rigl/rigl_nm/snfs: a registered growth policy by name instead of the method's (random, gradient, "
       "momentum; a program adds its own with register_growth_policy)"},
      {"mask_update.allow_regrow_dropped", K::kBool, "set/rigl/snfs: dropped entries may regrow at once (false)"},
      {"mask_update.initial_density", K::kDouble, "gmp: density at start_step, in (0, 1] (1)"},
      {"mask_update.final_density", K::kDouble,
       "gmp: density from end_step on, in (0, initial_density] (default: sparsity.density; one is required)"},
      {"mask_update.frequency", K::kInt, "gmp: steps between pruning steps, >= 1 (100)"},
      {"mask_update.decay", K::kDouble,
       "sr_ste: lambda of the sparse-refined term lambda * (1 - mask) * W added to the dense weights' gradient, "
       ">= 0 (2e-4; 0: plain straight-through)"},
  };
}

// How the run goes: length, evaluation, checkpoints, logging, precision, ranks.
std::vector<SchemaKey> run_keys() {
  return {
      {"training", K::kSection, "training length: exactly one of epochs and steps"},
      {"training.epochs", K::kInt, ">= 1"},
      {"training.steps", K::kInt, "optimizer steps, >= 1"},
      {"training.cuda_graph", K::kBool,
       "on a CUDA device, replay each ordinary step's forward and backward from a CUDA graph, captured again after "
       "a mask update; off with a message where a step cannot be captured (dropout, host reads), for data-parallel "
       "runs and for output sparsifiers (false)"},
      {"training.on_nonfinite", K::kString,
       "stop | skip_step: when a step's loss or a gradient is inf or NaN (or a mask update would rank such "
       "scores): stop with exit 1 naming the step, the loss or the parameter and the last finite checkpoint; or "
       "skip that step's optimizer and mask updates and go on (stop)"},
      {"training.max_consecutive_skips", K::kInt,
       "skip_step: steps skipped in a row before the next non-finite one stops the run (10); an f16 loss "
       "scaler's overflow skips are its own and not counted"},

      {"evaluation", K::kSection, "evaluation during training"},
      {"evaluation.every_steps", K::kInt, "evaluate every N steps (0: at the end of each epoch)"},
      {"evaluation.split", K::kString,
       "validation | test (test; text: validation); validation needs data.validation_split > 0"},
      {"evaluation.max_batches", K::kInt, "evaluate on at most N batches (0: all)"},

      {"checkpoint", K::kSection, "checkpoints, written by the trainer"},
      {"checkpoint.dir", K::kString, "directory to write checkpoints into (\"\": none)"},
      {"checkpoint.every_steps", K::kInt, "checkpoint every N steps (0: only at the end)"},
      {"checkpoint.keep_last", K::kInt, "keep the last K checkpoints of this run (0: all)"},
      {"checkpoint.resume", K::kString, "a checkpoint file or directory to resume from; must exist"},
      {"checkpoint.allow_changes", K::kStringList,
       "job settings a resume may change on purpose: fingerprint keys (optimizer.lr), prefixes (optimizer.*) or *"},

      {"logging", K::kSection, "metrics and progress"},
      {"logging.metrics", K::kString, "JSONL file of metrics, one record per logged step (\"\": none)"},
      {"logging.progress", K::kBool, "a progress line on stderr (true)"},
      {"logging.every_steps", K::kInt, "log every N steps, >= 1 (50)"},

      {"precision", K::kSection, "numeric settings of the run"},
      {"precision.allow_tf32", K::kBool,
       "f32 dense matrix products on CUDA may use TF32 tensor cores (~1e-3 relative error, several times faster) "
       "(false)"},
      {"precision.dtype", K::kString,
       "f32 | bf16 | f16: parameters (dense and sparse values) and activations; bf16/f16 keep f32 master weights in "
       "the optimizer and compute the loss in f32 (f32)"},
      {"precision.loss_scale", K::kString,
       "dynamic (GradScaler: 2^16, x2 after 2000 finite steps, x0.5 and skip on inf/NaN) | none | a number (static); "
       "(dynamic for f16, none otherwise)"},

      {"distributed", K::kSection, "data-parallel training; data.batch_size is per rank"},
      {"distributed.world_size", K::kInt, "ranks, >= 1 (1)"},
      {"distributed.backend", K::kString, "inproc (ranks as threads, CPU) | nccl (a process per GPU) (inproc)"},
      {"distributed.timeout_s", K::kDouble,
       "seconds a collective, the rendezvous or NCCL's start may take before the job aborts, > 0 (300)"},
      {"distributed.bucket_mb", K::kDouble, "dense gradient bucket size in MiB, > 0 (25)"},
      {"distributed.sparse_exchange", K::kString,
       "compact (sparse weights send their nnz values) | dense (densified, a baseline) (compact)"},
      {"distributed.topk_fraction", K::kDouble,
       "top-k with error feedback for dense gradients: fraction sent, in [0, 1); 0 off (0)"},
  };
}

// The schema is data: one list of keys per part of a job, in the order
// help and did-you-mean list them, each list short enough to read whole.
std::vector<SchemaKey> build_schema() {
  std::vector<SchemaKey> s = {{"", K::kSection, "the job"}};
  for (std::vector<SchemaKey> (*part)() : {job_keys, sparsity_keys, optimization_keys, run_keys}) {
    const std::vector<SchemaKey> keys = part();
    s.insert(s.end(), keys.begin(), keys.end());
  }
  return s;
}

KeyRange ints(int64_t min, int64_t max) {
  KeyRange r;
  r.min = min;
  r.max = max;
  return r;
}

KeyRange any_seed() {
  KeyRange r;
  r.seed = true;
  return r;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// From lo to hi; `ends` is "[]", "[)", "(]" or "()".
KeyRange reals(double lo, double hi, const char* ends = "[]") {
  KeyRange r;
  r.type = K::kDouble;
  r.lo = lo;
  r.hi = hi;
  r.lo_open = ends[0] == '(' || lo == -kInf;
  r.hi_open = ends[1] == ')' || hi == kInf;
  return r;
}

// The range of every numeric key of build_schema() (config_schema_test
// checks that none is missing). Contextual limits (end_step > start_step,
// eta_min <= lr, a step count <= the planned steps) are the loader's.
std::map<std::string, KeyRange> build_ranges() {
  const int64_t kMaxTextBytes = int64_t{1} << 30;  // data/text.h's kTextMaxBytes: a stride past it is one window
  return {
      {"seed", any_seed()},
      {"data.batch_size", ints(1, kMaxBatchSize)},
      {"data.eval_batch_size", ints(0, kMaxBatchSize)},
      {"data.validation_split", reals(0, 1, "[)")},
      {"data.shuffle_seed", any_seed()},
      // Inputs are scaled to [0, 1] before (x - mean) / std.
      {"data.mean", reals(0, 1)},
      {"data.std", reals(1e-6, 1)},
      {"data.seq_len", ints(1, kMaxDimension)},
      {"data.stride", ints(0, kMaxTextBytes)},
      {"data.synthetic.examples", ints(1, kMaxExamples)},
      {"data.synthetic.test_examples", ints(0, kMaxExamples)},
      {"data.synthetic.features", ints(1, kMaxDimension)},
      {"data.synthetic.classes", ints(1, kMaxDimension)},
      // f32 inputs: centers and spreads far past this only make inf and NaN.
      {"data.synthetic.center_scale", reals(0, 1e6)},
      {"data.synthetic.spread", reals(0, 1e6)},
      {"data.synthetic.seed", any_seed()},
      {"sparsity.density", reals(0, 1, "(]")},
      {"sparsity.overrides.*", reals(0, 1, "(]")},
      {"sparsity.rules[].block_rows", ints(1, kMaxDimension)},
      {"sparsity.rules[].block_cols", ints(1, kMaxDimension)},
      {"sparsity.rules[].n", ints(1, kMaxDimension)},
      {"sparsity.rules[].m", ints(1, kMaxDimension)},
      {"sparsity.rules[].density", reals(0, 1, "(]")},
      {"optimizer.lr", reals(0, 1e4, "(]")},
      {"optimizer.momentum", reals(0, 1, "[)")},
      {"optimizer.dampening", reals(0, 1)},
      {"optimizer.beta1", reals(0, 1, "[)")},
      {"optimizer.beta2", reals(0, 1, "[)")},
      {"optimizer.eps", reals(0, 1, "(]")},
      {"optimizer.weight_decay", reals(0, 1)},
      {"optimizer.grad_clip", reals(0, kInf)},
      {"lr_schedule.step_size", ints(1, kMaxSteps)},
      {"lr_schedule.gamma", reals(0, 1, "(]")},
      {"lr_schedule.t_max", ints(0, kMaxSteps)},
      {"lr_schedule.eta_min", reals(0, kInf)},
      {"lr_schedule.warmup_steps", ints(0, kMaxSteps)},
      {"lr_schedule.warmup_start_factor", reals(0, 1)},
      {"mask_update.start_step", ints(0, kMaxSteps)},
      {"mask_update.end_step", ints(1, kMaxSteps)},
      {"mask_update.interval", ints(1, kMaxSteps)},
      {"mask_update.drop_fraction", reals(0, 1, "(]")},
      {"mask_update.initial_density", reals(0, 1, "(]")},
      {"mask_update.final_density", reals(0, 1, "(]")},
      {"mask_update.frequency", ints(1, kMaxSteps)},
      {"mask_update.decay", reals(0, 1)},
      {"training.epochs", ints(1, kMaxSteps)},
      {"training.steps", ints(1, kMaxSteps)},
      {"training.max_consecutive_skips", ints(1, kMaxSteps)},
      {"evaluation.every_steps", ints(0, kMaxSteps)},
      {"evaluation.max_batches", ints(0, kMaxSteps)},
      {"checkpoint.every_steps", ints(0, kMaxSteps)},
      {"checkpoint.keep_last", ints(0, kMaxKeepLast)},
      {"logging.every_steps", ints(1, kMaxSteps)},
      {"distributed.world_size", ints(1, kMaxWorldSize)},
      {"distributed.timeout_s", reals(0, kMaxTimeoutSeconds, "(]")},
      {"distributed.bucket_mb", reals(0, kMaxBucketMb, "(]")},
      {"distributed.topk_fraction", reals(0, 1, "[)")},
      // A string key ("dynamic", "none" or a number): the number's range.
      // The loss is scaled in f32: a scale past f32's largest is inf itself.
      {"precision.loss_scale", reals(0, std::numeric_limits<float>::max(), "(]")},
  };
}

std::string parent_of(const std::string& pattern) {
  // The parent section pattern: strip the last ".name", or "[]" / ".*".
  if (pattern.size() >= 2 && pattern.compare(pattern.size() - 2, 2, "[]") == 0)
    return pattern.substr(0, pattern.size() - 2);
  const size_t dot = pattern.rfind('.');
  return dot == std::string::npos ? std::string() : pattern.substr(0, dot);
}

std::string last_name(const std::string& pattern) {
  const size_t dot = pattern.rfind('.');
  return dot == std::string::npos ? pattern : pattern.substr(dot + 1);
}

std::string join_key(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

std::string normalized(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool parses_int(const YAML::Node& n) {
  if (is_integer_literal(n.Scalar())) return true;  // too large for int64 too: the loader says it does not fit
  try {
    n.as<int64_t>();
    return true;
  } catch (const YAML::Exception&) { return false; }
}

bool parses_double(const YAML::Node& n) {
  try {
    n.as<double>();
    return true;
  } catch (const YAML::Exception&) { return false; }
}

bool parses_bool(const YAML::Node& n) {
  try {
    n.as<bool>();
    return true;
  } catch (const YAML::Exception&) { return false; }
}

}  // namespace

// A section or list value is checked key by key by the loader afterwards.
bool value_fits(const YAML::Node& value, KeyType type) {
  if (value.IsNull()) return true;  // "key=" resets to the default
  switch (type) {
    case K::kSection:
    case K::kFreeMap: return value.IsMap();
    case K::kList: return value.IsSequence();
    case K::kInt: return value.IsScalar() && parses_int(value);
    case K::kDouble: return value.IsScalar() && parses_double(value);
    case K::kBool: return value.IsScalar() && parses_bool(value);
    case K::kString: return value.IsScalar();
    case K::kScalar:  // a list of scalars too: model.options.sizes: [784, 300, 10]
    case K::kStringList: {
      if (value.IsScalar()) return true;
      if (!value.IsSequence()) return false;
      for (const auto& e : value)
        if (!e.IsScalar()) return false;
      return true;
    }
  }
  return false;
}

namespace {

struct Step {
  std::string key;     // map key, or
  int64_t index = -1;  // list index
};

// Sets `value` at steps[i..] under `node`; `pattern` and `shown` describe node.
void set_at(YAML::Node node, const std::vector<Step>& steps, size_t i, const YAML::Node& value) {
  const Step& s = steps[i];
  const bool last = i + 1 == steps.size();
  if (s.index >= 0) {
    if (last) {
      node[static_cast<size_t>(s.index)] = value;
    } else {
      set_at(node[static_cast<size_t>(s.index)], steps, i + 1, value);
    }
    return;
  }
  if (last) {
    node[s.key] = value;
  } else {
    set_at(node[s.key], steps, i + 1, value);
  }
}

}  // namespace

bool is_integer_literal(const std::string& text) {
  size_t i = text.empty() || (text[0] != '-' && text[0] != '+') ? 0 : 1;
  const bool hex = text.size() > i + 2 && text[i] == '0' && (text[i + 1] == 'x' || text[i + 1] == 'X');
  if (hex) i += 2;
  if (i == text.size()) return false;
  for (; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (!(hex ? std::isxdigit(c) : std::isdigit(c))) return false;
  }
  return true;
}

bool KeyRange::contains(int64_t v) const {
  if (type == K::kDouble) return contains(static_cast<double>(v));
  return seed ? v >= 0 : v >= min && v <= max;
}

bool KeyRange::contains(double v) const {
  if (type == K::kInt) return std::trunc(v) == v && v >= -0x1p63 && v < 0x1p63 && contains(static_cast<int64_t>(v));
  return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string KeyRange::text() const {
  if (seed) return str_cat("in [0, ", std::numeric_limits<uint64_t>::max(), "]");
  if (type == K::kInt) return str_cat("in [", min, ", ", max, "]");
  std::ostringstream os;
  os.precision(15);  // bounds in full: 16777216, not 1.67772e+07
  if (hi == std::numeric_limits<double>::infinity()) {
    os << (lo_open ? "> " : ">= ") << lo;
  } else {
    os << "in " << (lo_open ? "(" : "[") << lo << ", " << hi << (hi_open ? ")" : "]");
  }
  return os.str();
}

const KeyRange* key_range(const std::string& pattern) {
  static const std::map<std::string, KeyRange> ranges = build_ranges();
  auto it = ranges.find(pattern);
  return it == ranges.end() ? nullptr : &it->second;
}

const std::vector<SchemaKey>& job_schema() {
  static const std::vector<SchemaKey> schema = build_schema();
  return schema;
}

const SchemaKey* find_schema_key(const std::string& pattern) {
  static const std::map<std::string, const SchemaKey*> index = [] {
    std::map<std::string, const SchemaKey*> m;
    for (const SchemaKey& k : job_schema()) m[k.path] = &k;
    return m;
  }();
  auto it = index.find(pattern);
  return it == index.end() ? nullptr : it->second;
}

std::vector<std::string> schema_children(const std::string& pattern) {
  std::vector<std::string> out;
  for (const SchemaKey& k : job_schema()) {
    if (k.path.empty() || k.path.back() == ']' || k.path.back() == '*') continue;
    if (parent_of(k.path) == pattern) out.push_back(last_name(k.path));
  }
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev2(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    prev2 = prev;
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string w = normalized(word);
  for (const std::string& c : candidates)
    if (normalized(c) == w) return c;
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(w, normalized(c));
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  const size_t limit = std::max<size_t>(1, w.size() / 3);
  if (!best.empty() && best_d <= limit) return best;
  // A candidate that contains the word, or the word that contains it
  // ("rate" for "lr" is too far; "warmup" for "warmup_steps" is not).
  if (w.size() >= 3) {
    for (const std::string& c : candidates) {
      const std::string n = normalized(c);
      if (n.find(w) != std::string::npos || (n.size() >= 3 && w.find(n) != std::string::npos)) return c;
    }
  }
  return "";
}

std::string unknown_key_message(const std::string& path, const std::string& pattern, const std::string& key) {
  const std::string shown = join_key(path, shorten_for_error(key));
  const std::vector<std::string> here = schema_children(pattern);
  const std::string best = closest_match(key, here);
  if (!best.empty()) return str_cat(shown, ": unknown key; did you mean '", join_key(path, best), "'?");
  // The same name in another section ("lr" at the top: optimizer.lr).
  for (const SchemaKey& k : job_schema()) {
    if (k.path.empty() || k.path.back() == ']' || k.path.back() == '*') continue;
    if (last_name(k.path) == key && parent_of(k.path) != pattern)
      return str_cat(shown, ": unknown key; did you mean '", k.path, "' (in another section)?");
  }
  return str_cat(shown, ": unknown key; known keys here: ", str_join(here, ", "));
}

absl::Status apply_override(YAML::Node& root, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    return absl::InvalidArgumentError(str_cat("--set ", shorten_for_error(assignment), ": expected key.path=value"));
  const std::string key_path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  const std::string where = str_cat("--set ", shorten_for_error(key_path));

  // Split on '.', turning "rules[0]" into "rules", "0".
  std::vector<std::string> parts;
  {
    std::string cur;
    for (size_t i = 0; i < key_path.size(); ++i) {
      const char c = key_path[i];
      if (c == '.' || c == '[' || c == ']') {
        if (!cur.empty()) parts.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!cur.empty()) parts.push_back(cur);
  }
  if (parts.empty()) return absl::InvalidArgumentError(str_cat(where, ": empty key path"));

  // Resolve against the schema, following the tree as it is for list sizes.
  std::vector<Step> steps;
  std::string pattern;  // schema pattern of the current node
  std::string shown;    // the path as messages show it
  YAML::Node cur = YAML::Clone(root);
  const SchemaKey* key = find_schema_key("");
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (key->type == K::kList) {
      int64_t index = -1;
      const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      });
      if (digits && part.size() < 10) index = std::stoll(part);
      const int64_t size = cur.IsSequence() ? static_cast<int64_t>(cur.size()) : 0;
      if (index < 0)
        return absl::InvalidArgumentError(
            str_cat(where, ": ", shown, " is a list; expected an index, got ", quote_for_error(part)));
      if (index >= size)
        return absl::InvalidArgumentError(str_cat(where, ": ", shown, " has ", size, size == 1 ? " entry" : " entries",
                                                  "; index ", index, " is out of range"));
      steps.push_back({"", index});
      pattern += "[]";
      shown = str_cat(shown, "[", index, "]");
      key = find_schema_key(pattern);
      YAML::Node next = cur[static_cast<size_t>(index)];
      cur.reset(next);
      continue;
    }
    if (key->type == K::kFreeMap) {
      // The rest of the path is one key: parameter names have dots.
      std::string rest = part;
      for (size_t j = i + 1; j < parts.size(); ++j) rest += "." + parts[j];
      steps.push_back({rest, -1});
      pattern += ".*";
      shown = join_key(shown, rest);
      key = find_schema_key(pattern);
      break;
    }
    if (key->type != K::kSection)
      return absl::InvalidArgumentError(
          str_cat(where, ": ", shown, " is ", key_type_name(key->type), ", not a section"));
    const std::string next_pattern = join_key(pattern, part);
    const SchemaKey* next = find_schema_key(next_pattern);
    if (next == nullptr || part.find('*') != std::string::npos)
      return absl::InvalidArgumentError(str_cat("--set: ", unknown_key_message(shown, pattern, part)));
    steps.push_back({part, -1});
    pattern = next_pattern;
    shown = join_key(shown, part);
    key = next;
    if (cur.IsMap() && cur[part]) {
      YAML::Node child = cur[part];
      cur.reset(child);
    } else {
      cur.reset(YAML::Node());
    }
  }

  // The value sits under the root map and one collection per step.
  const int value_depth = static_cast<int>(steps.size());
  if (absl::Status s = check_yaml_text(text, where, "the value", value_depth); !s.ok()) return s;
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        str_cat(where, ": the value ", quote_for_error(text), " is not valid YAML (", e.msg, ")"));
  }
  if (absl::Status s = check_yaml_tree(value, where, value_depth); !s.ok()) return s;
  if (!value_fits(value, key->type))
    return absl::InvalidArgumentError(
        str_cat(where, ": ", shown, " expects ", key_type_name(key->type), ", got ", quote_for_error(text)));
  try {
    if (root.IsNull() || !root.IsDefined()) root = YAML::Node(YAML::NodeType::Map);
    if (!root.IsMap()) return absl::InvalidArgumentError(str_cat(where, ": the job file is not a map of keys"));
    set_at(root, steps, 0, value);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(str_cat(where, ": cannot set it in this file (", e.msg, ")"));
  }
  return absl::OkStatus();
}

}  // namespace coppice

// Every key of a job file, declared once: its type, what it does, its
// default, and its range or choices (key_spec.h). The readers of
// train/config_readers.cc take defaults, ranges and choices from here, the
// job reference page (docs/job_reference.md) prints them, and
// tests/train/job_keys_test holds the two to each other. A key is added or
// changed here and in its reader's one line, nowhere else.
//
// Defaults that a lower layer's options already hold (SgdOptions,
// MaskUpdaterConfig, BlobsOptions, ...) are taken from there, so the job's
// default and the library's cannot drift apart. A default that depends on
// other keys is `computed`: the reader computes it and the words here say
// how.
#include <limits>
#include <string>
#include <vector>

#include "data/doc_graph.h"
#include "data/fashion_mnist.h"
#include "data/synthetic.h"
#include "data/text.h"
#include "models/zoo.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/gmp.h"
#include "optim/mask_updater.h"
#include "optim/sgd.h"
#include "optim/sr_ste.h"
#include "sparse/formats.h"
#include "tensor/error.h"
#include "train/config_schema.h"
#include "train/nonfinite_guard.h"

namespace coppice {

namespace {

using K = KeyType;

constexpr double kInf = std::numeric_limits<double>::infinity();

SchemaKey key(std::string path, KeyType type, std::string doc) {
  SchemaKey k;
  k.path = std::move(path);
  k.type = type;
  k.doc = std::move(doc);
  return k;
}

std::string block_formats() { return str_join(block_format_names(), " / "); }

// The job's identity and device, the model and the data.
std::vector<SchemaKey> job_keys() {
  const int64_t kMaxTextBytes = int64_t{1} << 30;  // data/text.h's kTextMaxBytes: a stride past it is one window
  const BlobsOptions blobs;
  const TextDatasetOptions text;
  const DocGraphOptions graph;
  return {
      key("name", K::kString, "the job's name in logs").computed("the file name without .yaml"),
      key("seed", K::kInt, "seed of initialization, masks and random sparsifiers").defaults_to(0).in(any_seed()),
      key("device", K::kString, "auto | cpu | cuda | cuda:N").defaults_to("auto", "the GPU when there is one"),

      key("model", K::kSection, "the model, built by models/zoo.h's make_model"),
      key("model.name", K::kString, "the zoo's model").one_of(model_names).required(),
      key("model.options", K::kFreeMap,
          "the model's options (models/zoo.h), e.g. sizes: [784, 300, 100, 10]; seed defaults to the job's"),
      key("model.options.*", K::kScalar, "an option value"),

      key("data", K::kSection, "the dataset and batching"),
      key("data.dataset", K::kString, "what the model trains on")
          .one_of({"fashion_mnist", "synthetic", "text", "docgraph"})
          .defaults_to("fashion_mnist"),
      key("data.path", K::kString,
          "fashion_mnist: the IDX directory; text: the text file, or a directory whose files (data.suffix) are read "
          "in path order; docgraph: the reStructuredText tree")
          .defaults_to("",
                       "the installed Fashion-MNIST; for text, the installed perldiag.pod; for docgraph, the "
                       "installed Linux documentation"),
      key("data.batch_size", K::kInt, "training batch size").defaults_to(64).in(ints(1, kMaxBatchSize)),
      key("data.eval_batch_size", K::kInt, "evaluation batch size")
          .defaults_to(0, "batch_size")
          .in(ints(0, kMaxBatchSize)),
      key("data.validation_split", K::kDouble, "fraction of the training set held out for validation")
          .defaults_to(0)
          .in(reals(0, 1, "[)")),
      key("data.shuffle", K::kBool, "shuffle every epoch").defaults_to(true),
      key("data.shuffle_seed", K::kInt, "seed of the shuffle").computed("seed").in(any_seed()),
      key("data.drop_last", K::kBool, "leave out a final short batch").defaults_to(false),
      key("data.flatten", K::kBool, "fashion_mnist: images as [N, 784] instead of [N, 1, 28, 28]").defaults_to(false),
      key("data.normalize", K::kBool, "fashion_mnist: (x - mean) / std after scaling to [0, 1]").defaults_to(true),
      // Inputs are scaled to [0, 1] before (x - mean) / std.
      key("data.mean", K::kDouble, "fashion_mnist: normalization mean").defaults_to(kFashionMnistMean).in(reals(0, 1)),
      key("data.std", K::kDouble, "fashion_mnist: normalization std").defaults_to(kFashionMnistStd).in(reals(1e-6, 1)),
      key("data.seq_len", K::kInt, "text: tokens per window").defaults_to(text.seq_len).in(ints(1, kMaxDimension)),
      key("data.stride", K::kInt, "text: distance between window starts")
          .defaults_to(text.stride, "seq_len")
          .in(ints(0, kMaxTextBytes)),
      key("data.suffix", K::kString, "text, a directory: read the files whose names end in this, e.g. .rst.txt")
          .defaults_to("", "every file"),
      key("data.vocab", K::kString, "text: distinct: the corpus's distinct bytes; bytes: all 256")
          .one_of({"distinct", "bytes"})
          .defaults_to("distinct"),
      key("data.synthetic", K::kSection, "synthetic: Gaussian blobs (data/synthetic.h)"),
      key("data.synthetic.examples", K::kInt, "training examples").defaults_to(blobs.n).in(ints(1, kMaxExamples)),
      key("data.synthetic.test_examples", K::kInt, "test examples, held out from the same draw")
          .defaults_to(0, "none")
          .in(ints(0, kMaxExamples)),
      key("data.synthetic.features", K::kInt, "features per example")
          .defaults_to(blobs.features)
          .in(ints(1, kMaxDimension)),
      key("data.synthetic.classes", K::kInt, "classes").defaults_to(blobs.classes).in(ints(1, kMaxDimension)),
      // f32 inputs: centers and spreads far past this only make inf and NaN.
      key("data.synthetic.center_scale", K::kDouble, "std of the class centers")
          .defaults_to(blobs.center_scale)
          .in(reals(0, 1e6)),
      key("data.synthetic.spread", K::kDouble, "std around a center").defaults_to(blobs.spread).in(reals(0, 1e6)),
      key("data.synthetic.seed", K::kInt, "seed of the data").computed("seed").in(any_seed()),
      key("data.docgraph", K::kSection,
          "docgraph: documents as nodes, cross-references as edges, bag of words as CSR features, top-level "
          "directory as label, one full batch (data/doc_graph.h)"),
      key("data.docgraph.suffix", K::kString, "the files read as documents").defaults_to(graph.suffix),
      key("data.docgraph.vocabulary", K::kInt, "words kept as features, by document frequency")
          .defaults_to(graph.vocabulary)
          .in(ints(1, kMaxDimension)),
      key("data.docgraph.min_class_documents", K::kInt, "smaller top-level directories join the class other")
          .defaults_to(graph.min_class_documents)
          .in(ints(1, kMaxExamples)),
      key("data.docgraph.train_fraction", K::kDouble, "documents that train, by a hash of the path")
          .defaults_to(graph.train_fraction)
          .in(reals(0, 1, "(]")),
      key("data.docgraph.validation_fraction", K::kDouble, "documents that validate; the rest test")
          .defaults_to(graph.validation_fraction)
          .in(reals(0, 1, "[)")),
      key("data.docgraph.seed", K::kInt, "mixed into the split's hash").computed("seed").in(any_seed()),
      key("data.docgraph.toctree", K::kBool, "toctree entries are edges too, as :doc: references")
          .defaults_to(graph.toctree),
  };
}

// A parameter's or an output's format.
SchemaKey format_key(std::string path, std::string doc) {
  return key(std::move(path), K::kString, std::move(doc)).one_of(format_names).defaults_to("dense");
}

// One stage of output rules (forward or backward), under `path`.
std::vector<SchemaKey> stage_keys(const std::string& path, const std::string& what) {
  return {
      key(path + ".inline", K::kFreeMap, "inline sparsifier {name, params}").absent_means("none: keep all"),
      key(path + ".inline.*", K::kScalar, "the sparsifier's name or a parameter"),
      format_key(path + ".temporary_format", "format between the two sparsifiers"),
      key(path + ".external", K::kFreeMap, "external sparsifier {name, params}").absent_means("none: keep all"),
      key(path + ".external.*", K::kScalar, "the sparsifier's name or a parameter"),
      format_key(path + ".format", what),
  };
}

// Which weights are sparse and how; outputs sparsified.
std::vector<SchemaKey> sparsity_keys() {
  std::vector<SchemaKey> keys = {
      key("sparsity", K::kSection, "which weights are sparse, in which format, and sparsified outputs"),
      key("sparsity.density", K::kDouble, "overall density of the weights that rules select; gmp: its final density")
          .defaults_to(1)
          .in(reals(0, 1, "(]")),
      key("sparsity.distribution", K::kString, "how density is split over layers")
          .one_of({"uniform", "er", "erk"})
          .defaults_to("erk"),
      key("sparsity.overrides", K::kFreeMap, "fixed densities by parameter name, e.g. fc3.weight: 0.5"),
      key("sparsity.overrides.*", K::kDouble, "a density").in(reals(0, 1, "(]")),
      key("sparsity.dense", K::kStringList, "parameters kept dense by name"),
      key("sparsity.formats", K::kFreeMap,
          "formats declared by their levels (docs/guide/levels.md), by name; rules and outputs use the name"),
      key("sparsity.formats.*", K::kSection,
          "one format (its name is the key, not a built-in one's): levels, "
          "block, index, values"),
      key("sparsity.formats.*.levels", K::kStringList,
          "the levels, outermost first, each dense, compressed, compressed(non-unique), singleton, ranged or "
          "n_out_of_m(N:M), with the dimension it walks where it is not its place (dense(1)); two per dimension "
          "when blocked, the block's own after the outer ones")
          .required(),
      key("sparsity.formats.*.block", K::kIntList, "the format is blocked: [rows, columns], or one size for both")
          .absent_means("not blocked")
          .in(ints(1, kMaxDimension)),
      key("sparsity.formats.*.index", K::kString, "the index parts' dtype").one_of({"i32", "i64"}).defaults_to("i32"),
      key("sparsity.formats.*.values", K::kString, "the values' dtype")
          .one_of({"f32", "f64", "bf16", "f16"})
          .absent_means("any: the weight's"),
      key("sparsity.rules", K::kList, "parameter rules (sparsifiers/schedule.h)"),
      key("sparsity.rules[]", K::kSection, "one rule: name or regex, format, density, sparsifier"),
      key("sparsity.rules[].name", K::kString, "select a parameter by exact name"),
      key("sparsity.rules[].regex", K::kString,
          "select parameters whose whole name matches (RE2 syntax, at most 1000 bytes)"),
      format_key("sparsity.rules[].format", "the weight's format"),
      key("sparsity.rules[].block_rows", K::kInt, block_formats() + ": block rows")
          .required("for them")
          .in(ints(1, kMaxDimension)),
      key("sparsity.rules[].block_cols", K::kInt, block_formats() + ": block columns")
          .computed("block_rows")
          .in(ints(1, kMaxDimension)),
      key("sparsity.rules[].n", K::kInt, "n:m formats: kept values per group (a declared format's must be its own)")
          .computed("2, or the nm sparsifier's n, or the declared format's")
          .in(ints(1, kMaxDimension)),
      key("sparsity.rules[].m", K::kInt, "n:m formats: group size")
          .computed("4, or the nm sparsifier's m, or the declared format's")
          .in(ints(1, kMaxDimension)),
      key("sparsity.rules[].transposable", K::kBool,
          "n:m formats: the mask n:m along columns too, the best pattern of each m x m tile, so W^T is n:m (m <= 4; "
          "static "
          "masks only)")
          .defaults_to(false),
      key("sparsity.rules[].density", K::kDouble,
          "this rule's density; without a sparsifier, magnitude (block_magnitude for bsr and blocked_ell: whole "
          "blocks)")
          .computed("sparsity.density split by distribution")
          .in(reals(0, 1, "(]")),
      key("sparsity.rules[].sparsifier", K::kFreeMap, "initial sparsifier {name: magnitude, sparsity: 0.9}")
          .absent_means("format nm: the nm sparsifier"),
      key("sparsity.rules[].sparsifier.*", K::kScalar, "the sparsifier's name or a parameter"),
      key("sparsity.outputs", K::kList, "module output rules: sparsifiers on activations and gradients"),
      key("sparsity.outputs[]", K::kSection, "one rule: name or regex of a module, forward, backward"),
      key("sparsity.outputs[].name", K::kString, "select a module by exact name"),
      key("sparsity.outputs[].regex", K::kString, "select modules whose whole name matches (RE2 syntax)"),
      key("sparsity.outputs[].forward", K::kList, "one stage per module output"),
      key("sparsity.outputs[].forward[]", K::kSection, "inline, temporary_format, external, format"),
  };
  for (const SchemaKey& k : stage_keys("sparsity.outputs[].forward[]", "the output's format")) keys.push_back(k);
  keys.push_back(
      key("sparsity.outputs[].backward", K::kList, "one stage per module input's gradient (same keys as forward)"));
  keys.push_back(key("sparsity.outputs[].backward[]", K::kSection, "inline, temporary_format, external, format"));
  for (const SchemaKey& k : stage_keys("sparsity.outputs[].backward[]", "the gradient's format")) keys.push_back(k);
  keys.push_back(key("sparsity.propagate", K::kBool,
                     "infer output rules from sparsity attributes propagated through the model "
                     "(docs/guide/propagation.md); sparsity.outputs override them")
                     .defaults_to(false));
  keys.push_back(key("sparsity.propagate_max_density", K::kDouble,
                     "with propagate: a relu output becomes CSR only when at most this fraction of it is "
                     "non-zero in the traced step")
                     .defaults_to(0.1)
                     .in(reals(0, 1, "(]")));
  keys.push_back(key("sparsity.plan", K::kString,
                     "with propagate: the JSON-lines plan (every tensor's attribute, format and kernel)")
                     .defaults_to("", "<--run-dir>/plan.jsonl, else none"));
  return keys;
}

// The optimizer, its learning-rate schedule and how masks change.
std::vector<SchemaKey> optimization_keys() {
  const SgdOptions sgd;
  const AdamOptions adam;
  const AdagradOptions adagrad;
  const MaskUpdaterConfig regrow;
  const GmpConfig gmp;
  const SrSteConfig sr_ste;
  return {
      key("optimizer", K::kSection, "the optimizer (optim/sgd.h, optim/adam.h, optim/adagrad.h)"),
      key("optimizer.name", K::kString, "the optimizer").one_of({"sgd", "adam", "adamw", "adagrad"}).defaults_to("sgd"),
      key("optimizer.lr", K::kDouble, "learning rate").defaults_to(1e-3).in(reals(0, 1e4, "(]")),
      key("optimizer.momentum", K::kDouble, "sgd: momentum").defaults_to(sgd.momentum).in(reals(0, 1, "[)")),
      key("optimizer.dampening", K::kDouble, "sgd: dampening").defaults_to(sgd.dampening).in(reals(0, 1)),
      key("optimizer.nesterov", K::kBool, "sgd: Nesterov momentum; needs momentum > 0 and dampening 0")
          .defaults_to(sgd.nesterov),
      key("optimizer.beta1", K::kDouble, "adam/adamw: decay of the gradient's running mean")
          .defaults_to(adam.beta1)
          .in(reals(0, 1, "[)")),
      key("optimizer.beta2", K::kDouble, "adam/adamw: decay of the squared gradient's running mean")
          .defaults_to(adam.beta2)
          .in(reals(0, 1, "[)")),
      key("optimizer.eps", K::kDouble, "adam/adamw/adagrad: added to the denominator")
          .computed(str_cat("adam/adamw ", number_text(adam.eps), ", adagrad ", number_text(adagrad.eps)))
          .in(reals(0, 1, "(]")),
      key("optimizer.lr_decay", K::kDouble, "adagrad: the step size is lr / (1 + (step - 1) * lr_decay)")
          .defaults_to(adagrad.lr_decay)
          .in(reals(0, 1e6)),
      key("optimizer.initial_accumulator_value", K::kDouble, "adagrad: the squared-gradient sum's start")
          .defaults_to(adagrad.initial_accumulator_value)
          .in(reals(0, 1e6)),
      key("optimizer.weight_decay", K::kDouble, "weight decay")
          .computed(str_cat("sgd/adam/adagrad ", number_text(sgd.weight_decay), ", adamw ",
                            number_text(AdamWOptions{}.weight_decay)))
          .in(reals(0, 1)),
      key("optimizer.grad_clip", K::kDouble, "max global gradient norm").defaults_to(0, "off").in(reals(0, kInf)),

      key("lr_schedule", K::kSection, "learning-rate schedule (optim/lr_schedule.h)"),
      key("lr_schedule.name", K::kString, "the schedule")
          .one_of({"constant", "step", "cosine"})
          .defaults_to("constant"),
      key("lr_schedule.step_size", K::kInt, "step: multiply by gamma every step_size steps")
          .required("for step")
          .in(ints(1, kMaxSteps)),
      key("lr_schedule.gamma", K::kDouble, "step: the factor").defaults_to(0.1).in(reals(0, 1, "(]")),
      key("lr_schedule.t_max", K::kInt, "cosine: period in steps")
          .defaults_to(0, "training steps - warmup_steps")
          .in(ints(0, kMaxSteps)),
      key("lr_schedule.eta_min", K::kDouble, "cosine: final lr, at most optimizer.lr")
          .defaults_to(0)
          .in(reals(0, kInf)),
      key("lr_schedule.warmup_steps", K::kInt, "linear warm-up steps before the schedule")
          .defaults_to(0)
          .in(ints(0, kMaxSteps)),
      key("lr_schedule.warmup_start_factor", K::kDouble, "lr factor at the first warm-up step")
          .defaults_to(0)
          .in(reals(0, 1)),

      key("mask_update", K::kSection,
          "how masks change (optim/mask_updater.h, optim/gmp.h, optim/sr_ste.h), and when sparse weights become "
          "dense (optim/densify.h)"),
      key("mask_update.method", K::kString,
          "how masks change; rigl_nm: RigL within the groups of nm layers; sr_ste: dense weights trained through "
          "their n:m projection, every rule nm")
          .one_of({"dense", "static", "set", "rigl", "rigl_nm", "snfs", "gmp", "sr_ste"})
          .defaults_to("dense"),
      key("mask_update.start_step", K::kInt, "set/rigl/snfs/gmp: first update step")
          .defaults_to(regrow.start_step)
          .in(ints(0, kMaxSteps)),
      key("mask_update.end_step", K::kInt, "set/rigl/snfs/gmp: no update at or after it, > start_step")
          .required()
          .in(ints(1, kMaxSteps)),
      key("mask_update.interval", K::kInt,
          "set/rigl/snfs: steps between updates; sr_ste: steps between recomputations of the n:m masks from the "
          "dense weights")
          .computed(str_cat(regrow.interval, "; sr_ste: ", sr_ste.interval))
          .in(ints(1, kMaxSteps)),
      key("mask_update.drop_fraction", K::kDouble, "set/rigl/snfs: fraction of each layer's nnz dropped")
          .defaults_to(regrow.drop_fraction)
          .in(reals(0, 1, "(]")),
      key("mask_update.drop_schedule", K::kString, "set/rigl/snfs: how drop_fraction decays")
          .one_of({"constant", "cosine", "linear"})
          .defaults_to("cosine"),
      key("mask_update.prune", K::kString, "set/rigl/snfs: what ranks the values dropped")
          .one_of({"magnitude", "movement"})
          .defaults_to("magnitude"),
      key("mask_update.growth", K::kString,
          "set/rigl/rigl_nm/snfs: a registered growth policy by name instead of the method's (random, gradient, "
          "momentum; a program adds its own with register_growth_policy)")
          .computed("random for set, momentum for snfs, gradient for rigl and rigl_nm"),
      key("mask_update.allow_regrow_dropped", K::kBool, "set/rigl/snfs: dropped entries may regrow at once")
          .defaults_to(regrow.allow_regrow_dropped),
      key("mask_update.initial_density", K::kDouble, "gmp: density at start_step")
          .defaults_to(gmp.initial_density)
          .in(reals(0, 1, "(]")),
      key("mask_update.final_density", K::kDouble, "gmp: density from end_step on, at most initial_density")
          .computed("sparsity.density; one is required")
          .in(reals(0, 1, "(]")),
      key("mask_update.frequency", K::kInt, "gmp: steps between pruning steps")
          .defaults_to(gmp.frequency)
          .in(ints(1, kMaxSteps)),
      key("mask_update.densify_step", K::kInt,
          "static/set/rigl/rigl_nm/snfs/gmp: every sparse weight becomes dense after this many steps, its optimizer "
          "state carried over, and training goes on dense (SPDF); at or after end_step (gmp: after it), before the "
          "last step")
          .absent_means("the weights stay sparse")
          .in(ints(1, kMaxSteps)),
      key("mask_update.densify_warmup_steps", K::kInt,
          "with densify_step: for these W steps from densify_step on, every parameter's learning rate (all of "
          "them, not only the entries made dense) is the schedule's times (step - densify_step + 1) / W, so the "
          "first dense step gets 1/W of it; then the schedule's again. densify_step + W <= the training steps")
          .defaults_to(0, "no ramp")
          .in(ints(0, kMaxSteps)),
      key("mask_update.decay", K::kDouble,
          "sr_ste: lambda of the sparse-refined term lambda * (1 - mask) * W added to the dense weights' gradient "
          "(0: plain straight-through)")
          .defaults_to(sr_ste.decay)
          .in(reals(0, 1)),
  };
}

// How the run goes: length, evaluation, checkpoints, logging, precision, ranks.
std::vector<SchemaKey> run_keys() {
  return {
      key("training", K::kSection, "training length: exactly one of epochs and steps"),
      key("training.epochs", K::kInt, "passes over the training set")
          .required("unless training.steps is given")
          .in(ints(1, kMaxSteps)),
      key("training.steps", K::kInt, "optimizer steps")
          .required("unless training.epochs is given")
          .in(ints(1, kMaxSteps)),
      key("training.cuda_graph", K::kBool,
          "on a CUDA device, replay each ordinary step's forward and backward from a CUDA graph, captured again "
          "after a mask update; off with a message where a step cannot be captured (dropout, host reads), for "
          "data-parallel runs and for output sparsifiers")
          .defaults_to(false),
      key("training.on_nonfinite", K::kString,
          "when a step's loss or a gradient is inf or NaN (or a mask update would rank such scores): stop with "
          "exit 1 naming the step, the loss or the parameter and the last finite checkpoint; or skip_step: skip "
          "that step's optimizer and mask updates and go on")
          .one_of({"stop", "skip_step"})
          .defaults_to("stop"),
      key("training.max_consecutive_skips", K::kInt,
          "skip_step: steps skipped in a row before the next non-finite one stops the run; an f16 loss scaler's "
          "overflow skips are its own and not counted")
          .defaults_to(NonfiniteOptions{}.max_consecutive_skips)
          .in(ints(1, kMaxSteps)),

      key("evaluation", K::kSection, "evaluation during training"),
      key("evaluation.every_steps", K::kInt, "evaluate every N steps")
          .defaults_to(0, "at the end of each epoch")
          .in(ints(0, kMaxSteps)),
      key("evaluation.split", K::kString, "the split evaluated; validation needs data.validation_split > 0")
          .one_of({"validation", "test"})
          .computed("test; text: validation"),
      key("evaluation.max_batches", K::kInt, "evaluate on at most N batches")
          .defaults_to(0, "all")
          .in(ints(0, kMaxSteps)),

      key("checkpoint", K::kSection, "checkpoints, written by the trainer"),
      key("checkpoint.dir", K::kString, "directory to write checkpoints into").defaults_to("", "none"),
      key("checkpoint.every_steps", K::kInt, "checkpoint every N steps")
          .defaults_to(0, "only at the end")
          .in(ints(0, kMaxSteps)),
      key("checkpoint.keep_last", K::kInt, "keep the last K checkpoints of this run")
          .defaults_to(0, "all")
          .in(ints(0, kMaxKeepLast)),
      key("checkpoint.resume", K::kString, "a checkpoint file or directory to resume from; must exist")
          .defaults_to("", "none"),
      key("checkpoint.allow_changes", K::kStringList,
          "job settings a resume may change on purpose: fingerprint keys (optimizer.lr), prefixes (optimizer.*) or "
          "*")
          .absent_means("none"),

      key("logging", K::kSection, "metrics and progress"),
      key("logging.metrics", K::kString, "JSONL file of metrics, one record per logged step").defaults_to("", "none"),
      key("logging.progress", K::kBool, "a progress line on stderr").defaults_to(true),
      key("logging.every_steps", K::kInt, "log every N steps").defaults_to(50).in(ints(1, kMaxSteps)),

      key("precision", K::kSection, "numeric settings of the run"),
      key("precision.allow_tf32", K::kBool,
          "f32 dense matrix products on CUDA may use TF32 tensor cores (~1e-3 relative error, several times "
          "faster)")
          .defaults_to(false),
      key("precision.dtype", K::kString,
          "parameters (dense and sparse values) and activations; bf16/f16 keep f32 master weights in the optimizer "
          "and compute the loss in f32")
          .one_of({"f32", "bf16", "f16"})
          .defaults_to("f32"),
      // The range is the static scale's. The loss is scaled in f32: a scale
      // past f32's largest is inf itself.
      key("precision.loss_scale", K::kString,
          "dynamic (GradScaler: 2^16, x2 after 2000 finite steps, x0.5 and skip on inf/NaN) | none | a number "
          "(static)")
          .computed("dynamic for f16, none otherwise")
          .in(reals(0, std::numeric_limits<float>::max(), "(]")),

      key("distributed", K::kSection, "data-parallel training; data.batch_size is per rank"),
      key("distributed.world_size", K::kInt, "ranks").defaults_to(1).in(ints(1, kMaxWorldSize)),
      key("distributed.backend", K::kString, "inproc: ranks as threads, CPU; nccl: a process per GPU")
          .one_of({"inproc", "nccl"})
          .defaults_to("inproc"),
      key("distributed.timeout_s", K::kDouble,
          "seconds a collective, the rendezvous or NCCL's start may take before the job aborts")
          .defaults_to(300)
          .in(reals(0, kMaxTimeoutSeconds, "(]")),
      key("distributed.bucket_mb", K::kDouble, "dense gradient bucket size in MiB")
          .defaults_to(25)
          .in(reals(0, kMaxBucketMb, "(]")),
      key("distributed.sparse_exchange", K::kString,
          "compact: sparse weights send their nnz values; dense: densified, a baseline")
          .one_of({"compact", "dense"})
          .defaults_to("compact"),
      key("distributed.topk_fraction", K::kDouble, "top-k with error feedback for dense gradients: fraction sent")
          .defaults_to(0, "off")
          .in(reals(0, 1, "[)")),
  };
}

}  // namespace

// One list of keys per part of a job, in the order help and did-you-mean
// list them, each list short enough to read whole.
const std::vector<SchemaKey>& job_schema() {
  static const std::vector<SchemaKey> schema = [] {
    std::vector<SchemaKey> s = {key("", K::kSection, "the job")};
    for (std::vector<SchemaKey> (*part)() : {job_keys, sparsity_keys, optimization_keys, run_keys}) {
      const std::vector<SchemaKey> keys = part();
      s.insert(s.end(), keys.begin(), keys.end());
    }
    return s;
  }();
  return schema;
}

}  // namespace coppice

#include "train/config_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>

#include "data/doc_graph.h"
#include "data/text_corpus.h"
#include "optim/growth.h"
#include "sparse/convert.h"
#include "sparse/formats.h"
#include "sparse/levels/builtin_levels.h"
#include "sparse/levels/level_impl.h"
#include "sparsifiers/apply_schedule.h"
#include "sparsifiers/registry.h"
#include "tensor/checked_math.h"
#include "tensor/error.h"
#include "tensor/host_memory.h"
#include "train/config_schema.h"
#include "train/error_quote.h"
#include "yaml-cpp/yaml.h"

namespace coppice::job_config {

// Prune-and-regrow and GMP change masks: they need a sparse format that
// holds any pattern (n:m's groups do not) and whose stored positions are
// known (sparse/formats.h, is_mask_changing_format).
std::vector<std::string> mask_changing_format_names() {
  std::vector<std::string> names;
  for (const std::string& name : format_names())
    if (is_mask_changing_format(*find_format(name))) names.push_back(name);
  return names;
}

// The training set's examples where they are known without reading data
// (fashion_mnist, synthetic, docgraph): all, held out for validation, and per rank.
struct TrainExamples {
  int64_t all = 0;
  int64_t held_out = 0;  // floor(all * validation_split)
  int64_t per_rank = 0;  // ceil((all - held_out) / world_size): data/loader.h pads as DistributedSampler does
};

std::optional<TrainExamples> train_examples(const JobConfig& job) {
  TrainExamples e;
  if (job.data.dataset == DatasetKind::kFashionMnist)
    e.all = kFashionMnistTrainSize;
  else if (job.data.dataset == DatasetKind::kSynthetic)
    e.all = job.data.synthetic.n;
  else if (job.data.dataset == DatasetKind::kDocGraph)
    e.all = 1;  // the whole graph, one full batch
  else
    return std::nullopt;
  e.held_out = static_cast<int64_t>(std::floor(static_cast<double>(e.all) * job.data.validation_split));
  e.per_rank = ceil_div(e.all - e.held_out, job.distributed.world_size);
  return e;
}

// An upper bound on the optimizer steps of the job, where it can be known
// without reading data (one process; no drop_last).
std::optional<int64_t> planned_steps(const JobConfig& job) {
  if (job.training.steps) return job.training.steps;
  const std::optional<TrainExamples> examples = train_examples(job);
  if (!examples) return std::nullopt;
  const int64_t batches = ceil_div(examples->per_rank, job.data.loader.batch_size);
  const int64_t epochs = *job.training.epochs;
  int64_t steps = 0;
  if (mul_overflows(epochs, batches, &steps) || steps > kMaxSteps)
    bad("training.epochs", epochs, " epochs of ", batches, " steps make more than ", kMaxSteps, " steps");
  return steps;
}

// What the loop counts (steps x batch_size x world_size examples) must fit
// its counters.
void check_examples_countable(const JobConfig& job, int64_t steps) {
  int64_t examples = 0;
  if (mul_overflows(steps, job.data.loader.batch_size, &examples) ||
      mul_overflows(examples, job.distributed.world_size, &examples))
    bad(job.training.steps ? "training.steps" : "training.epochs", steps, " steps of ", job.data.loader.batch_size,
        " examples on ", job.distributed.world_size, " ranks are more examples than a 64-bit integer counts");
}

// The rule that decides `name`: an exact rule over regex rules; null if none.
const ParameterRule* chosen_rule(const SparsitySchedule& sched, const std::string& name) {
  const ParameterRule* chosen = nullptr;
  for (const ParameterRule& r : sched.parameters) {
    if (!r.selector.matches(name)) continue;
    if (chosen == nullptr || r.selector.kind == Selector::Kind::kExact) chosen = &r;
  }
  return chosen;
}

// The density a rule fixes by itself: its own, or its sparsifier's.
std::optional<double> fixed_density(const ParameterRule& r) {
  if (r.density) return r.density;
  if (!r.sparsifier) return std::nullopt;
  const auto& p = r.sparsifier->params;
  if (p.count("sparsity")) {
    const std::optional<double> s = p.at("sparsity").number();
    return s ? std::optional<double>(1.0 - *s) : std::nullopt;
  }
  if (r.sparsifier->name == "nm" && p.count("n") && p.count("m")) {
    const std::optional<double> n = p.at("n").number(), m = p.at("m").number();
    if (n && m) return *n / *m;
  }
  return std::nullopt;
}

// The key of a model option ("model" where the model fixes the value).
std::string option_key(const ModelInput::From& from) {
  return from.option.empty() ? std::string("model") : str_cat("model.options.", from.option);
}

// "<part> must be" or "must be", as the option states the value.
std::string must_be(const ModelInput::From& from) { return from.part.empty() ? "must be" : from.part + " must be"; }

// Images (fashion_mnist, not flattened) against what an image model reads.
void check_images_fit(const JobConfig& job, const ModelInput& in) {
  const std::string& model = job.model.name;
  const DataConfig& d = job.data;
  if (d.dataset != DatasetKind::kFashionMnist)
    bad("data.dataset", model, " reads images: must be fashion_mnist, got ", dataset_kind_name(d.dataset));
  if (d.fashion_mnist.flatten)
    bad("data.flatten", model, " reads [N, ", str_join(in.example, ", "), "] images: must be false");
  if (in.example != Shape{1, kFashionMnistSide, kFashionMnistSide})
    bad(option_key(in.input_from), "Fashion-MNIST images are 1 x ", kFashionMnistSide, " x ", kFashionMnistSide);
  if (in.classes != kFashionMnistClasses)
    bad(option_key(in.classes_from), must_be(in.classes_from), " the ", kFashionMnistClasses, " classes of ",
        dataset_kind_name(d.dataset), ", got ", in.classes);
}

// Feature vectors (synthetic blobs, or Fashion-MNIST images flattened)
// against what a model of features reads.
void check_features_fit(const JobConfig& job, const ModelInput& in) {
  const DataConfig& d = job.data;
  const std::string dataset = dataset_kind_name(d.dataset);
  const bool blobs = d.dataset == DatasetKind::kSynthetic;
  const int64_t features = blobs ? d.synthetic.features : kFashionMnistSide * kFashionMnistSide;
  const int64_t classes = blobs ? d.synthetic.classes : kFashionMnistClasses;
  if (in.example.front() != features)
    bad(option_key(in.input_from), must_be(in.input_from), " the ", features, " input features of ", dataset, ", got ",
        in.example.front());
  if (in.classes != classes)
    bad(option_key(in.classes_from), must_be(in.classes_from), " the ", classes, " classes of ", dataset, ", got ",
        in.classes);
}

// The text corpus against what a model of tokens reads: windows within its
// context, every byte of the corpus within its vocabulary.
void check_text_fits(const JobConfig& job, const ModelInput& in) {
  const DataConfig& d = job.data;
  const int64_t context = in.example.front();
  if (d.text.seq_len > context)
    bad("data.seq_len", "must be <= ", option_key(in.input_from), " (", context, "), got ", d.text.seq_len);
  // The corpus, read as the trainer will (bounded: data/text.h), and the
  // dataset made of it must fit in memory.
  const std::string key = d.path.empty() ? "data.dataset" : "data.path";
  const absl::StatusOr<std::string> text = read_text_corpus(d.text_path(), d.text.suffix, kTextMaxBytes);
  if (!text.ok()) bad(key, text.status().message());
  try {
    check_host_memory(CharTextDataset::memory_bytes(static_cast<int64_t>(text->size())),
                      str_cat("the text dataset of '", d.text_path(), "'"));
  } catch (const Error& e) { bad(key, e.what()); }
  if (static_cast<int64_t>(text->size()) <= d.text.seq_len)
    bad("data.seq_len", "the corpus '", d.text_path(), "' has ", text->size(),
        " bytes, too few for one window of seq_len ", d.text.seq_len, " and its next-byte target");
  // The embedding needs a row for every token: each distinct byte of the
  // corpus, or all 256 with vocab: bytes.
  if (d.text.byte_vocab) {
    if (in.classes < 256) bad(option_key(in.classes_from), "data.vocab is bytes: must be >= 256, got ", in.classes);
    return;
  }
  const int64_t distinct = CharVocab(*text).size();
  if (in.classes < distinct)
    bad(option_key(in.classes_from), "the corpus '", d.text_path(), "' has ", distinct,
        " distinct bytes: must be >= ", distinct, ", got ", in.classes);
}

// The document graph against a model of its nodes (gcn, sage, or the mlp
// baseline on the same features): read as the trainer will, its vocabulary
// is the input width and its classes the output's.
void check_graph_fits(const JobConfig& job, const ModelInput& in) {
  const DataConfig& d = job.data;
  if (in.kind == InputKind::kGraph && d.dataset != DatasetKind::kDocGraph)
    bad("data.dataset", job.model.name, " reads a graph: must be docgraph, got ", dataset_kind_name(d.dataset));
  const std::string key = d.path.empty() ? "data.dataset" : "data.path";
  const absl::StatusOr<DocGraph> graph = load_doc_graph(d.docgraph);
  if (!graph.ok()) bad(key, graph.status().message());
  const int64_t features = static_cast<int64_t>(graph->vocabulary.size());
  const int64_t classes = static_cast<int64_t>(graph->classes.size());
  if (in.example.front() != features)
    bad(option_key(in.input_from), must_be(in.input_from), " the ", features, " bag-of-words features of docgraph '",
        d.docgraph.root(), "' (data.docgraph.vocabulary), got ", in.example.front());
  if (in.classes != classes)
    bad(option_key(in.classes_from), must_be(in.classes_from), " the ", classes, " classes of docgraph '",
        d.docgraph.root(), "' (", str_join(graph->classes, ", "), "), got ", in.classes);
}

// What the model reads (the zoo says: models/zoo.h, model_input) against
// what the dataset gives. The model is already built, so its options are
// valid.
void check_model_fits_data(const JobConfig& job) {
  const std::string& model = job.model.name;
  const ModelInput in = model_input(job.model);
  const bool tokens = in.kind == InputKind::kTokens;
  if (tokens != (job.data.dataset == DatasetKind::kText))
    bad("data.dataset",
        tokens ? str_cat(model, " reads token ids: must be text") : str_cat(model, " does not read text"), ", got ",
        dataset_kind_name(job.data.dataset), " with model ", model);
  if (job.data.dataset == DatasetKind::kDocGraph && in.kind != InputKind::kFeatures && in.kind != InputKind::kGraph)
    bad("data.dataset", model, " does not read a graph's node features, got docgraph with model ", model);
  if (job.data.dataset == DatasetKind::kDocGraph || in.kind == InputKind::kGraph) return check_graph_fits(job, in);
  switch (in.kind) {
    case InputKind::kImage: return check_images_fit(job, in);
    case InputKind::kFeatures: return check_features_fit(job, in);
    case InputKind::kTokens: return check_text_fits(job, in);
    case InputKind::kGraph: return;  // above
  }
}

// Checks that need the model: its options, the rules' selectors against its
// parameter and module names, the density split over its layers, and the
// mask method against the weights the rules make sparse. Returns the job
// with the model and the resolved schedule, for the run to take over.
ValidatedJob check_against_model(JobConfig job) {
  // Building it is what shows a model too large: a size that overflows, or
  // parameters beyond the host's memory (the zoo and the allocator refuse
  // them, with the bytes, before allocating).
  ModulePtr model;
  try {
    model = make_model(job.model);
  } catch (const ModelOptionError& e) {
    bad(str_cat("model.options.", e.option()), e.reason());
  } catch (const Error& e) { bad("model", e.what()); }
  std::vector<std::string> params, modules;
  std::map<std::string, Shape> shapes;
  for (const auto& [name, v] : model->named_parameters()) {
    params.push_back(name);
    shapes[name] = v.value().shape();
  }
  for (const auto& [name, m] : model->named_modules()) modules.push_back(name);
  const SparsitySchedule& sched = job.sparsity.schedule;
  try {
    check_schedule(sched, params, modules);
  } catch (const Error& e) { bad("sparsity", e.what()); }
  auto near = [&](const std::string& name) {
    const std::string best = closest_match(name, params);
    return best.empty() ? std::string() : str_cat("; did you mean '", best, "'?");
  };
  for (const auto& [name, d] : job.sparsity.distribution.overrides)
    if (!shapes.count(name))
      bad(str_cat("sparsity.overrides.", name), "the model has no parameter ", quote_for_error(name), near(name));
  for (const std::string& name : job.sparsity.distribution.dense)
    if (!shapes.count(name)) bad("sparsity.dense", "the model has no parameter ", quote_for_error(name), near(name));

  std::vector<LayerShape> layers;
  for (const std::string& name : params) layers.push_back({name, shapes[name]});
  std::set<std::string> selected;
  for (const std::string& name : params)
    if (chosen_rule(sched, name) != nullptr) selected.insert(name);
  for (const auto& [name, d] : job.sparsity.distribution.overrides)
    if (!selected.count(name))
      bad(str_cat("sparsity.overrides.", name), "no rule in sparsity.rules selects '", name, "'");
  for (const std::string& name : job.sparsity.distribution.dense)
    if (!selected.count(name)) bad("sparsity.dense", "no rule in sparsity.rules selects '", name, "'");
  // Shapes the formats cannot hold (to_format would refuse them at run time).
  for (const std::string& name : params) {
    const ParameterRule* r = chosen_rule(sched, name);
    if (r == nullptr || job.sparsity.distribution.dense.count(name)) continue;
    const std::string key = str_cat("sparsity.rules[", r - sched.parameters.data(), "].format");
    const std::string& f = r->format.name;
    const Shape& shape = shapes[name];
    const FormatSpec& spec = format_spec(f, key);
    if (spec.rank == FormatRank::kMatrix && shape.size() != 2)
      bad(key, f, " holds matrices; '", name, "' has shape ", shape_to_string(shape), " (use coo or masked)");
    if (has_block_shape(spec.options)) {
      const FormatOptions& o = r->format.options;
      if (shape[0] % o.block_rows != 0 || shape[1] % o.block_cols != 0)
        bad(key, o.block_rows, "x", o.block_cols, " blocks do not divide '", name, "' of shape ",
            shape_to_string(shape));
    }
    if (const std::optional<levels::LevelFormat> declared = levels::registered_level_format(f)) {
      try {
        levels::check_level_format(*declared, shape, f);
      } catch (const Error& e) { bad(key, "cannot hold '", name, "': ", e.what()); }
      // On a GPU a declared format trains on the kernels of the built-in format its declaration is
      // (sparse/cuda/level_cells.cc); there are no generic CUDA kernels. (device: auto finds out at run time.)
      if (!job.device.is_auto && job.device.device.is_cuda() && !levels::builtin_format_of(*declared, shape))
        bad(key, "format ", f, " trains on ", job.device.device.to_string(),
            " only where its declaration is a built-in ", "format's (its kernels run it there), and ",
            levels::describe(*declared), " is none; the generic kernels run on the CPU (device: cpu)");
    }
    if (spec.options == FormatOptionKind::kNm && (shape.empty() || shape.back() % r->format.options.m != 0))
      bad(key, "groups of ", r->format.options.m, " do not divide the last dimension of '", name, "' of shape ",
          shape_to_string(shape));
    // Shapes the rule's sparsifier cannot take (its blocks or groups).
    if (r->sparsifier) {
      const std::string why = make_sparsifier(*r->sparsifier)->shape_mismatch(shape);
      if (!why.empty())
        bad(str_cat("sparsity.rules[", r - sched.parameters.data(), "].sparsifier"), "cannot take '", name, "': ", why);
    }
  }
  SparsitySchedule resolved;
  try {
    resolved = resolve_schedule(job, layers);
  } catch (const Error& e) { bad("sparsity.density", e.what()); }
  try {
    check_schedule(resolved, params, modules);
  } catch (const Error& e) {
    bad("sparsity", e.what(), " (with densities from sparsity.density and sparsity.distribution)");
  }

  const MaskMethod method = job.mask_update.method;
  const std::string mname = mask_method_name(method);
  const bool sparse = job.sparsity.sparse_weights();
  if (method == MaskMethod::kDense && sparse)
    bad("mask_update.method",
        "dense trains every weight, but sparsity.rules make weights sparse; use static (a fixed mask) "
        "or a prune-and-regrow method");
  if ((method == MaskMethod::kStatic || method == MaskMethod::kSrSte || job.mask_update.is_prune_and_regrow()) &&
      !sparse)
    bad("mask_update.method", mname, " needs sparse weights: add sparsity.rules and a density below 1");
  if (method == MaskMethod::kSrSte) {
    // Dense weights seen through their n:m projection by the layer that reads them.
    for (size_t i = 0; i < sched.parameters.size(); ++i) {
      const std::string& f = sched.parameters[i].format.name;
      if (!format_nm_groups(format_spec(f, "format"), sched.parameters[i].format.options))
        bad(str_cat("sparsity.rules[", i, "].format"),
            "sr_ste trains dense weights through their n:m projection and needs an n:m format (nm, or one "
            "declared with n:m groups), got ",
            f, " (for other formats use static, set, rigl or snfs)");
    }
    for (const std::string& name : params) {
      const ParameterRule* r = chosen_rule(sched, name);
      if (r == nullptr || job.sparsity.distribution.dense.count(name) || model->accepts_view(name)) continue;
      bad(str_cat("sparsity.rules[", r - sched.parameters.data(), "]"), "sr_ste sees a weight through its n:m ",
          "projection where its layer reads it, which Linear and Conv2d weights allow; '", name, "' is not one");
    }
  }
  if (method == MaskMethod::kGmp) {
    if (sched.parameters.empty()) bad("mask_update.method", "gmp needs sparsity.rules selecting the weights it prunes");
    for (size_t i = 0; i < sched.parameters.size(); ++i)
      if (sched.parameters[i].density)
        bad(str_cat("sparsity.rules[", i, "].density"),
            "gmp schedules the density; set mask_update.final_density instead");
  }
  if (job.mask_update.is_prune_and_regrow() || method == MaskMethod::kGmp) {
    for (size_t i = 0; i < sched.parameters.size(); ++i) {
      const std::string& f = sched.parameters[i].format.name;
      // n:m regrows within its groups (optim/group_regrow.h); GMP cannot keep n per group.
      const bool nm = format_nm_groups(format_spec(f, "format"), sched.parameters[i].format.options).has_value();
      const std::optional<SparsifierSpec>& spec = sched.parameters[i].sparsifier;
      if (nm && spec && spec->params.count("transposable") && spec->params.at("transposable").boolean() == true)
        bad(str_cat("sparsity.rules[", i, "].transposable"),
            "transposable masks stay fixed (method static) or are chosen whole (sr_ste): ", mname,
            " regrows within the groups of a row, which leaves the columns' groups uneven");
      if (method == MaskMethod::kRigLNm && !nm)
        bad(str_cat("sparsity.rules[", i, "].format"), "rigl_nm regrows n:m layers within their groups and needs ",
            "an n:m format (nm, or one declared with n:m groups), got ", f, " (method rigl takes any format)");
      if (!is_mask_changing_format(format_spec(f, "format")) && !(nm && method != MaskMethod::kGmp))
        bad(str_cat("sparsity.rules[", i, "].format"), mname, " changes masks and needs one of ",
            str_join(mask_changing_format_names(), ", "), method == MaskMethod::kGmp ? "" : " or an n:m format",
            ", got ", f);
    }
  }
  if (method == MaskMethod::kSnfs && job.optimizer.kind == OptimizerKind::kSgd && job.optimizer.sgd.momentum <= 0.0)
    bad("optimizer.momentum", "snfs grows by momentum: must be > 0 with sgd, got ", fmt(job.optimizer.sgd.momentum));
  check_model_fits_data(job);
  return ValidatedJob(std::move(job), std::move(model), std::move(resolved));
}

// Settings that are each valid but cannot work together; refused with the
// reason rather than left to misbehave quietly at run time.
void check_combinations(const JobConfig& job) {
  const DistributedConfig& d = job.distributed;
  const MaskMethod method = job.mask_update.method;
  if (d.topk_fraction > 0.0) {
    if (d.world_size == 1)
      bad("distributed.topk_fraction", "has no effect with one rank (distributed.world_size 1); leave it 0");
    // On update steps the growth policies read gradients that the top-k
    // exchange has truncated: ranks would grow from a partial gradient.
    if (method == MaskMethod::kRigL || method == MaskMethod::kRigLNm || method == MaskMethod::kSnfs)
      bad("distributed.topk_fraction", mask_method_name(method), " grows from the ",
          method == MaskMethod::kSnfs ? "momentum" : "dense gradient",
          " averaged over ranks, which the top-k exchange truncates: use 0 (exact exchange) with ",
          mask_method_name(method));
  }
  // Examples per rank, where known without reading data.
  if (const std::optional<TrainExamples> e = train_examples(job)) {
    if (job.data.validation_split > 0.0 && e->held_out == 0)
      bad("data.validation_split", "holds out no example of the ", e->all, " (", fmt(job.data.validation_split), " x ",
          e->all, " < 1)");
    if (job.data.loader.drop_last && e->per_rank < job.data.loader.batch_size)
      bad("data.drop_last", "leaves no batch: each rank has ", e->per_rank,
          " training examples, fewer than data.batch_size ", job.data.loader.batch_size);
  }
}

// the training length, where it is known without reading data.
void check_lengths(const JobConfig& job) {
  if (const std::optional<int64_t> steps = planned_steps(job)) {
    check_examples_countable(job, *steps);
    const std::string what = job.training.steps ? "training.steps" : "the planned steps";
    auto within = [&](const std::string& key, int64_t v) {
      if (v > *steps) bad(key, "must be <= ", what, " (", *steps, "), got ", v);
    };
    const MaskUpdateConfig& mu = job.mask_update;
    if (mu.is_prune_and_regrow()) within("mask_update.end_step", mu.updater.end_step);
    if (mu.method == MaskMethod::kGmp) within("mask_update.end_step", mu.gmp.end_step);
    if (mu.densify_step > 0 && mu.densify_step >= *steps)
      bad("mask_update.densify_step", "must be < ", what, " (", *steps,
          "), so that some steps train dense after it; got ", mu.densify_step);
    // The ramp covers steps densify_step .. densify_step + W - 1 (0-based).
    if (mu.densify_warmup_steps > 0 && mu.densify_warmup_steps > *steps - mu.densify_step)
      bad("mask_update.densify_warmup_steps", "the ramp after mask_update.densify_step must end within ", what, " (",
          *steps, "): densify_step + densify_warmup_steps = ", mu.densify_step, " + ", mu.densify_warmup_steps, " = ",
          mu.densify_step + mu.densify_warmup_steps, " > ", *steps);
    if (job.lr_schedule.warmup_steps > 0) within("lr_schedule.warmup_steps", job.lr_schedule.warmup_steps);
  }
}

}  // namespace coppice::job_config

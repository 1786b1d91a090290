#include "train/job_fingerprint.h"

#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <variant>
#include <vector>

#include "data/text.h"
#include "data/text_corpus.h"
#include "tensor/error.h"
#include "tensor/io/input_file.h"

namespace coppice {
namespace {

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
std::string number(int64_t v) { return std::to_string(v); }
std::string number(uint64_t v) { return std::to_string(v); }
std::string flag(bool b) { return b ? "true" : "false"; }

std::string option_string(const ModelOption& o) {
  if (const auto* i = std::get_if<int64_t>(&o)) return number(*i);
  if (const auto* d = std::get_if<double>(&o)) return number(*d);
  if (const auto* b = std::get_if<bool>(&o)) return flag(*b);
  return std::get<std::string>(o);
}

std::string format_string(const OutputFormat& f) {
  std::string s = f.name;
  const FormatOptions& o = f.options;
  if (o.block_rows > 0 || o.block_cols > 0) s += str_cat(" block=", o.block_rows, "x", o.block_cols);
  if (o.n > 0 || o.m > 0) s += str_cat(" n:m=", o.n, ":", o.m);
  return s;
}

std::string rule_string(const ParameterRule& r) {
  std::string s = format_string(r.format);
  if (r.density) s += " density=" + number(*r.density);
  if (r.sparsifier) s += " sparsifier=" + describe(*r.sparsifier);
  return s;
}

std::string stage_string(const StageSpec& st) {
  return str_cat(st.inline_sparsifier ? describe(*st.inline_sparsifier) : "keep_all", " via ",
                 format_string(st.temporary_format), ", ",
                 st.external_sparsifier ? describe(*st.external_sparsifier) : "keep_all", " into ",
                 format_string(st.output_format));
}

// "name:bytes:crc32" of a file; its bytes are read once, bounded.
// The name, size and CRC-32 of the bytes read from `path`.
std::string bytes_identity(const std::string& path, const absl::StatusOr<std::string>& bytes) {
  if (!bytes.ok()) fail("fingerprint: ", bytes.status().message());
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32_z(crc, reinterpret_cast<const Bytef*>(bytes->data()), bytes->size());
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  return str_cat(std::filesystem::path(path).filename().string(), ":", bytes->size(), ":", hex);
}

std::string file_identity(const std::string& path) { return bytes_identity(path, read_file_bytes(path)); }

void add_data(const DataConfig& d, Fingerprint& f) {
  f["data.dataset"] = dataset_kind_name(d.dataset);
  f["data.batch_size"] = number(d.loader.batch_size);
  f["data.shuffle"] = flag(d.loader.shuffle);
  f["data.shuffle_seed"] = number(d.loader.seed);
  f["data.drop_last"] = flag(d.loader.drop_last);
  f["data.validation_split"] = number(d.validation_split);
  switch (d.dataset) {
    case DatasetKind::kFashionMnist: {
      const FashionMnistOptions& m = d.fashion_mnist;
      f["data.flatten"] = flag(m.flatten);
      f["data.normalize"] = flag(m.normalize);
      f["data.mean"] = number(m.mean);
      f["data.std"] = number(m.std);
      std::vector<std::string> files;
      for (FashionMnistSplit split : {FashionMnistSplit::kTrain, FashionMnistSplit::kTest}) {
        files.push_back(file_identity(fashion_mnist_images_path(m.dir, split)));
        files.push_back(file_identity(fashion_mnist_labels_path(m.dir, split)));
      }
      f["data.files"] = str_join(files, ",");
      break;
    }
    case DatasetKind::kText:
      f["data.seq_len"] = number(d.text.seq_len);
      f["data.stride"] = number(d.text.stride);
      // Only where set, so that the fingerprints of jobs written before
      // these keys existed are unchanged.
      if (!d.text.suffix.empty()) f["data.suffix"] = d.text.suffix;
      if (d.text.byte_vocab) f["data.vocab"] = "bytes";
      // The corpus as the trainer reads it: a directory's files in order.
      f["data.files"] = bytes_identity(d.text_path(), read_text_corpus(d.text_path(), d.text.suffix, kTextMaxBytes));
      break;
    case DatasetKind::kDocGraph: {
      const DocGraphOptions& g = d.docgraph;
      f["data.docgraph.suffix"] = g.suffix;
      f["data.docgraph.vocabulary"] = number(g.vocabulary);
      f["data.docgraph.min_class_documents"] = number(g.min_class_documents);
      f["data.docgraph.train_fraction"] = number(g.train_fraction);
      f["data.docgraph.validation_fraction"] = number(g.validation_fraction);
      f["data.docgraph.seed"] = number(g.seed);
      f["data.docgraph.toctree"] = flag(g.toctree);
      // The tree as the graph reads it: its files in order, concatenated.
      f["data.files"] = bytes_identity(g.root(), read_text_corpus(g.root(), g.suffix, g.max_bytes));
      break;
    }
    case DatasetKind::kSynthetic: {
      const BlobsOptions& b = d.synthetic;
      f["data.synthetic.examples"] = number(b.n);
      f["data.synthetic.test_examples"] = number(d.synthetic_test_examples);
      f["data.synthetic.features"] = number(b.features);
      f["data.synthetic.classes"] = number(b.classes);
      f["data.synthetic.center_scale"] = number(b.center_scale);
      f["data.synthetic.spread"] = number(b.spread);
      f["data.synthetic.seed"] = number(b.seed);
      break;
    }
  }
}

void add_optimizer(const OptimizerConfig& o, Fingerprint& f) {
  f["optimizer.name"] = optimizer_kind_name(o.kind);
  f["optimizer.grad_clip"] = number(o.grad_clip);
  if (o.kind == OptimizerKind::kSgd) {
    f["optimizer.lr"] = number(o.sgd.lr);
    f["optimizer.momentum"] = number(o.sgd.momentum);
    f["optimizer.dampening"] = number(o.sgd.dampening);
    f["optimizer.nesterov"] = flag(o.sgd.nesterov);
    f["optimizer.weight_decay"] = number(o.sgd.weight_decay);
  } else if (o.kind == OptimizerKind::kAdagrad) {
    f["optimizer.lr"] = number(o.adagrad.lr);
    f["optimizer.lr_decay"] = number(o.adagrad.lr_decay);
    f["optimizer.initial_accumulator_value"] = number(o.adagrad.initial_accumulator_value);
    f["optimizer.eps"] = number(o.adagrad.eps);
    f["optimizer.weight_decay"] = number(o.adagrad.weight_decay);
  } else {
    f["optimizer.lr"] = number(o.adam.lr);
    f["optimizer.beta1"] = number(o.adam.beta1);
    f["optimizer.beta2"] = number(o.adam.beta2);
    f["optimizer.eps"] = number(o.adam.eps);
    f["optimizer.weight_decay"] = number(o.adam.weight_decay);
  }
}

void add_lr_schedule(const LrScheduleConfig& s, Fingerprint& f) {
  f["lr_schedule.name"] = lr_schedule_kind_name(s.kind);
  if (s.kind == LrScheduleKind::kStep) {
    f["lr_schedule.step_size"] = number(s.step_size);
    f["lr_schedule.gamma"] = number(s.gamma);
  }
  if (s.kind == LrScheduleKind::kCosine) {
    f["lr_schedule.t_max"] = number(s.t_max);
    f["lr_schedule.eta_min"] = number(s.eta_min);
  }
  f["lr_schedule.warmup_steps"] = number(s.warmup_steps);
  f["lr_schedule.warmup_start_factor"] = number(s.warmup_start_factor);
}

void add_mask_update(const MaskUpdateConfig& m, Fingerprint& f) {
  f["mask_update.method"] = mask_method_name(m.method);
  if (m.is_prune_and_regrow()) {
    const MaskUpdaterConfig& u = m.updater;
    f["mask_update.start_step"] = number(u.start_step);
    f["mask_update.end_step"] = number(u.end_step);
    f["mask_update.interval"] = number(u.interval);
    f["mask_update.drop_fraction"] = number(u.drop_fraction);
    f["mask_update.drop_schedule"] = drop_schedule_name(u.schedule);
    f["mask_update.prune"] = prune_criterion_name(u.prune);
    f["mask_update.allow_regrow_dropped"] = flag(u.allow_regrow_dropped);
    // Named only when it is not the method's own, so that jobs without it keep their fingerprints.
    if (u.growth != default_growth(m.method)) f["mask_update.growth"] = u.growth;
  } else if (m.method == MaskMethod::kGmp) {
    const GmpConfig& g = m.gmp;
    f["mask_update.start_step"] = number(g.start_step);
    f["mask_update.end_step"] = number(g.end_step);
    f["mask_update.frequency"] = number(g.frequency);
    f["mask_update.initial_density"] = number(g.initial_density);
    f["mask_update.final_density"] = number(g.final_density);
  } else if (m.method == MaskMethod::kSrSte) {
    // Adjustable: neither changes what the saved tensors are.
    f["mask_update.interval"] = number(m.sr_ste.interval);
    f["mask_update.decay"] = number(m.sr_ste.decay);
  }
  // Named only when set, so that jobs without it keep their fingerprints.
  if (m.densify_step > 0) f["mask_update.densify_step"] = number(m.densify_step);
  // Likewise; adjustable: it changes learning rates, not what the saved tensors are.
  if (m.densify_warmup_steps > 0) f["mask_update.densify_warmup_steps"] = number(m.densify_warmup_steps);
}

}  // namespace

Fingerprint job_fingerprint(const JobConfig& job, const SparsitySchedule& resolved) {
  Fingerprint f;
  f["seed"] = number(job.seed);
  f["model.name"] = job.model.name;
  for (const auto& [name, value] : job.model.options) f["model.options." + name] = option_string(value);
  add_data(job.data, f);
  // Named only when declared, so that jobs without them keep their fingerprints.
  for (const auto& [name, declaration] : job.sparsity.formats) {
    f["sparsity.formats." + name] = levels::describe(declaration);
  }
  for (const ParameterRule& r : resolved.parameters) f["sparsity." + r.selector.pattern] = rule_string(r);
  for (size_t i = 0; i < resolved.outputs.size(); ++i) {
    const OutputRule& o = resolved.outputs[i];
    std::vector<std::string> fwd, bwd;
    for (const StageSpec& st : o.forward) fwd.push_back(stage_string(st));
    for (const StageSpec& st : o.backward) bwd.push_back(stage_string(st));
    f[str_cat("sparsity.outputs[", i, "]")] =
        str_cat(o.selector.describe(), " forward [", str_join(fwd, "; "), "] backward [", str_join(bwd, "; "), "]");
  }
  add_optimizer(job.optimizer, f);
  add_lr_schedule(job.lr_schedule, f);
  add_mask_update(job.mask_update, f);
  // training.on_nonfinite and max_consecutive_skips are left out: they say
  // what happens when a step goes inf or NaN, which no checkpoint holds
  // (every checkpoint is finite, train/checkpoint.cc), so a finite run is the
  // same under either, and a resume may switch to skip_step without
  // --allow-changes.
  if (job.training.steps) f["training.steps"] = number(*job.training.steps);
  if (job.training.epochs) f["training.epochs"] = number(*job.training.epochs);
  f["distributed.world_size"] = number(job.distributed.world_size);
  f["distributed.sparse_exchange"] = sparse_exchange_name(job.distributed.sparse_exchange);
  f["distributed.topk_fraction"] = number(job.distributed.topk_fraction);
  f["precision.dtype"] = std::string(dtype_name(job.precision.dtype));
  f["precision.allow_tf32"] = flag(job.precision.allow_tf32);
  const LossScalerOptions& ls = job.precision.loss_scale;
  f["precision.loss_scale"] = ls.mode == LossScaleMode::kStatic ? number(ls.init_scale) : loss_scale_mode_name(ls.mode);
  // --allow-changes is checked against the adjustable keys fingerprint.cc
  // lists: a key recorded here but missing there could never be allowed.
  for (const auto& entry : f) {
    if (!is_structural_key(entry.first) && !is_adjustable_fingerprint_key(entry.first))
      fail("fingerprint: ", entry.first, " is missing from the adjustable keys of train/fingerprint.cc");
  }
  return f;
}

}  // namespace coppice

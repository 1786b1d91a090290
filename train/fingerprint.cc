#include "train/fingerprint.h"

#include <algorithm>
#include <set>

#include "tensor/error.h"
#include "train/config_schema.h"
#include "train/error_quote.h"

namespace coppice {
namespace {

// The adjustable keys job_fingerprint may record (train/job_fingerprint.cc,
// which checks every key it writes against this list).
const std::set<std::string>& adjustable_keys() {
  static const std::set<std::string> keys = {
      "seed",
      // data
      "data.dataset", "data.batch_size", "data.shuffle", "data.shuffle_seed", "data.drop_last", "data.validation_split",
      "data.files", "data.flatten", "data.normalize", "data.mean", "data.std", "data.seq_len", "data.stride",
      "data.suffix", "data.vocab", "data.synthetic.examples", "data.synthetic.test_examples", "data.synthetic.features",
      "data.synthetic.classes", "data.synthetic.center_scale", "data.synthetic.spread", "data.synthetic.seed",
      // (vocabulary and classes are also the model's sizes, which a resume checks as it loads the weights)
      "data.docgraph.suffix", "data.docgraph.vocabulary", "data.docgraph.min_class_documents",
      "data.docgraph.train_fraction", "data.docgraph.validation_fraction", "data.docgraph.seed",
      "data.docgraph.toctree",
      // optimizer (optimizer.name is structural)
      "optimizer.grad_clip", "optimizer.lr", "optimizer.momentum", "optimizer.dampening", "optimizer.nesterov",
      "optimizer.weight_decay", "optimizer.beta1", "optimizer.beta2", "optimizer.eps", "optimizer.lr_decay",
      "optimizer.initial_accumulator_value",
      // lr_schedule
      "lr_schedule.name", "lr_schedule.step_size", "lr_schedule.gamma", "lr_schedule.t_max", "lr_schedule.eta_min",
      "lr_schedule.warmup_steps", "lr_schedule.warmup_start_factor",
      // mask_update (mask_update.method is structural)
      "mask_update.start_step", "mask_update.end_step", "mask_update.interval", "mask_update.drop_fraction",
      "mask_update.drop_schedule", "mask_update.prune", "mask_update.allow_regrow_dropped", "mask_update.growth",
      "mask_update.frequency", "mask_update.initial_density", "mask_update.final_density", "mask_update.decay",
      "mask_update.densify_warmup_steps",
      // the rest
      "training.steps", "training.epochs", "distributed.world_size", "distributed.sparse_exchange",
      "distributed.topk_fraction", "precision.allow_tf32", "precision.loss_scale"};
  return keys;
}

// "optimizer.*" for every section that holds an adjustable key, and the
// sections above it ("data.*" and "data.synthetic.*").
std::vector<std::string> adjustable_prefixes() {
  std::set<std::string> out;
  for (const std::string& key : adjustable_keys())
    for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1))
      out.insert(key.substr(0, dot) + ".*");
  return std::vector<std::string>(out.begin(), out.end());
}

// A key of the same last name in the list ("lr": optimizer.lr), or "".
std::string same_last_name(const std::string& word, const std::vector<std::string>& keys) {
  const std::string last = word.substr(word.rfind('.') + 1);
  for (const std::string& k : keys)
    if (k.size() > last.size() && k.compare(k.size() - last.size() - 1, std::string::npos, "." + last) == 0) return k;
  return "";
}

// Why `entry` (a key, or a prefix ending in ".*") names no adjustable
// setting, with a did-you-mean; "" when it names one.
std::string unknown_change(const std::string& entry, const std::string& key, bool prefix) {
  const std::vector<std::string> keys(adjustable_keys().begin(), adjustable_keys().end());
  if (!prefix && adjustable_keys().count(key)) return "";
  if (prefix) {
    const std::string under = key + ".";
    for (const std::string& k : keys)
      if (k.rfind(under, 0) == 0) return "";
  }
  const std::string quoted = quote_for_error(entry);
  // A section named without ".*".
  if (!prefix) {
    for (const std::string& k : keys)
      if (k.rfind(key + ".", 0) == 0) return str_cat(quoted, " is a section; did you mean '", key, ".*'?");
  }
  // A job key that no checkpoint records: a resume may change it freely.
  if (!prefix && find_schema_key(key) != nullptr) {
    return str_cat(quoted, " is not recorded in checkpoints, so a resume may change it without --allow-changes");
  }
  const std::vector<std::string> candidates = prefix ? adjustable_prefixes() : keys;
  std::string best = closest_match(entry, candidates);
  if (best.empty() && !prefix) best = same_last_name(key, keys);
  return str_cat(quoted, " is not a setting that a resume may change",
                 best.empty() ? std::string(" (a key such as optimizer.lr, a prefix such as optimizer.*, or *)")
                              : str_cat("; did you mean '", best, "'?"));
}

}  // namespace

bool is_adjustable_fingerprint_key(const std::string& key) { return adjustable_keys().count(key) > 0; }

bool is_structural_key(const std::string& key) {
  auto under = [&](const char* prefix) { return key.rfind(prefix, 0) == 0; };
  return under("model.") || under("sparsity.") || key == "precision.dtype" || key == "optimizer.name" ||
         key == "mask_update.method" || key == "mask_update.densify_step";
}

std::vector<FingerprintChange> fingerprint_changes(const Fingerprint& saved, const Fingerprint& current) {
  static const std::string kNone = "(none)";
  std::vector<FingerprintChange> out;
  auto s = saved.begin();
  auto c = current.begin();
  while (s != saved.end() || c != current.end()) {
    if (c == current.end() || (s != saved.end() && s->first < c->first)) {
      out.push_back({s->first, s->second, kNone});
      ++s;
    } else if (s == saved.end() || c->first < s->first) {
      out.push_back({c->first, kNone, c->second});
      ++c;
    } else {
      if (s->second != c->second) out.push_back({s->first, s->second, c->second});
      ++s;
      ++c;
    }
  }
  return out;
}

bool change_allowed(const std::string& key, const std::vector<std::string>& allowed) {
  for (const std::string& a : allowed) {
    if (a == key || a == "*") return true;
    if (a.size() >= 2 && a.compare(a.size() - 2, 2, ".*") == 0 && key.size() > a.size() - 1 &&
        key.compare(0, a.size() - 1, a, 0, a.size() - 1) == 0) {
      return true;
    }
  }
  return false;
}

std::string describe_changes(const std::vector<FingerprintChange>& changes) {
  std::vector<std::string> parts;
  for (const FingerprintChange& c : changes) parts.push_back(str_cat(c.key, ": ", c.saved, " -> ", c.current));
  return str_join(parts, "; ");
}

absl::Status check_allowed_changes(const std::vector<std::string>& allowed) {
  for (const std::string& a : allowed) {
    if (a == "*") continue;
    const std::string key = a.size() >= 2 && a.compare(a.size() - 2, 2, ".*") == 0 ? a.substr(0, a.size() - 2) : a;
    const bool chars_ok = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '[' || c == ']';
    });
    if (!chars_ok || key.front() == '.' || key.back() == '.') {
      return absl::InvalidArgumentError(
          str_cat(quote_for_error(a),
                  " is not a job setting (a key such as optimizer.lr, a prefix such as optimizer.*, or *)"));
    }
    if (is_structural_key(key + (key == a ? "" : "."))) {
      return absl::InvalidArgumentError(
          str_cat(quote_for_error(a),
                  " cannot change on resume: the model, its formats and densities, the dtype, the optimizer, "
                  "the mask-update method and its densify_step shape the checkpoint's tensors (start a new run "
                  "instead)"));
    }
    if (const std::string why = unknown_change(a, key, key != a); !why.empty()) {
      return absl::InvalidArgumentError(why);
    }
  }
  return absl::OkStatus();
}

}  // namespace coppice

#include "optim/state_io.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "sparse/sparse_impl.h"
#include "tensor/io/safetensors.h"

namespace coppice {
namespace {

std::string exact(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (end != s.c_str() + s.size() || errno != 0) return false;
  *out = v;
  return true;
}

// Checks names and collects what save writes.
absl::Status collect(const Optimizer& opt, NamedTensors* tensors, std::map<std::string, std::string>* metadata) {
  std::set<std::string> names;
  (*metadata)["coppice.optimizer"] = opt.name();
  (*metadata)["coppice.groups"] = std::to_string(opt.param_groups().size());
  for (size_t g = 0; g < opt.param_groups().size(); ++g) {
    const ParamGroup& group = opt.param_groups()[g];
    const std::string prefix = str_cat("group.", g, ".");
    (*metadata)[prefix + "params"] = std::to_string(group.params.size());
    for (const auto& kv : opt.defaults()) (*metadata)[prefix + kv.first] = exact(opt.option(g, kv.first));
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Variable& p = group.params[i];
      if (p.name().empty()) {
        return absl::InvalidArgumentError(
            str_cat("save_optimizer_state: parameter ", i, " of group ", g, " has no name (state is saved by name)"));
      }
      if (!names.insert(p.name()).second) {
        return absl::InvalidArgumentError(str_cat("save_optimizer_state: two parameters are named '", p.name(), "'"));
      }
      (*metadata)[str_cat(prefix, "param.", i)] = p.name();
      const ParamState* st = opt.state(p);
      if (st == nullptr) continue;
      (*metadata)["step." + p.name()] = std::to_string(st->step);
      for (const auto& [key, t] : st->tensors) tensors->emplace_back(p.name() + "." + key, t);
    }
  }
  return absl::OkStatus();
}

absl::Status mismatch(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(str_cat("load_optimizer_state: ", source, ": ", what));
}

}  // namespace

absl::StatusOr<OptimizerStatePlan> plan_optimizer_state(const Optimizer& opt, const SafetensorsFile& file,
                                                        const std::string& source,
                                                        const std::map<std::string, Tensor>* values_after) {
  auto meta = [&](const std::string& key) -> const std::string* {
    auto it = file.metadata.find(key);
    return it == file.metadata.end() ? nullptr : &it->second;
  };
  const std::string* name = meta("coppice.optimizer");
  if (name == nullptr) return mismatch(source, "no 'coppice.optimizer' in the metadata (not an optimizer state?)");
  if (*name != opt.name()) {
    return mismatch(source, str_cat("the state is of optimizer '", *name, "', not '", opt.name(), "'"));
  }
  int64_t groups = 0;
  const std::string* groups_s = meta("coppice.groups");
  if (groups_s == nullptr || !parse_int(*groups_s, &groups)) return mismatch(source, "bad or missing 'coppice.groups'");
  if (groups != static_cast<int64_t>(opt.param_groups().size())) {
    return mismatch(source,
                    str_cat("the state has ", groups, " parameter groups, the optimizer ", opt.param_groups().size()));
  }
  OptimizerStatePlan plan;
  // By name, once: looking each state up with file.find() would cost
  // parameters x tensors on a file with many entries.
  absl::flat_hash_map<std::string_view, const Tensor*> by_name;
  by_name.reserve(file.tensors.size());
  for (const auto& [tname, t] : file.tensors) by_name.emplace(tname, &t);
  std::set<std::string> used;
  for (size_t g = 0; g < opt.param_groups().size(); ++g) {
    const ParamGroup& group = opt.param_groups()[g];
    const std::string prefix = str_cat("group.", g, ".");
    int64_t count = 0;
    const std::string* count_s = meta(prefix + "params");
    if (count_s == nullptr || !parse_int(*count_s, &count)) {
      return mismatch(source, str_cat("bad or missing '", prefix, "params'"));
    }
    if (count != static_cast<int64_t>(group.params.size())) {
      return mismatch(source, str_cat("group ", g, " has ", count, " parameters in the state, ", group.params.size(),
                                      " in the optimizer"));
    }
    Hyperparameters group_options;
    for (const auto& kv : opt.defaults()) {
      const std::string* v = meta(prefix + kv.first);
      double d = 0.0;
      if (v == nullptr || !parse_double(*v, &d) || !std::isfinite(d)) {
        return mismatch(source, str_cat("bad or missing hyperparameter '", prefix, kv.first, "' (a finite number)"));
      }
      plan.options.push_back({g, {kv.first, d}});
      group_options[kv.first] = d;
    }
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Variable& p = group.params[i];
      const std::string* saved = meta(str_cat(prefix, "param.", i));
      if (saved == nullptr) return mismatch(source, str_cat("no name for parameter ", i, " of group ", g));
      if (*saved != p.name()) {
        return mismatch(source, str_cat("parameter ", i, " of group ", g, " is '", *saved, "' in the state but '",
                                        p.name(), "' in the optimizer"));
      }
      const std::string* step_s = meta("step." + p.name());
      if (step_s == nullptr) continue;  // no state saved
      OptimizerStatePlan::Entry entry{g, i, ParamState()};
      if (!parse_int(*step_s, &entry.state.step) || entry.state.step < 0) {
        return mismatch(source, str_cat("bad step count for '", p.name(), "': '", *step_s, "'"));
      }
      Tensor pv = values(p.value());
      const Device device = pv.device();  // loading a checkpoint keeps each parameter's device
      if (values_after != nullptr) {
        auto it = values_after->find(p.name());
        if (it != values_after->end()) pv = it->second;
      }
      std::vector<std::string> keys = opt.state_names(group_options);
      if (uses_master_weights(pv.dtype())) keys.push_back(kMasterWeightsState);
      const DType state_dtype = optimizer_state_dtype(pv.dtype());
      for (const std::string& key : keys) {
        const std::string tname = p.name() + "." + key;
        auto found = by_name.find(tname);
        const Tensor* t = found == by_name.end() ? nullptr : found->second;
        if (t == nullptr) {
          // A state created lazily (e.g. SGD's momentum buffer) may be absent before its first use.
          if (entry.state.step == 0) continue;
          return mismatch(source, str_cat("no tensor '", tname, "'"));
        }
        if (t->shape() != pv.shape()) {
          return mismatch(source, str_cat("'", tname, "' has shape ", shape_to_string(t->shape()),
                                          " but the parameter's values have shape ", shape_to_string(pv.shape())));
        }
        if (t->dtype() != state_dtype) {
          return mismatch(source, str_cat("'", tname, "' has dtype ", dtype_name(t->dtype()), " but the state of a ",
                                          dtype_name(pv.dtype()), " parameter has dtype ", dtype_name(state_dtype)));
        }
        entry.state.tensors[key] = t->to(device).contiguous();
        used.insert(tname);
      }
      plan.entries.push_back(std::move(entry));
    }
  }
  for (const auto& [tname, t] : file.tensors) {
    if (used.count(tname) == 0) return mismatch(source, str_cat("tensor '", tname, "' belongs to no parameter state"));
  }
  return plan;
}

absl::Status apply_optimizer_state(Optimizer& opt, OptimizerStatePlan plan, bool restore_hyperparameters,
                                   const std::string& source) {
  if (restore_hyperparameters) {
    std::vector<Hyperparameters> before;
    for (size_t g = 0; g < opt.param_groups().size(); ++g) {
      Hyperparameters h;
      for (const auto& kv : opt.defaults()) h[kv.first] = opt.option(g, kv.first);
      before.push_back(std::move(h));
    }
    try {
      for (const auto& o : plan.options) opt.set_option(o.first, o.second.first, o.second.second);
    } catch (const Error& e) {
      for (size_t g = 0; g < before.size(); ++g) {
        for (const auto& kv : before[g]) opt.set_option(g, kv.first, kv.second);
      }
      return mismatch(source, e.what());
    }
  }
  for (const ParamGroup& group : opt.param_groups()) {
    for (const Variable& p : group.params) opt.reset_state(p);
  }
  for (OptimizerStatePlan::Entry& e : plan.entries) {
    const Variable& p = opt.param_groups()[e.group].params[e.index];
    e.state.pattern_version = pattern_version(p.value());
    opt.mutable_state(p) = std::move(e.state);
  }
  return absl::OkStatus();
}

namespace {

absl::Status restore(Optimizer& opt, const SafetensorsFile& file, const std::string& source) {
  auto plan = plan_optimizer_state(opt, file, source);
  if (!plan.ok()) return plan.status();
  return apply_optimizer_state(opt, std::move(*plan), /*restore_hyperparameters=*/true, source);
}

}  // namespace

absl::StatusOr<std::string> serialize_optimizer_state(const Optimizer& optimizer) {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
  absl::Status s = collect(optimizer, &tensors, &metadata);
  if (!s.ok()) return s;
  return serialize_safetensors(tensors, metadata);
}

absl::Status save_optimizer_state(const Optimizer& optimizer, const std::string& path) {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
  absl::Status s = collect(optimizer, &tensors, &metadata);
  if (!s.ok()) return s;
  return write_safetensors(path, tensors, metadata);
}

absl::Status parse_optimizer_state(Optimizer& optimizer, const std::string& bytes, const std::string& source) {
  absl::StatusOr<SafetensorsFile> file = parse_safetensors(bytes, source);
  if (!file.ok()) return file.status();
  return restore(optimizer, *file, source);
}

absl::Status load_optimizer_state(Optimizer& optimizer, const std::string& path) {
  absl::StatusOr<SafetensorsFile> file = read_safetensors(path);
  if (!file.ok()) return file.status();
  return restore(optimizer, *file, path);
}

}  // namespace coppice

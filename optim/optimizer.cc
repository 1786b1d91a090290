#include "optim/optimizer.h"

#include <cmath>
#include <utility>

#include "sparse/masked.h"
#include "sparse/row_sparse.h"
#include "sparse/sparse_impl.h"
#include "tensor/op_profile.h"
#include "tensor/ops.h"

namespace coppice {

bool uses_master_weights(DType param_dtype) { return param_dtype == DType::kBF16 || param_dtype == DType::kF16; }

DType optimizer_state_dtype(DType param_dtype) { return uses_master_weights(param_dtype) ? DType::kF32 : param_dtype; }

std::string describe_param(const Variable& param, size_t group, size_t index) {
  if (param.defined() && !param.name().empty()) return str_cat("'", param.name(), "'");
  return str_cat("parameter ", index, " of group ", group);
}

Optimizer::Optimizer(std::string name, Hyperparameters defaults, std::vector<ParamGroup> groups)
    : name_(std::move(name)), defaults_(std::move(defaults)) {
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

Hyperparameters Optimizer::complete(const Hyperparameters& overrides) const {
  Hyperparameters out = defaults_;
  for (const auto& [key, value] : overrides) {
    auto it = out.find(key);
    if (it == out.end()) {
      std::vector<std::string> known;
      for (const auto& kv : defaults_) known.push_back(kv.first);
      fail(name_, ": unknown hyperparameter '", key, "' (known: ", str_join(known, ", "), ")");
    }
    it->second = value;
  }
  return out;
}

void Optimizer::validate(const Hyperparameters& options, size_t group) const {
  auto it = options.find("lr");
  if (it != options.end()) {
    COPPICE_CHECK(it->second >= 0.0, name_, ": group ", group, " has a negative learning rate ", it->second);
  }
}

void Optimizer::add_param_group(ParamGroup group) {
  const size_t g = groups_.size();
  Hyperparameters options = complete(group.options);
  validate(options, g);
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Variable& p = group.params[i];
    COPPICE_CHECK(p.defined(), name_, ": parameter ", i, " of group ", g, " is an undefined Variable");
    COPPICE_CHECK(is_floating(p.dtype()), name_, ": ", describe_param(p, g, i), " has dtype ", dtype_name(p.dtype()),
                  "; an optimizer needs floating-point parameters");
    for (size_t h = 0; h <= g; ++h) {
      const std::vector<Variable>& others = h < g ? groups_[h].params : group.params;
      const size_t end = h < g ? others.size() : i;
      for (size_t j = 0; j < end; ++j) {
        COPPICE_CHECK(!others[j].is_same(p), name_, ": ", describe_param(p, g, i), " appears twice (also as parameter ",
                      j, " of group ", h, ")");
      }
    }
  }
  const size_t n = group.params.size();
  groups_.push_back(std::move(group));
  options_.push_back(std::move(options));
  state_.emplace_back(n);
  has_state_.emplace_back(n, false);
}

double Optimizer::option(size_t group, const std::string& key) const {
  COPPICE_CHECK(group < options_.size(), name_, ": no group ", group, " (", options_.size(), " groups)");
  auto it = options_[group].find(key);
  COPPICE_CHECK(it != options_[group].end(), name_, ": unknown hyperparameter '", key, "'");
  return it->second;
}

void Optimizer::set_option(size_t group, const std::string& key, double value) {
  COPPICE_CHECK(group < options_.size(), name_, ": no group ", group, " (", options_.size(), " groups)");
  Hyperparameters options = options_[group];
  auto it = options.find(key);
  COPPICE_CHECK(it != options.end(), name_, ": unknown hyperparameter '", key, "'");
  it->second = value;
  validate(options, group);
  options_[group] = std::move(options);
  groups_[group].options[key] = value;
}

Optimizer::Slot Optimizer::find(const Variable& param, const char* op) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      if (groups_[g].params[i].is_same(param)) return {g, i};
    }
  }
  fail(name_, ".", op, ": ",
       param.defined() && !param.name().empty() ? str_cat("'", param.name(), "'") : std::string("the variable"),
       " is not a parameter of this optimizer");
}

const ParamState* Optimizer::state(const Variable& param) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      if (groups_[g].params[i].is_same(param)) return has_state_[g][i] ? &state_[g][i] : nullptr;
    }
  }
  return nullptr;
}

ParamState& Optimizer::mutable_state(const Variable& param) {
  Slot s = find(param, "mutable_state");
  has_state_[s.group][s.index] = true;
  return state_[s.group][s.index];
}

void Optimizer::reset_state(const Variable& param) {
  Slot s = find(param, "reset_state");
  has_state_[s.group][s.index] = false;
  state_[s.group][s.index] = ParamState();
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const ParamGroup& g : groups_) {
    for (const Variable& p : g.params) {
      if (!p.grad().defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        p.zero_grad();
      }
    }
  }
}

void Optimizer::step(double grad_scale, NonfiniteFlag* nonfinite, const Tensor& grad_factor) {
  COPPICE_CHECK(std::isfinite(grad_scale) && grad_scale > 0.0, name_, ".step: grad_scale must be finite and > 0, got ",
                grad_scale);
  if (grad_factor.defined()) {
    COPPICE_CHECK(grad_factor.is_dense() && grad_factor.dtype() == DType::kF32 && grad_factor.numel() == 1, name_,
                  ".step: grad_factor must be one f32 element, got ", grad_factor.format(), " ",
                  dtype_name(grad_factor.dtype()), " ", shape_to_string(grad_factor.shape()));
  }
  // What lives for this step only, let go of however it ends.
  struct StepScope {
    Optimizer& o;
    ~StepScope() {
      o.grad_factor_ = Tensor();
      o.grad_factor_copies_.clear();
      o.host_factor_.reset();
      o.multi_ = MultiStepQueue();
    }
  } scope{*this};
  grad_factor_ = grad_factor.defined() ? grad_factor.contiguous() : Tensor();
  try {
    step_params(grad_scale, nonfinite);
  } catch (...) {
    // The parameters queued before the failure are stepped, as those before
    // it that were stepped on their own have been.
    launch_queued();
    throw;
  }
  launch_queued();
}

void Optimizer::step_params(double grad_scale, NonfiniteFlag* nonfinite) {
  int64_t slot = -1;  // the parameter's index over all groups: its flag
  if (nonfinite != nullptr) {
    size_t count = 0;
    for (const ParamGroup& group : groups_) count += group.params.size();
    COPPICE_CHECK(nonfinite->slots() >= static_cast<int64_t>(count), name_, ".step: the non-finite flags have ",
                  nonfinite->slots(), " slots for ", count, " parameters");
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      ++slot;
      const Variable& p = groups_[g].params[i];
      if (!p.grad().defined()) continue;
      const Tensor& value = p.value();
      const Tensor& grad = p.grad();
      const std::string who = describe_param(p, g, i);
      COPPICE_CHECK(grad.dtype() == value.dtype(), name_, ".step: the gradient of ", who, " has dtype ",
                    dtype_name(grad.dtype()), " but the parameter has dtype ", dtype_name(value.dtype()));
      COPPICE_CHECK(grad.device() == value.device(), name_, ".step: the gradient of ", who, " is on ",
                    grad.device().to_string(), " but the parameter is on ", value.device().to_string());
      COPPICE_CHECK(grad.shape() == value.shape(), name_, ".step: the gradient of ", who, " has shape ",
                    shape_to_string(grad.shape()), " but the parameter has shape ", shape_to_string(value.shape()));
      if (value.is_sparse()) {
        COPPICE_CHECK(grad.layout() == value.layout(), name_, ".step: the gradient of ", who, " is in format '",
                      grad.format(), "' but the parameter is in format '", value.format(), "'");
        COPPICE_CHECK(pattern_version(grad) == pattern_version(value), name_, ".step: the gradient of ", who,
                      " has pattern version ", pattern_version(grad), " but the parameter has pattern version ",
                      pattern_version(value), " (a gradient of an old mask? clear it after a mask change)");
      }
      ParamState& st = state_[g][i];
      if (has_state_[g][i]) {
        COPPICE_CHECK(st.pattern_version == pattern_version(value), name_, ".step: the pattern of ", who,
                      " changed (version ", st.pattern_version, " -> ", pattern_version(value),
                      ") without remap_state");
      } else {
        st = ParamState();
        st.pattern_version = pattern_version(value);
        has_state_[g][i] = true;
      }
      if (nonfinite == nullptr) {
        step_param(p, g, options_[g], st, grad_scale);
        continue;
      }
      // The fused kernel tests the gradient as it reads it; the op path's
      // gradient is folded in after the update (it reads it either way).
      nonfinite_slot_ = nonfinite->slot_on(slot, values(value).device());
      gradient_checked_ = false;
      try {
        step_param(p, g, options_[g], st, grad_scale);
      } catch (...) {
        nonfinite_slot_ = Tensor();
        throw;
      }
      nonfinite_slot_ = Tensor();
      if (!gradient_checked_) nonfinite->add(grad, slot);
    }
  }
}

void Optimizer::step_param(const Variable& param, size_t group, const Hyperparameters& options, ParamState& st,
                           double grad_scale) {
  const Tensor& value = param.value();
  Tensor p = values(value);
  Tensor grad = param.grad();
  if (value.is_dense() && is_row_sparse(grad)) {
    step_rows(param, options, st, grad_scale);
    return;
  }
  Tensor g = value.is_dense() ? to_dense(grad) : values(grad);
  const bool has_master = uses_master_weights(p.dtype());
  // 16-bit parameters: the update runs on the f32 master weights with an f32
  // gradient; `target` is what update() sees and writes.
  Tensor target = p;
  if (has_master) {
    Tensor& master = st.tensors[kMasterWeightsState];
    if (!master.defined()) master = p.to(DType::kF32).contiguous();
    target = master;
  }
  for (const auto& [key, t] : st.tensors) {
    COPPICE_CHECK(t.shape() == p.shape(), name_, ".step: the state '", key, "' of ", describe_param(param, 0, 0),
                  " has shape ", shape_to_string(t.shape()), " but the parameter's values have shape ",
                  shape_to_string(p.shape()));
  }
  ++st.step;
  // With others in one launch where the device has one.
  if (try_queue_multi(value, p, g, target, group, options, st, grad_scale)) return;
  // A 16-bit parameter's step in one pass where the optimizer has one.
  if (has_master && grad_scale == 1.0 && value.layout() != Layout::kMasked && update_mixed(target, g, p, options, st)) {
    return;
  }
  if (has_master) g = g.to(DType::kF32);
  if (grad_scale != 1.0) g = mul(g, 1.0 / grad_scale);
  if (value.layout() != Layout::kMasked) {
    Tensor out = update(target, g, options, st, /*in_place=*/true);
    if (!out.is_same(target)) target.copy_(out);
    if (has_master) p.copy_(target);  // rounds to the parameter's dtype
    return;
  }
  // Masked: compute out of place, then keep the old values off the mask.
  const Tensor& mask = masked_impl(value, "optimizer step").mask();
  std::map<std::string, Tensor> old = st.tensors;
  Tensor out = update(target, g, options, st, /*in_place=*/false);
  for (auto& [key, t] : st.tensors) {
    auto it = old.find(key);
    t = where(mask, t, it != old.end() ? it->second : zeros_like(t));
  }
  Tensor kept = where(mask, out, target);
  if (has_master) st.tensors[kMasterWeightsState] = kept;
  p.copy_(kept);
}

void Optimizer::init_state(const Tensor&, const Hyperparameters&, ParamState&) const {}

namespace {

// dst's rows at `rows` replaced by `values`, in place (index_copy_), through a
// contiguous copy where dst is strided.
void write_rows(const Tensor& dst, const Tensor& rows, const Tensor& values) {
  if (dst.is_contiguous()) {
    index_copy_(dst, 0, rows, values.to(dst.dtype()));
    return;
  }
  Tensor staged = dst.contiguous();
  index_copy_(staged, 0, rows, values.to(dst.dtype()));
  Tensor(dst).copy_(staged);
}

}  // namespace

void Optimizer::step_rows(const Variable& param, const Hyperparameters& options, ParamState& st, double grad_scale) {
  Tensor p = param.value();
  COPPICE_CHECK(!uses_master_weights(p.dtype()), name_, ".step: a row-sparse gradient of a ", dtype_name(p.dtype()),
                " parameter (f32 master weights) is not supported; use an f32 or f64 embedding, or a dense gradient");
  const Tensor rows = row_sparse_rows(param.grad());
  Tensor g = row_sparse_values(param.grad()).contiguous();
  if (grad_scale != 1.0) g = mul(g, 1.0 / grad_scale);
  ++st.step;
  init_state(p, options, st);
  ParamState local = st;  // the step count and options; the state tensors gathered below
  for (auto& [key, t] : local.tensors) t = index_select(t, 0, rows).contiguous();
  Tensor target = index_select(p, 0, rows).contiguous();
  Tensor out = update(target, g, options, local, /*in_place=*/true);
  // Written back in place: only the k rows are touched, not the table.
  write_rows(p, rows, out);
  for (auto& [key, t] : local.tensors) {
    auto it = st.tensors.find(key);
    if (it == st.tensors.end()) it = st.tensors.emplace(key, zeros(p.shape(), t.options())).first;
    write_rows(it->second, rows, t);
  }
}

bool Optimizer::update_mixed(const Tensor&, const Tensor&, const Tensor&, const Hyperparameters&, ParamState&) {
  return false;
}

bool Optimizer::queue_multi(const MultiCandidate&, const Hyperparameters&, ParamState&, MultiStepQueue&) {
  return false;
}

// The fused kernels' conditions (optim/fused_step.h), for f32 values or
// 16-bit ones with their f32 master: flat arrays of one size on one device.
bool Optimizer::try_queue_multi(const Tensor& value, const Tensor& p, const Tensor& g, const Tensor& target,
                                size_t group, const Hyperparameters& options, ParamState& st, double grad_scale) {
  if (!multi_tensor_ || grad_scale != 1.0 || value.layout() == Layout::kMasked) return false;
  const MultiTensorKernels* kernels = multi_tensor_kernels(p.device().type);
  if (kernels == nullptr || kernels->step == nullptr) return false;
  const bool has_master = !target.is_same(p);
  if (has_master ? (p.dtype() != DType::kBF16 && p.dtype() != DType::kF16) : p.dtype() != DType::kF32) return false;
  for (const Tensor* t : {&p, &g, &target}) {
    if (!t->is_dense() || !t->is_contiguous() || t->device() != p.device() || t->shape() != p.shape()) return false;
  }
  if (g.dtype() != p.dtype() || target.dtype() != DType::kF32) return false;
  MultiCandidate c;
  c.group = group;
  c.param = target;
  c.grad = g;
  if (has_master) c.param16 = p;
  if (nonfinite_slot_.defined()) c.flag = nonfinite_slot_.data<float>();
  if (!queue_multi(c, options, st, multi_)) return false;
  multi_.keep.push_back(g);
  if (nonfinite_slot_.defined()) gradient_checked();
  return true;
}

void Optimizer::launch_queued() {
  MultiStepQueue queue = std::move(multi_);
  multi_ = MultiStepQueue();
  for (const auto& [key, batch] : queue.batches) {
    if (batch.entries.empty()) continue;
    // Counted as "multi_tensor_step" by the op profiler (tests tell the path by it).
    std::optional<ProfileScope> profile;
    if (op_profile_enabled()) profile.emplace(str_cat("multi_tensor_step(", name_, ")"), batch.device);
    multi_tensor_kernels(batch.device.type)->step(batch);
  }
}

Tensor Optimizer::grad_factor_on(Device device) {
  if (!grad_factor_.defined()) return Tensor();
  if (grad_factor_.device() == device) return grad_factor_;
  Tensor& copy = grad_factor_copies_[{static_cast<int>(device.type), device.index}];
  if (!copy.defined()) copy = grad_factor_.to(device).contiguous();
  return copy;
}

const float* Optimizer::multi_factor(Device device) {
  const Tensor f = grad_factor_on(device);
  return f.defined() ? f.data<float>() : nullptr;
}

std::optional<float> Optimizer::host_grad_factor() {
  if (!grad_factor_.defined()) return std::nullopt;
  if (!host_factor_) host_factor_ = static_cast<float>(grad_factor_.to(Device::cpu()).to(DType::kF64).item());
  return host_factor_;
}

void Optimizer::remap_state(const Variable& param, const Tensor& keep_from) {
  Slot s = find(param, "remap_state");
  const std::string who = describe_param(param, s.group, s.index);
  const Tensor p = values(param.value());
  COPPICE_CHECK(keep_from.defined() && keep_from.is_dense() && keep_from.dtype() == DType::kI64 && keep_from.dim() <= 1,
                name_, ".remap_state: keep_from for ", who, " must be a dense 1-D i64 tensor, got ",
                keep_from.defined() ? str_cat(keep_from.format(), " ", dtype_name(keep_from.dtype()), " ",
                                              shape_to_string(keep_from.shape()))
                                    : std::string("an undefined tensor"));
  COPPICE_CHECK(keep_from.numel() == p.numel(), name_, ".remap_state: keep_from for ", who, " has ", keep_from.numel(),
                " entries but the parameter's values have ", p.numel(), " (shape ", shape_to_string(p.shape()), ")");
  if (!has_state_[s.group][s.index]) return;
  ParamState& st = state_[s.group][s.index];
  int64_t old_n = -1;
  for (const auto& [key, t] : st.tensors) {
    COPPICE_CHECK(old_n < 0 || t.numel() == old_n, name_, ".remap_state: the state tensors of ", who,
                  " differ in size");
    old_n = t.numel();
  }
  if (old_n >= 0) {
    // Two reductions where keep_from lies (a large layer's is on the device);
    // the entry to name is looked for only when one is out of range.
    if (keep_from.numel() > 0 &&
        (min(keep_from).item() < -1.0 || max(keep_from).item() >= static_cast<double>(old_n))) {
      const std::vector<int64_t> keep = keep_from.to_vector<int64_t>();
      for (size_t j = 0; j < keep.size(); ++j) {
        COPPICE_CHECK(keep[j] >= -1 && keep[j] < old_n, name_, ".remap_state: keep_from[", j, "] = ", keep[j], " for ",
                      who, " is outside [-1, ", old_n, ")");
      }
    }
    // Gather from the old state with one zero appended: -1 picks the zero.
    Tensor k = keep_from.reshape({-1}).to(p.device());
    Tensor idx = where(lt(k, 0.0), full_like(k, static_cast<double>(old_n)), k).contiguous();
    const Tensor is_new = lt(k, 0.0);
    for (auto& [key, t] : st.tensors) {
      Tensor flat = cat({t.reshape({-1}), zeros({1}, t.options())});
      Tensor kept = index_select(flat, 0, idx);
      // A regrown weight's master starts at the weight itself, not at zero.
      if (key == kMasterWeightsState) kept = where(is_new, p.reshape({-1}).to(t.dtype()), kept);
      t = kept.reshape(p.shape()).contiguous();
    }
  }
  st.pattern_version = pattern_version(param.value());
}

void Optimizer::set_value(const Variable& param, const Tensor& new_value, const Tensor& keep_from) {
  Slot s = find(param, "set_value");
  const std::string who = describe_param(param, s.group, s.index);
  COPPICE_CHECK(new_value.defined(), name_, ".set_value: the new value of ", who, " is an undefined Tensor");
  const int64_t slots = values(new_value).numel();
  COPPICE_CHECK(keep_from.defined() && keep_from.numel() == slots, name_, ".set_value: keep_from for ", who, " has ",
                keep_from.defined() ? keep_from.numel() : 0, " entries but the new value's values have ", slots);
  param.set_value(new_value);
  remap_state(param, keep_from);
}

void Optimizer::replace_param(const Variable& old_param, const Variable& new_param, const Tensor& keep_from) {
  Slot s = find(old_param, "replace_param");
  COPPICE_CHECK(new_param.defined(), name_, ".replace_param: the new parameter is an undefined Variable");
  COPPICE_CHECK(is_floating(new_param.dtype()), name_, ".replace_param: the new parameter has dtype ",
                dtype_name(new_param.dtype()));
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      if (g == s.group && i == s.index) continue;
      COPPICE_CHECK(!groups_[g].params[i].is_same(new_param), name_,
                    ".replace_param: the new parameter is already parameter ", i, " of group ", g);
    }
  }
  groups_[s.group].params[s.index] = new_param;
  remap_state(new_param, keep_from);
}

Variable Optimizer::replace_value(const Variable& old_param, const Tensor& new_value, const Tensor& keep_from) {
  find(old_param, "replace_value");
  COPPICE_CHECK(new_value.defined(), name_, ".replace_value: the new value is an undefined Tensor");
  Variable fresh(new_value, old_param.requires_grad(), old_param.name());
  replace_param(old_param, fresh, keep_from);
  return fresh;
}

}  // namespace coppice

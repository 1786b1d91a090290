#include "models/module.h"

#include <functional>
#include <map>
#include <set>

#include "autograd/graph_observer.h"
#include "autograd/no_grad.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"

namespace coppice {
namespace {

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace

// ---- registration ----------------------------------------------------------

void Module::check_new_name(const std::string& name) const {
  COPPICE_CHECK(!name.empty(), type_name_, ": a parameter, buffer or submodule needs a non-empty name");
  COPPICE_CHECK(name.find('.') == std::string::npos, type_name_, ": name '", name, "' contains '.'");
  for (const auto& p : parameters_)
    COPPICE_CHECK(p.name != name, type_name_, ": name '", name, "' is already a parameter");
  for (const auto& b : buffers_) COPPICE_CHECK(b.name != name, type_name_, ": name '", name, "' is already a buffer");
  for (const auto& c : children_)
    COPPICE_CHECK(c.first != name, type_name_, ": name '", name, "' is already a submodule");
}

Variable* Module::register_parameter(const std::string& name, Variable value, bool viewable) {
  check_new_name(name);
  COPPICE_CHECK(value.defined(), type_name_, ": parameter '", name, "' is undefined");
  parameters_.push_back({name, std::move(value), viewable, nullptr});
  return &parameters_.back().value;
}

Tensor* Module::register_buffer(const std::string& name, Tensor value) {
  check_new_name(name);
  COPPICE_CHECK(value.defined(), type_name_, ": buffer '", name, "' is undefined");
  buffers_.push_back({name, std::move(value)});
  return &buffers_.back().value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  COPPICE_CHECK(module != nullptr, type_name_, ": submodule '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

// ---- traversal -------------------------------------------------------------

NamedParameters Module::named_parameters() const {
  NamedParameters out;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    for (const auto& p : m.parameters_) out.emplace_back(join_name(prefix, p.name), p.value);
    for (const auto& [name, child] : m.children_) walk(*child, join_name(prefix, name));
  };
  walk(*this, "");
  return out;
}

std::vector<Variable> Module::parameters() const {
  std::vector<Variable> out;
  for (auto& [name, v] : named_parameters()) out.push_back(v);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    for (const auto& b : m.buffers_) out.emplace_back(join_name(prefix, b.name), b.value);
    for (const auto& [name, child] : m.children_) walk(*child, join_name(prefix, name));
  };
  walk(*this, "");
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::function<void(Module&, const std::string&)> walk = [&](Module& m, const std::string& prefix) {
    for (auto& [name, child] : m.children_) {
      std::string full = join_name(prefix, name);
      out.emplace_back(full, child.get());
      walk(*child, full);
    }
  };
  walk(*this, "");
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out;
  for (auto& [name, m] : const_cast<Module*>(this)->named_modules()) out.emplace_back(name, m);
  return out;
}

std::pair<Module*, std::string> Module::resolve(const std::string& name) {
  Module* m = this;
  size_t start = 0;
  for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', start)) {
    const std::string part = name.substr(start, dot - start);
    Module* next = nullptr;
    for (auto& [n, child] : m->children_) {
      if (n == part) next = child.get();
    }
    if (next == nullptr) return {nullptr, ""};
    m = next;
    start = dot + 1;
  }
  return {m, name.substr(start)};
}

std::pair<const Module*, std::string> Module::resolve(const std::string& name) const {
  auto [m, local] = const_cast<Module*>(this)->resolve(name);
  return {m, local};
}

Module::ParameterSlot* Module::find_parameter(const std::string& local) {
  for (auto& p : parameters_) {
    if (p.name == local) return &p;
  }
  return nullptr;
}

Module::BufferSlot* Module::find_buffer(const std::string& local) {
  for (auto& b : buffers_) {
    if (b.name == local) return &b;
  }
  return nullptr;
}

std::string Module::known_parameter_names() const {
  std::vector<std::string> names;
  for (const auto& [n, v] : named_parameters()) names.push_back(n);
  return names.empty() ? "(none)" : str_join(names, ", ");
}

const Variable& Module::parameter(const std::string& name) const {
  auto [m, local] = const_cast<Module*>(this)->resolve(name);
  ParameterSlot* slot = m ? m->find_parameter(local) : nullptr;
  COPPICE_CHECK(slot != nullptr, type_name_, ": no parameter '", name, "'; known: ", known_parameter_names());
  return slot->value;
}

void Module::set_parameter(const std::string& name, Variable value) {
  auto [m, local] = resolve(name);
  ParameterSlot* slot = m ? m->find_parameter(local) : nullptr;
  COPPICE_CHECK(slot != nullptr, type_name_, ": no parameter '", name, "'; known: ", known_parameter_names());
  COPPICE_CHECK(value.defined(), type_name_, ": set_parameter('", name, "') with an undefined Variable");
  COPPICE_CHECK(value.shape() == slot->value.shape(), type_name_, ": set_parameter('", name, "'): shape ",
                shape_to_string(value.shape()), " does not match the parameter's ",
                shape_to_string(slot->value.shape()));
  slot->value = std::move(value);
}

void Module::set_parameter_view(const std::string& name, ParameterView view) {
  auto [m, local] = resolve(name);
  ParameterSlot* slot = m ? m->find_parameter(local) : nullptr;
  COPPICE_CHECK(slot != nullptr, type_name_, ": no parameter '", name, "'; known: ", known_parameter_names());
  COPPICE_CHECK(slot->viewable || !view, type_name_, ": parameter '", name, "' of ", m->type_name_,
                " cannot be seen through a view: its layer reads it directly (the weights of Linear and Conv2d can)");
  slot->view = std::move(view);
}

bool Module::accepts_view(const std::string& name) const {
  auto [m, local] = const_cast<Module*>(this)->resolve(name);
  const ParameterSlot* slot = m ? m->find_parameter(local) : nullptr;
  return slot != nullptr && slot->viewable;
}

Variable Module::viewed_parameter(const std::string& name) const {
  auto [m, local] = const_cast<Module*>(this)->resolve(name);
  const ParameterSlot* slot = m ? m->find_parameter(local) : nullptr;
  COPPICE_CHECK(slot != nullptr, type_name_, ": no parameter '", name, "'; known: ", known_parameter_names());
  return slot->view ? slot->view(slot->value) : slot->value;
}

Variable Module::view_of(const Variable* slot) const {
  for (const ParameterSlot& p : parameters_) {
    if (&p.value != slot) continue;
    return p.view ? p.view(p.value) : p.value;
  }
  fail(type_name_, ": view_of: not a parameter slot of this module");
}

const Tensor& Module::buffer(const std::string& name) const {
  auto [m, local] = const_cast<Module*>(this)->resolve(name);
  BufferSlot* slot = m ? m->find_buffer(local) : nullptr;
  COPPICE_CHECK(slot != nullptr, type_name_, ": no buffer '", name, "'");
  return slot->value;
}

void Module::set_buffer(const std::string& name, Tensor value) {
  auto [m, local] = resolve(name);
  BufferSlot* slot = m ? m->find_buffer(local) : nullptr;
  COPPICE_CHECK(slot != nullptr, type_name_, ": no buffer '", name, "'");
  COPPICE_CHECK(value.defined() && value.shape() == slot->value.shape(), type_name_, ": set_buffer('", name,
                "'): shape does not match the buffer's ", shape_to_string(slot->value.shape()));
  slot->value = std::move(value);
}

Module& Module::submodule(const std::string& name) {
  for (auto& [n, m] : named_modules()) {
    if (n == name) return *m;
  }
  fail(type_name_, ": no submodule '", name, "'");
}

// ---- modes and state ---------------------------------------------------------

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  for (const auto& [name, v] : named_parameters()) out.emplace_back(name, v.value());
  for (auto& b : named_buffers()) out.push_back(std::move(b));
  return out;
}

void Module::check_state_dict(const NamedTensors& state, bool strict) const {
  const NamedParameters params = named_parameters();
  const NamedTensors buffers = named_buffers();
  std::set<std::string> own;
  for (const auto& [n, v] : params) own.insert(n);
  for (const auto& [n, t] : buffers) own.insert(n);

  std::set<std::string> given;
  std::vector<std::string> unexpected, duplicate;
  for (const auto& [n, t] : state) {
    if (!given.insert(n).second) duplicate.push_back(n);
    if (!own.count(n)) unexpected.push_back(n);
  }
  COPPICE_CHECK(duplicate.empty(), "load_state_dict: duplicate names: ", str_join_some(duplicate, ", "));
  std::vector<std::string> missing;
  for (const auto& n : own) {
    if (!given.count(n)) missing.push_back(n);
  }
  if (strict && (!missing.empty() || !unexpected.empty())) {
    fail("load_state_dict (", type_name_, "): missing: ", missing.empty() ? "(none)" : str_join_some(missing, ", "),
         "; unexpected: ", unexpected.empty() ? "(none)" : str_join_some(unexpected, ", "));
  }
  // By name, once: a scan per entry would cost entries x parameters on a
  // file with many (unexpected) entries.
  std::map<std::string, const Shape*> own_shape;
  for (const auto& [bn, t] : buffers) own_shape[bn] = &t.shape();
  for (const auto& [pn, v] : params) own_shape[pn] = &v.shape();
  for (const auto& [n, t] : state) {
    auto found = own_shape.find(n);
    if (found == own_shape.end()) continue;
    const Shape* s = found->second;
    COPPICE_CHECK(t.defined(), "load_state_dict (", type_name_, "): '", n, "' is an undefined tensor");
    COPPICE_CHECK(t.shape() == *s, "load_state_dict (", type_name_, "): '", n, "' has shape ",
                  shape_to_string(t.shape()), ", the module's is ", shape_to_string(*s));
  }
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  check_state_dict(state, strict);
  const NamedParameters params = named_parameters();
  std::set<std::string> own;
  for (const auto& [n, v] : params) own.insert(n);
  for (const auto& [n, t] : named_buffers()) own.insert(n);

  NoGradGuard no_grad;
  for (const auto& [n, t] : state) {
    if (!own.count(n)) continue;
    bool is_param = false;
    for (const auto& [pn, v] : params) {
      if (pn != n) continue;
      is_param = true;
      Tensor loaded = to_device(to_dtype(t, v.dtype()), v.device());
      if (loaded.is_dense() && v.value().is_dense()) {
        Tensor dst = v.value();
        dst.copy_(loaded);
      } else {
        // Own the values: training updates them in place, the caller's
        // tensors must not change (index parts are never written, so shared).
        if (loaded.is_same(t))
          loaded = loaded.is_dense() ? loaded.clone() : with_values(loaded, values(loaded).clone());
        set_parameter(n, Variable(loaded, v.requires_grad(), v.name()));
      }
    }
    if (!is_param) {
      const Tensor& old = buffer(n);
      Tensor loaded = to_dense(to_device(to_dtype(t, old.dtype()), old.device()));
      if (old.is_dense()) {
        Tensor dst = old;
        dst.copy_(loaded);
      } else {
        set_buffer(n, loaded.clone());
      }
    }
  }
}

void Module::to(Device device) {
  for (auto& p : parameters_) {
    if (p.value.device() == device) continue;
    p.value = Variable(to_device(p.value.value(), device), p.value.requires_grad(), p.value.name());
  }
  for (auto& b : buffers_) b.value = to_device(b.value, device);
  for (auto& [name, child] : children_) child->to(device);
}

void Module::zero_grad() {
  for (auto& [name, v] : named_parameters()) v.set_grad(Tensor());
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, v] : named_parameters()) n += nnz(v.value());
  return n;
}

// ---- sparsity ----------------------------------------------------------------

const AppliedSchedule& Module::apply_sparsity(const SparsitySchedule& schedule, const SparsifyContext& ctx) {
  std::vector<std::string> module_names;
  auto modules = named_modules();
  for (const auto& [n, m] : modules) module_names.push_back(n);
  auto applied = std::make_shared<AppliedSchedule>(apply_schedule(schedule, named_parameters(), module_names, ctx));
  for (const ScheduledParameter& p : applied->parameters()) {
    if (p.rule) set_parameter(p.name, p.value);
  }
  applied_ = applied;
  output_rule_ = nullptr;
  keep_alive_ = nullptr;
  for (const auto& [n, m] : modules) {
    m->keep_alive_ = applied;
    m->output_rule_ = applied->output_rule(n);
    m->sparsity_ctx_ = ctx;
    m->sparsity_ctx_.purpose = ctx.purpose ^ std::hash<std::string>()(n);
  }
  return *applied_;
}

void Module::set_sparsity_step(uint64_t step) {
  sparsity_ctx_.step = step;
  for (auto& [name, child] : children_) child->set_sparsity_step(step);
}

std::vector<Variable> Module::auxiliary_losses() const {
  std::vector<Variable> out;
  if (auxiliary_loss_.defined()) out.push_back(auxiliary_loss_);
  for (const auto& [name, child] : children_) {
    std::vector<Variable> more = child->auxiliary_losses();
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

Variable Module::run_op(const std::vector<Variable>& inputs, const SingleOpFn& op) const {
  // An installed GraphObserver (a traced step, models/propagation) sees the
  // op as a scope owned by this module.
  GraphObserver* observer = graph_observer();
  if (observer != nullptr) observer->on_scope_begin(this);
  Variable out;
  if (output_rule_ == nullptr) {
    out = op(inputs);
  } else {
    const OutputSparsity& rule = *output_rule_;
    COPPICE_CHECK(rule.forward.size() <= 1, type_name_, ": the output rule gives ", rule.forward.size(),
                  " forward stages; this module has one output");
    COPPICE_CHECK(rule.backward.size() <= inputs.size(), type_name_, ": the output rule gives ", rule.backward.size(),
                  " backward stages; this module's op has ", inputs.size(), " inputs");
    std::vector<ValueSparsity> grads = rule.backward;
    if (!grads.empty()) grads.resize(inputs.size());  // the rest keep all
    out = SparsifiedOp(op, rule.forward.empty() ? ValueSparsity{} : rule.forward.front(), std::move(grads))
              .call(inputs, sparsity_ctx_);
  }
  if (observer != nullptr) observer->on_scope_end(this, out.defined() ? out.gradient_edge() : Edge{});
  return out;
}

}  // namespace coppice

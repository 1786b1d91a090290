#include "autograd/variable.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "autograd/gradient_destination.h"
#include "autograd/graph_observer.h"
#include "autograd/sparse_grad.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

namespace coppice {

struct VariableImpl {
  Tensor value;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  bool requires_grad = false;
  std::string name;
  // Counts set_value calls: an accumulator recorded under another value refuses to accumulate.
  uint64_t value_generation = 0;
  // A leaf's accumulator lives as long as some graph points at it.
  std::weak_ptr<Node> grad_accumulator;
  std::vector<std::pair<HookId, GradHook>> hooks;                             // leaves; non-leaves hook their grad_fn
  std::vector<std::pair<HookId, AccumulatedGradHook>> post_accumulate_hooks;  // leaves
  Tensor grad_destination;                                                    // leaves: set_grad_destination
};

namespace {

std::string describe(const VariableImpl& v) {
  return v.name.empty() ? std::string("a variable") : str_cat("'", v.name, "'");
}

// Sums gradients into a leaf's grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<VariableImpl> var)
      : Node("AccumulateGrad"), var_(std::move(var)), generation_(var_->value_generation) {}

  bool single_use() const override { return false; }
  bool joins_beside_itself() const override { return true; }

  Tensor gradient_destination(uint32_t /*slot*/) const override {
    const bool offered = !var_->grad.defined() && generation_ == var_->value_generation;
    return offered ? var_->grad_destination : Tensor();
  }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    Tensor g = std::move(grads[0]);
    if (!g.defined()) return {};
    // g may still be in the making beside the stream (run_beside: a sparse
    // weight's gradient): joined before anything here reads it on the device.
    if (!stored_as_is(g)) join_beside(g.device());
    COPPICE_CHECK(generation_ == var_->value_generation, "backward: ", describe(*var_),
                  " was given a new value (Variable::set_value: a mask update) after this graph was recorded; run "
                  "the forward pass again");
    // A sparse variable's gradient keeps its pattern (a dense one is projected
    // onto it), so hooks see the sparse gradient.
    const bool sparse = var_->value.is_sparse();
    if (sparse) g = project_grad(g, var_->value, "backward");
    for (const auto& hook : var_->hooks) {
      Tensor replaced = hook.second(g);
      if (replaced.defined()) g = std::move(replaced);
    }
    if (sparse) g = project_grad(g, var_->value, "backward (after a hook)");
    COPPICE_CHECK(g.shape() == var_->value.shape(), "backward: the gradient for ", describe(*var_), " has shape ",
                  shape_to_string(g.shape()), " but the variable has shape ", shape_to_string(var_->value.shape()),
                  " (did a hook change it?)");
    if (g.dtype() != var_->value.dtype()) g = grad_to_dtype(g, var_->value.dtype());
    if (!var_->grad.defined()) {
      // Written into the destination, whose owner shares it by design: stored as is.
      var_->grad = is_written_into(g, var_->grad_destination) ? std::move(g) : owned(std::move(g));
    } else {
      var_->grad = accumulate_grads(var_->grad, g, "backward");
    }
    for (const auto& hook : var_->post_accumulate_hooks) hook.second(var_->grad);
    return {};
  }

 private:
  // The gradient itself when nothing else can see its data, else a copy, so
  // that grad never aliases a seed, a hook's tensor or a stride-0 view. A
  // sparse gradient's pattern may be shared (patterns are never written);
  // its values are what must be its own.
  static Tensor owned(Tensor g) {
    if (is_own(g)) return g;
    return g.is_dense() ? g.clone() : with_values(g, values(g).clone());
  }

  // Whether nothing but `g` sees its data (its values, when sparse).
  static bool is_own(const Tensor& g) {
    if (g.impl_ptr().use_count() != 1) return false;
    // values() hands out a second handle on the values, besides g's own.
    return g.is_dense() ? sole_owner(g, 1) : sole_owner(values(g), 2);
  }

  // Whether apply stores g as it is, with no device work: no hook, no sum,
  // no projection, conversion or copy.
  bool stored_as_is(const Tensor& g) const {
    if (!var_->hooks.empty() || !var_->post_accumulate_hooks.empty() || var_->grad.defined()) return false;
    if (g.dtype() != var_->value.dtype()) return false;
    if (var_->value.is_sparse() && !has_pattern_of(g, var_->value)) return false;
    return is_written_into(g, var_->grad_destination) || is_own(g);
  }

  // True when `t`'s data is contiguous and seen through `handles` handles on
  // its tensor alone.
  static bool sole_owner(const Tensor& t, long handles) {
    return t.is_contiguous() && t.impl_ptr().use_count() == handles && t.storage().use_count() == 1;
  }

  std::shared_ptr<VariableImpl> var_;
  uint64_t generation_;
};

}  // namespace

Variable::Variable(Tensor value, bool requires_grad, std::string name) : impl_(std::make_shared<VariableImpl>()) {
  COPPICE_CHECK(value.defined(), "Variable: the value is an undefined Tensor");
  impl_->value = std::move(value);
  impl_->name = std::move(name);
  set_requires_grad(requires_grad);
}

Variable Variable::from_node(Tensor value, std::shared_ptr<Node> grad_fn, uint32_t output_nr) {
  COPPICE_CHECK(value.defined(), "Variable: the value is an undefined Tensor");
  COPPICE_CHECK(grad_fn != nullptr, "Variable::from_node: no node");
  COPPICE_CHECK(output_nr < grad_fn->num_outputs(), "Variable::from_node: ", grad_fn->name(), " has ",
                grad_fn->num_outputs(), " outputs, not output ", output_nr);
  Variable v;
  v.impl_ = std::make_shared<VariableImpl>();
  v.impl_->value = std::move(value);
  v.impl_->grad_fn = std::move(grad_fn);
  v.impl_->output_nr = output_nr;
  v.impl_->requires_grad = true;
  if (GraphObserver* observer = graph_observer()) observer->on_output(v.impl_->grad_fn, output_nr, v.impl_->value);
  return v;
}

VariableImpl* Variable::checked() const {
  COPPICE_CHECK(impl_ != nullptr, "Variable: use of an undefined Variable");
  return impl_.get();
}

const Tensor& Variable::value() const { return checked()->value; }
const Tensor& Variable::grad() const { return checked()->grad; }

void Variable::set_grad(Tensor grad) const {
  VariableImpl* v = checked();
  if (grad.defined()) {
    COPPICE_CHECK(grad.shape() == v->value.shape(), "set_grad: a gradient of shape ", shape_to_string(grad.shape()),
                  " for ", describe(*v), " of shape ", shape_to_string(v->value.shape()));
    // A sparse variable's gradient has its pattern: a dense one is projected, another pattern throws.
    if (v->value.is_sparse()) grad = project_grad(grad, v->value, "set_grad");
  }
  v->grad = std::move(grad);
}

void Variable::zero_grad() const {
  VariableImpl* v = checked();
  if (!v->grad.defined()) return;
  v->grad = v->grad.is_dense() ? zeros(v->grad.shape(), v->grad.options())
                               : with_values(v->grad, zeros_like(values(v->grad)));
}

void Variable::set_value(Tensor value) const {
  VariableImpl* v = checked();
  COPPICE_CHECK(v->grad_fn == nullptr, "set_value: ", describe(*v), " is not a leaf (it was computed by ",
                v->grad_fn->name(), ")");
  COPPICE_CHECK(value.defined(), "set_value: the new value of ", describe(*v), " is an undefined Tensor");
  COPPICE_CHECK(value.shape() == v->value.shape(), "set_value: a value of shape ", shape_to_string(value.shape()),
                " for ", describe(*v), " of shape ", shape_to_string(v->value.shape()));
  COPPICE_CHECK(value.dtype() == v->value.dtype(), "set_value: a value of dtype ", dtype_name(value.dtype()), " for ",
                describe(*v), " of dtype ", dtype_name(v->value.dtype()));
  COPPICE_CHECK(value.device() == v->value.device(), "set_value: a value on ", value.device().to_string(), " for ",
                describe(*v), " on ", v->value.device().to_string());
  v->value = std::move(value);
  v->grad = Tensor();
  v->grad_destination = Tensor();
  ++v->value_generation;
  v->grad_accumulator.reset();  // the next graph records a fresh accumulator
}

const std::shared_ptr<Node>& Variable::grad_fn() const { return checked()->grad_fn; }
uint32_t Variable::output_nr() const { return checked()->output_nr; }
bool Variable::requires_grad() const { return checked()->requires_grad; }
const std::string& Variable::name() const { return checked()->name; }
void Variable::set_name(std::string name) const { checked()->name = std::move(name); }

void Variable::set_requires_grad(bool requires_grad) const {
  VariableImpl* v = checked();
  COPPICE_CHECK(v->grad_fn == nullptr, "set_requires_grad: ", describe(*v), " is not a leaf (it was computed by ",
                v->grad_fn->name(), "); use detach() to make a leaf");
  COPPICE_CHECK(!requires_grad || is_floating(v->value.dtype()), "set_requires_grad: only floating-point values can ",
                "require grad, but ", describe(*v), " holds ", dtype_name(v->value.dtype()));
  v->requires_grad = requires_grad;
}

void Variable::backward(const Tensor& grad, bool retain_graph) const { run_backward({*this}, {grad}, retain_graph); }

Variable Variable::detach() const { return Variable(value(), false, name()); }

HookId Variable::register_hook(GradHook hook) const {
  VariableImpl* v = checked();
  COPPICE_CHECK(v->requires_grad, "register_hook: ", describe(*v), " does not require grad, so no gradient reaches it");
  COPPICE_CHECK(hook != nullptr, "register_hook: empty hook");
  if (v->grad_fn) return v->grad_fn->add_pre_hook(v->output_nr, std::move(hook));
  HookId id = next_hook_id();
  v->hooks.emplace_back(id, std::move(hook));
  return id;
}

void Variable::set_grad_destination(Tensor destination) const {
  VariableImpl* v = checked();
  if (destination.defined()) {
    COPPICE_CHECK(v->grad_fn == nullptr, "set_grad_destination: ", describe(*v), " is not a leaf");
    COPPICE_CHECK(v->value.is_dense(), "set_grad_destination: ", describe(*v), " is ", v->value.format(),
                  "; only a dense leaf's gradient has a destination");
    COPPICE_CHECK(destination.is_dense() && destination.is_contiguous(), "set_grad_destination: the destination for ",
                  describe(*v), " must be a contiguous dense tensor");
    COPPICE_CHECK(destination.shape() == v->value.shape() && destination.dtype() == v->value.dtype() &&
                      destination.device() == v->value.device(),
                  "set_grad_destination: a destination ", dtype_name(destination.dtype()), " ",
                  shape_to_string(destination.shape()), " on ", destination.device().to_string(), " for ", describe(*v),
                  ", which is ", dtype_name(v->value.dtype()), " ", shape_to_string(v->value.shape()), " on ",
                  v->value.device().to_string());
    COPPICE_CHECK(!destination.storage().read_only(), "set_grad_destination: the destination for ", describe(*v),
                  " is read-only memory");
  }
  v->grad_destination = std::move(destination);
}

const Tensor& Variable::grad_destination() const { return checked()->grad_destination; }

HookId Variable::register_post_accumulate_hook(AccumulatedGradHook hook) const {
  VariableImpl* v = checked();
  COPPICE_CHECK(v->grad_fn == nullptr, "register_post_accumulate_hook: ", describe(*v), " is not a leaf (it was ",
                "computed by ", v->grad_fn->name(), "); only leaves accumulate a gradient");
  COPPICE_CHECK(v->requires_grad, "register_post_accumulate_hook: ", describe(*v),
                " does not require grad, so no gradient reaches it");
  COPPICE_CHECK(hook != nullptr, "register_post_accumulate_hook: empty hook");
  HookId id = next_hook_id();
  v->post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

namespace {

// Erases the hook with `id` from `hooks`; false when none has it.
template <typename Hooks>
bool erase_hook(Hooks& hooks, HookId id) {
  auto it = std::find_if(hooks.begin(), hooks.end(), [id](const auto& h) { return h.first == id; });
  if (it == hooks.end()) return false;
  hooks.erase(it);
  return true;
}

}  // namespace

bool Variable::remove_hook(HookId id) const {
  VariableImpl* v = checked();
  if (v->grad_fn) return v->grad_fn->remove_pre_hook(id);
  return erase_hook(v->hooks, id) || erase_hook(v->post_accumulate_hooks, id);
}

Edge Variable::gradient_edge() const {
  VariableImpl* v = checked();
  if (v->grad_fn) return Edge{v->grad_fn, v->output_nr};
  if (!v->requires_grad) return Edge{};
  std::shared_ptr<Node> acc = v->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(impl_);
    v->grad_accumulator = acc;
  }
  return Edge{std::move(acc), 0};
}

std::ostream& operator<<(std::ostream& os, const Variable& v) {
  if (!v.defined()) return os << "Variable(undefined)";
  os << "Variable(";
  if (!v.name().empty()) os << "'" << v.name() << "', ";
  if (v.grad_fn()) {
    os << "grad_fn=" << v.grad_fn()->name();
  } else {
    os << "requires_grad=" << (v.requires_grad() ? "true" : "false");
  }
  return os << ")\n" << v.value();
}

}  // namespace coppice

#include "models/propagation/step_trace.h"

#include <map>
#include <memory>
#include <utility>

#include "autograd/graph_observer.h"
#include "autograd/no_grad.h"
#include "tensor/dispatch_observer.h"
#include "tensor/error.h"

namespace coppice::propagation {
namespace {

constexpr std::string_view kBackwardSuffix = "Backward";

std::string op_name(const std::string& node_name) {
  if (node_name.size() > kBackwardSuffix.size() &&
      node_name.compare(node_name.size() - kBackwardSuffix.size(), kBackwardSuffix.size(), kBackwardSuffix) == 0)
    return node_name.substr(0, node_name.size() - kBackwardSuffix.size());
  return node_name;
}

FormatOptions options_of(const Tensor& t) {
  const FormatSpec* spec = find_format(t.format());
  if (spec == nullptr || !spec->options_of) return {};
  return spec->options_of(t);
}

TracedTensor described(const Tensor& value) {
  TracedTensor t;
  t.shape = value.shape();
  t.dtype = value.dtype();
  t.format = std::string(value.format());
  t.options = options_of(value);
  t.value = value;
  return t;
}

// Records every output the graph makes, keyed by (node, slot), with the
// module scope open when it was made.
class Recorder final : public GraphObserver, public DispatchObserver {
 public:
  Recorder(StepTrace& trace, std::map<const void*, std::string> module_names)
      : trace_(trace), module_names_(std::move(module_names)) {}

  // A leaf (the input, a parameter): its accumulator edge keys it.
  void add_leaf(const Variable& v, TracedTensor::Kind kind, std::string name) {
    TracedTensor t = described(v.value());
    t.kind = kind;
    t.op = std::move(name);
    const Edge edge = v.gradient_edge();
    if (edge.valid()) {
      keep_.push_back(edge.node);  // the accumulator lives while the graph does; the graph is not made yet
      ids_[{edge.node.get(), edge.slot}] = add(std::move(t));
    } else {
      add(std::move(t));
    }
  }

  void on_output(const std::shared_ptr<Node>& node, uint32_t slot, const Tensor& value) override {
    TracedTensor t = described(value);
    t.kind = TracedTensor::Kind::kOp;
    t.op = op_name(node->name());
    t.slot = slot;
    t.module = scopes_.empty() ? std::string() : scopes_.back();
    t.kernels = std::move(pending_kernels_);
    pending_kernels_.clear();
    for (const Edge& e : node->next_edges()) t.inputs.push_back(id_of(e));
    const int id = add(std::move(t));
    for (size_t i = 0; i < trace_.tensors[static_cast<size_t>(id)].inputs.size(); ++i) {
      const int in = trace_.tensors[static_cast<size_t>(id)].inputs[i];
      if (in != kUntraced) trace_.tensors[static_cast<size_t>(in)].consumers.emplace_back(id, static_cast<int>(i));
    }
    ids_[{node.get(), slot}] = id;
    keep_.push_back(node);
  }

  void on_kernel(const std::string& cell) override { pending_kernels_.push_back(cell); }

  void on_scope_begin(const void* owner) override { scopes_.push_back(name_of(owner)); }

  void on_scope_end(const void* owner, const Edge& result) override {
    COPPICE_CHECK(!scopes_.empty(), "trace_forward: a module's scope closed that was not open");
    scopes_.pop_back();
    const int id = id_of(result);
    const std::string name = name_of(owner);
    if (id != kUntraced && !name.empty()) trace_.tensors[static_cast<size_t>(id)].returned_by.push_back(name);
  }

  int id_of(const Edge& e) const {
    if (!e.valid()) return kUntraced;
    auto it = ids_.find({e.node.get(), e.slot});
    return it == ids_.end() ? kUntraced : it->second;
  }

 private:
  int add(TracedTensor t) {
    t.id = static_cast<int>(trace_.tensors.size());
    trace_.tensors.push_back(std::move(t));
    return trace_.tensors.back().id;
  }
  std::string name_of(const void* owner) const {
    auto it = module_names_.find(owner);
    return it == module_names_.end() ? std::string() : it->second;
  }

  StepTrace& trace_;
  std::map<const void*, std::string> module_names_;
  std::map<std::pair<const Node*, uint32_t>, int> ids_;
  std::vector<std::shared_ptr<Node>> keep_;  // so that no node's address is reused while tracing
  std::vector<std::string> scopes_;
  std::vector<std::string> pending_kernels_;  // dispatched since the last recorded output
};

// Restores a module's training mode.
class EvalModeFor {
 public:
  explicit EvalModeFor(Module& m) : module_(m), was_training_(m.is_training()) { m.eval(); }
  ~EvalModeFor() { module_.train(was_training_); }
  EvalModeFor(const EvalModeFor&) = delete;
  EvalModeFor& operator=(const EvalModeFor&) = delete;

 private:
  Module& module_;
  bool was_training_;
};

class GradModeOn {
 public:
  GradModeOn() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~GradModeOn() { GradMode::set_enabled(previous_); }
  GradModeOn(const GradModeOn&) = delete;
  GradModeOn& operator=(const GradModeOn&) = delete;

 private:
  bool previous_;
};

}  // namespace

StepTrace trace_forward(Module& model, const Variable& input) {
  std::map<const void*, std::string> module_names;
  for (const auto& [name, m] : model.named_modules()) module_names[m] = name;

  StepTrace trace;
  Recorder recorder(trace, std::move(module_names));
  recorder.add_leaf(input, TracedTensor::Kind::kInput, "input");
  for (const auto& [name, p] : model.named_parameters()) recorder.add_leaf(p, TracedTensor::Kind::kParameter, name);

  const EvalModeFor eval(model);
  const GradModeOn grad;
  Variable out;
  {
    const ScopedGraphObserver observe(&recorder);
    const ScopedDispatchObserver observe_kernels(&recorder);
    out = model.forward(input);
  }
  trace.output = recorder.id_of(out.gradient_edge());
  return trace;
}

}  // namespace coppice::propagation

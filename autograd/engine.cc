#include "autograd/engine.h"

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>

#include "autograd/gradient_destination.h"
#include "autograd/no_grad.h"
#include "autograd/sparse_grad.h"
#include "tensor/backend.h"
#include "tensor/op_profile.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// Node::apply, timed under COPPICE_PROFILE (tensor/op_profile.h) as
// "backward <node>" between two synchronizations of the gradients' device.
std::vector<Tensor> timed_apply(Node& n, std::vector<Tensor> grad_outputs) {
  if (!op_profile_enabled()) return n.apply(std::move(grad_outputs));
  Device device = Device::cpu();
  for (const Tensor& g : grad_outputs) {
    if (g.defined()) device = g.device();
  }
  ProfileScope scope("backward " + n.name(), device);
  return n.apply(std::move(grad_outputs));
}

struct NodeState {
  std::shared_ptr<Node> node;
  int64_t dependencies = 0;    // edges from nodes still to run
  std::vector<Tensor> buffer;  // summed gradient per output
};

std::string describe(const Variable& v) {
  return v.name().empty() ? std::string("the variable") : str_cat("'", v.name(), "'");
}

void accumulate(std::vector<Tensor>& buffer, uint32_t slot, Tensor grad) {
  Tensor& b = buffer[slot];
  if (!b.defined()) {
    b = std::move(grad);
  } else {
    b = accumulate_grads(b, grad, "backward");
  }
}

Tensor seed_for(const Variable& root, const Tensor& grad) {
  const Tensor& value = root.value();
  if (!grad.defined()) {
    COPPICE_CHECK(value.numel() == 1, "backward: ", describe(root), " has shape ", shape_to_string(value.shape()), " (",
                  value.numel(), " elements); backward() without a gradient needs a one-element value, so pass ",
                  "a gradient of shape ", shape_to_string(value.shape()));
    return ones(value.shape(), value.options());
  }
  COPPICE_CHECK(grad.shape() == value.shape(), "backward: the gradient has shape ", shape_to_string(grad.shape()),
                " but ", describe(root), " has shape ", shape_to_string(value.shape()));
  COPPICE_CHECK(grad.device() == value.device(), "backward: the gradient is on ", grad.device().to_string(), " but ",
                describe(root), " is on ", value.device().to_string());
  return grad_to_dtype(grad, value.dtype());
}

// By input of `n`: the destination of each input whose next node offers one
// (a leaf's accumulator) and gets its last gradient of the pass from `n`
// (no other edge to it still to run, nothing summed for it yet). Empty when
// there is none.
std::vector<Tensor> destinations_for(const Node& n, const std::unordered_map<Node*, NodeState>& states) {
  std::vector<Tensor> out;
  const std::vector<Edge>& edges = n.next_edges();
  for (size_t i = 0; i < edges.size(); ++i) {
    const Edge& e = edges[i];
    if (!e.valid()) continue;
    Tensor d = e.node->gradient_destination(e.slot);
    if (!d.defined()) continue;
    const NodeState& next = states.at(e.node.get());
    if (next.dependencies != 1 || next.buffer[e.slot].defined()) continue;
    out.resize(edges.size());
    out[i] = std::move(d);
  }
  return out;
}

// Joins, when the pass ends (or throws), the work a node left running beside
// the stream (run_beside: a sparse weight's gradient) on each device the
// pass made gradients on: what follows backward (an optimizer step) reads them.
class JoinBesideAtEnd {
 public:
  void note(const Tensor& g) {
    if (!g.defined() || g.device().is_cpu()) return;
    for (const Device& d : devices_) {
      if (d == g.device()) return;
    }
    devices_.push_back(g.device());
  }
  ~JoinBesideAtEnd() {
    for (const Device& d : devices_) {
      try {
        join_beside(d);
      } catch (...) {  // a destructor does not throw; the next synchronize reports the device's error
      }
    }
  }

 private:
  std::vector<Device> devices_;
};

// The gradients the running node marked with made_beside.
thread_local std::vector<const void*> made_beside_by_node;

bool is_made_beside(const Tensor& g, const std::vector<const void*>& marked) {
  for (const void* m : marked) {
    if (m == g.impl_ptr().get()) return true;
  }
  return false;
}

}  // namespace

void made_beside(const Tensor& grad) {
  if (grad.defined()) made_beside_by_node.push_back(grad.impl_ptr().get());
}

void made_beside_all(std::initializer_list<Tensor> grads) {
  for (const Tensor& g : grads) made_beside(g);
}

void run_backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  COPPICE_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ", grads.size(), " gradients");
  NoGradGuard no_grad;

  JoinBesideAtEnd join_at_end;
  std::unordered_map<Node*, NodeState> states;
  std::vector<Node*> stack;
  auto state_of = [&](const std::shared_ptr<Node>& node, bool* inserted) -> NodeState& {
    auto [it, fresh] = states.try_emplace(node.get());
    if (fresh) {
      it->second.node = node;
      it->second.buffer.resize(node->num_outputs());
    }
    if (inserted) *inserted = fresh;
    return it->second;
  };

  // Seed the roots.
  for (size_t i = 0; i < roots.size(); ++i) {
    const Variable& root = roots[i];
    COPPICE_CHECK(root.defined(), "backward: root ", i, " is an undefined Variable");
    COPPICE_CHECK(root.requires_grad(), "backward: ", describe(root), " does not require grad (no input of it ",
                  "requires grad, or it was computed under NoGradGuard)");
    Tensor seed = seed_for(root, grads[i]);
    Edge edge = root.gradient_edge();
    bool fresh = false;
    NodeState& s = state_of(edge.node, &fresh);
    if (fresh) stack.push_back(edge.node.get());
    accumulate(s.buffer, edge.slot, std::move(seed));
  }
  std::vector<Node*> root_nodes = stack;

  // Count, for every node reachable from the roots, the edges that lead to it.
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      bool fresh = false;
      NodeState& s = state_of(e.node, &fresh);
      ++s.dependencies;
      if (fresh) stack.push_back(e.node.get());
    }
  }

  std::vector<Node*> ready;
  for (Node* n : root_nodes) {
    if (states.at(n).dependencies == 0) ready.push_back(n);
  }

  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    NodeState& state = states.at(n);
    std::vector<Tensor> grad_outputs = std::move(state.buffer);

    bool any = false;
    for (const Tensor& g : grad_outputs) any = any || g.defined();
    std::vector<Tensor> grad_inputs;
    if (any) {
      COPPICE_CHECK(!n->released(), "backward: trying to go through the graph a second time: ", n->name(),
                    " already ran and freed its saved tensors; pass retain_graph=true to the first backward ",
                    "to run backward through this graph again");
      for (uint32_t slot = 0; slot < grad_outputs.size(); ++slot) {
        if (!grad_outputs[slot].defined()) continue;
        Shape before = grad_outputs[slot].shape();
        grad_outputs[slot] = n->run_pre_hooks(slot, std::move(grad_outputs[slot]));
        COPPICE_CHECK(grad_outputs[slot].shape() == before, "backward: a hook on the output of ", n->name(),
                      " returned a gradient of shape ", shape_to_string(grad_outputs[slot].shape()), " for shape ",
                      shape_to_string(before));
      }
      const std::vector<Tensor> destinations = destinations_for(*n, states);
      const GradientDestinationScope scope(destinations);
      made_beside_by_node.clear();
      grad_inputs = timed_apply(*n, std::move(grad_outputs));
      if (!retain_graph && n->single_use()) n->mark_released();
      COPPICE_CHECK(grad_inputs.size() == n->next_edges().size() || n->next_edges().empty(), "backward: ", n->name(),
                    " returned ", grad_inputs.size(), " gradients for ", n->next_edges().size(), " inputs");
    }

    const std::vector<Edge>& edges = n->next_edges();
    const std::vector<const void*> beside = std::move(made_beside_by_node);
    made_beside_by_node.clear();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      NodeState& next = states.at(e.node.get());
      if (any && grad_inputs[i].defined()) {
        Tensor g = std::move(grad_inputs[i]);
        join_at_end.note(g);
        const InputMeta& meta = n->input_meta()[i];
        // A gradient still in the making beside the stream goes on only to a
        // leaf's accumulator, as it is; anything else joins it first.
        const bool as_is = e.node->joins_beside_itself() && !next.buffer[e.slot].defined() && g.dtype() == meta.dtype;
        if (!as_is && is_made_beside(g, beside)) join_beside(g.device());
        COPPICE_CHECK(g.shape() == meta.shape, "backward: ", n->name(), " returned a gradient of shape ",
                      shape_to_string(g.shape()), " for its input ", i, " of shape ", shape_to_string(meta.shape));
        if (g.dtype() != meta.dtype) g = grad_to_dtype(g, meta.dtype);
        accumulate(next.buffer, e.slot, std::move(g));
      }
      if (--next.dependencies == 0) ready.push_back(e.node.get());
    }
  }
}

}  // namespace coppice

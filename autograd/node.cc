#include "autograd/node.h"

#include <algorithm>
#include <atomic>

namespace coppice {

HookId next_hook_id() {
  static std::atomic<HookId> next{1};
  return next.fetch_add(1);
}

Node::Node(std::string name, uint32_t num_outputs) : name_(std::move(name)), num_outputs_(num_outputs) {}

namespace {
// Nodes whose last handle was dropped while another release is running on
// this thread: the outer release frees them in a loop instead of recursing.
thread_local std::vector<std::shared_ptr<Node>>* pending_release = nullptr;
}  // namespace

Node::~Node() {
  if (pending_release != nullptr) {
    for (Edge& e : next_edges_) {
      if (e.node) pending_release->push_back(std::move(e.node));
    }
    return;
  }
  std::vector<std::shared_ptr<Node>> stack;
  for (Edge& e : next_edges_) {
    if (e.node) stack.push_back(std::move(e.node));
  }
  pending_release = &stack;
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    n.reset();  // may push its own inputs onto `stack`
  }
  pending_release = nullptr;
}

void Node::add_input(Edge edge, InputMeta meta) {
  next_edges_.push_back(std::move(edge));
  input_meta_.push_back(std::move(meta));
}

HookId Node::add_pre_hook(uint32_t slot, GradHook hook) {
  COPPICE_CHECK(slot < num_outputs_, "register_hook: output ", slot, " of ", name_, " does not exist");
  HookId id = next_hook_id();
  pre_hooks_.push_back({id, slot, std::move(hook)});
  return id;
}

bool Node::remove_pre_hook(HookId id) {
  auto it = std::find_if(pre_hooks_.begin(), pre_hooks_.end(), [id](const PreHook& h) { return h.id == id; });
  if (it == pre_hooks_.end()) return false;
  pre_hooks_.erase(it);
  return true;
}

Tensor Node::run_pre_hooks(uint32_t slot, Tensor grad) const {
  for (const PreHook& h : pre_hooks_) {
    if (h.slot != slot) continue;
    Tensor replaced = h.fn(grad);
    if (replaced.defined()) grad = std::move(replaced);
  }
  return grad;
}

void FunctionNode::finalize_needs() {
  needs_.resize(next_edges().size());
  for (size_t i = 0; i < needs_.size(); ++i) needs_[i] = needs_input_grad(i);
}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor> grad_outputs) {
  COPPICE_CHECK(backward_ != nullptr, "backward: ", name(), " has no backward function (its saved tensors were freed)");
  return backward_(grad_outputs[0], needs_);
}

}  // namespace coppice

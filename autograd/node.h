// Graph nodes: what the backward engine runs.
//
// A node stands for one application of a differentiable function. It has one
// edge per input, pointing at the node that produced that input (or at a
// leaf's gradient accumulator); a null edge means the input needs no gradient. Nodes hold tensors saved for the
// backward pass, never Variables, so a graph has no cycles; it lives as long
// as some Variable (or a later node) holds its last node.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

class Node;

// Where a gradient goes: output `slot` of `node` (the gradient of the
// variable that `node` produced as its output number `slot`).
struct Edge {
  std::shared_ptr<Node> node;  // null: no gradient is needed
  uint32_t slot = 0;

  bool valid() const { return node != nullptr; }
};

// The shape and dtype the gradient for an input must have.
struct InputMeta {
  Shape shape;
  DType dtype = DType::kF32;
};

// A gradient hook: sees the gradient flowing into a variable and returns the
// one to use instead (an undefined Tensor keeps it unchanged).
using GradHook = std::function<Tensor(const Tensor&)>;
// A leaf's hook after accumulation: sees the leaf's gradient as it then stands.
using AccumulatedGradHook = std::function<void(const Tensor&)>;
using HookId = uint64_t;
HookId next_hook_id();

class Node {
 public:
  explicit Node(std::string name, uint32_t num_outputs = 1);
  // Releases a long chain of nodes iteratively, so that dropping the last
  // handle on a 100,000-op graph does not overflow the stack.
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& name() const { return name_; }
  uint32_t num_outputs() const { return num_outputs_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  const std::vector<InputMeta>& input_meta() const { return input_meta_; }
  bool needs_input_grad(size_t input) const { return next_edges_[input].valid(); }

  // Appends an input (while the node is being built).
  void add_input(Edge edge, InputMeta meta);

  // Gradients for each input (undefined where none flows or none is needed),
  // given the gradient for each output (undefined where none arrived).
  virtual std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) = 0;
  // Frees what apply needs. Nodes that save nothing need not override it.
  virtual void release_saved() {}
  // False for nodes that may run in any number of backward passes without
  // retain_graph (leaf accumulators).
  virtual bool single_use() const { return true; }
  // Where the gradient for output `slot` may be written by the node that
  // sends it (gradient_destination.h): a leaf accumulator's destination,
  // undefined for every other node.
  virtual Tensor gradient_destination(uint32_t /*slot*/) const { return Tensor(); }
  // True for a leaf accumulator, which joins a gradient still in the making
  // beside the stream (made_beside) itself, before it reads it on the device.
  virtual bool joins_beside_itself() const { return false; }

  // Hooks on the gradient of output `slot`, run by the engine on the total
  // gradient before apply (Variable::register_hook on a non-leaf).
  HookId add_pre_hook(uint32_t slot, GradHook hook);
  bool remove_pre_hook(HookId id);
  Tensor run_pre_hooks(uint32_t slot, Tensor grad) const;

  // Set by the engine once the node ran in a backward pass without retain_graph.
  bool released() const { return released_; }
  void mark_released() {
    release_saved();
    released_ = true;
  }

 private:
  struct PreHook {
    HookId id;
    uint32_t slot;
    GradHook fn;
  };

  std::string name_;
  uint32_t num_outputs_;
  std::vector<Edge> next_edges_;
  std::vector<InputMeta> input_meta_;
  std::vector<PreHook> pre_hooks_;
  bool released_ = false;
};

// Which inputs of a node need a gradient (backward functions skip the rest).
using GradNeeds = std::vector<bool>;
// The backward of a one-output function: the gradient of each input.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad, const GradNeeds& needs)>;

// A node whose backward is a closure; the closure holds the saved tensors
// and is dropped by release_saved.
class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, BackwardFn backward) : Node(std::move(name), 1), backward_(std::move(backward)) {}

  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override;
  void release_saved() override { backward_ = nullptr; }

  // Filled in by the recorder once all inputs are added.
  void finalize_needs();

 private:
  BackwardFn backward_;
  GradNeeds needs_;
};

}  // namespace coppice

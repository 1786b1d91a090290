// Variable: a tensor value plus what reverse-mode autograd needs.
//
// A Variable is a cheap shared handle (copies share value, grad and graph).
// Leaves are made by the user; results of differentiable functions
// (autograd/functions/) point at the node that produced them. backward()
// runs the engine (autograd/engine.h) and accumulates gradients into every
// leaf that requires grad. Variables are never made implicitly from Tensors:
// wrap constants with Variable(t).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "autograd/node.h"
#include "tensor/tensor.h"

namespace coppice {

struct VariableImpl;

class Variable {
 public:
  Variable() = default;  // undefined
  // A leaf. requires_grad needs a floating-point value.
  explicit Variable(Tensor value, bool requires_grad = false, std::string name = {});

  // The result of a differentiable function: output `output_nr` of `grad_fn`.
  static Variable from_node(Tensor value, std::shared_ptr<Node> grad_fn, uint32_t output_nr = 0);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const;
  // Accumulated over backward passes; undefined until one reaches this leaf.
  const Tensor& grad() const;
  void set_grad(Tensor grad) const;  // an undefined Tensor clears it
  // Replaces a defined grad with zeros of its shape (a new tensor; tensors
  // handed out by grad() earlier are left alone).
  void zero_grad() const;

  // Leaves only: gives this variable a new value in place, keeping its
  // identity, so every handle to it (a model's parameter slot, an optimizer's
  // group, a user's) sees the new value. What a mask update does to a sparse
  // weight (a new pattern, optim/optimizer.h's set_value). The value must have
  // the old one's shape, dtype and device (its format and pattern may
  // differ). The gradient is cleared (it belonged to the old value); the
  // name, requires_grad and hooks are kept. A graph recorded before the call
  // cannot backward into this variable any more: its backward throws naming
  // the variable (run the forward pass again).
  void set_value(Tensor value) const;

  const std::shared_ptr<Node>& grad_fn() const;  // null for leaves
  uint32_t output_nr() const;
  bool requires_grad() const;
  // Leaves only; true needs a floating-point value.
  void set_requires_grad(bool requires_grad) const;
  bool is_leaf() const { return grad_fn() == nullptr; }
  const std::string& name() const;
  void set_name(std::string name) const;

  // Seeds the backward pass with `grad` (value's shape; default: ones for a
  // one-element value) and runs it. Without retain_graph the graph's saved
  // tensors are freed and a second backward through it throws.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  // A new leaf sharing this value, cut off from the graph.
  Variable detach() const;

  // Runs `hook` on the gradient flowing into this variable (the total over
  // its uses, in one backward pass), before it is accumulated (leaves) or
  // propagated (non-leaves); the hook may return a replacement.
  HookId register_hook(GradHook hook) const;
  // Leaves only: runs `hook` on grad() once a backward pass has accumulated
  // this variable's gradient (once a pass that reaches it). For code that
  // reads gradients as they are made, such as a data-parallel exchange:
  // a hook of register_hook that kept the gradient would make the
  // accumulator store a copy (grad() never aliases a tensor held elsewhere).
  HookId register_post_accumulate_hook(AccumulatedGradHook hook) const;
  // Removes a hook of either kind.
  bool remove_hook(HookId id) const;

  // Leaves with a dense value only: where a backward pass may write this
  // variable's next gradient (gradient_destination.h), so that it lands
  // there without a copy: a data-parallel exchange's bucket. Contiguous, of
  // the value's shape, dtype and device. Offered while the variable has no
  // gradient, to ops that can write in place (a dense linear's weight
  // gradient); a gradient written there is stored as the destination itself,
  // any other as usual. Undefined clears it; set_value clears it too.
  void set_grad_destination(Tensor destination) const;
  const Tensor& grad_destination() const;

  // Shortcuts to the value.
  const Shape& shape() const { return value().shape(); }
  int64_t dim() const { return value().dim(); }
  int64_t size(int64_t d) const { return value().size(d); }
  int64_t numel() const { return value().numel(); }
  DType dtype() const { return value().dtype(); }
  Device device() const { return value().device(); }
  double item() const { return value().item(); }

  // True when both handles share one variable.
  bool is_same(const Variable& other) const { return impl_ == other.impl_; }
  // The same address for every handle of one variable while it lives (the
  // Python module keys its wrappers by it); null when undefined.
  const void* identity() const { return impl_.get(); }

  // Where this variable's gradient goes in the graph (a null edge when it
  // does not require grad). Creates a leaf's accumulator on first use.
  Edge gradient_edge() const;

 private:
  VariableImpl* checked() const;
  std::shared_ptr<VariableImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Variable& v);

// A differentiable value with the integer indices it was picked from (max, topk).
struct VariableIndices {
  Variable values;
  Tensor indices;  // i64
};

}  // namespace coppice

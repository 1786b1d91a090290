// Module: the base of every layer and model (docs/architecture.md, layer 6).
//
// A module owns named parameters (Variables, any format) and buffers (plain
// Tensors, e.g. BatchNorm's running statistics), and registered submodules.
// Names are dotted paths from the module they are asked of: "fc1.weight",
// "blocks.0.attn.qkv.weight". Registration order is the order of
// named_parameters(), named_buffers() and state_dict().
//
// Parameters live in slots owned by the module; a layer keeps a pointer to
// its slot, so replacing a parameter (set_parameter, load_state_dict,
// apply_sparsity, to) is seen by the next forward. Replacing makes a new
// leaf Variable: an optimizer must take parameters() again afterwards (a
// dense-into-dense load copies in place and keeps the Variable).
//
// Views: a parameter may be seen by forward through a view (set_parameter_view)
// while it stays what it is for everyone else: optimizers step it,
// state_dict and checkpoints hold it, set_parameter replaces it. SR-STE
// (optim/sr_ste.h) trains a dense weight that forward sees as its n:m
// projection this way. A layer reads a viewable parameter through view_of();
// only the weights of Linear and Conv2d are viewable (a view elsewhere would
// be ignored by the layer that reads the parameter, so it is refused).
//
// Sparsity: apply_sparsity(schedule) runs sparsifiers' apply_schedule over
// named_parameters() and the names of all submodules, puts the sparsified
// values in place, and attaches to every submodule the output rule selected
// by its full name. A layer's forward runs its op through run_op(), which
// wraps the op in the rule's SparsifiedOp (forward-output and input-gradient
// sparsifiers) when one is attached, and calls it directly otherwise.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "sparsifiers/apply_schedule.h"
#include "sparsifiers/schedule.h"
#include "sparsifiers/sparsified_op.h"
#include "tensor/io/safetensors.h"
#include "tensor/tensor.h"

namespace coppice {

// What forward sees of a parameter, given the parameter (see the top of the file).
using ParameterView = std::function<Variable(const Variable& param)>;

class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The forward pass. Modules whose input is not a float tensor (Embedding,
  // the character LM) take their integer indices as a constant Variable.
  virtual Variable forward(const Variable& x) = 0;
  Variable operator()(const Variable& x) { return forward(x); }

  // "Linear", "Sequential", ...
  const std::string& type_name() const { return type_name_; }

  // ---- parameters, buffers, submodules (recursive, dotted names) ----
  NamedParameters named_parameters() const;
  std::vector<Variable> parameters() const;
  NamedTensors named_buffers() const;
  // Every submodule, depth first, with its dotted name (this module excluded).
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  // The direct children, in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

  // The parameter named `name` (dotted, recursive); throws listing the known
  // names when there is none.
  const Variable& parameter(const std::string& name) const;
  // Replaces parameter `name` by `value` (any format; the logical shape must
  // match). The new value is used as given (its requires_grad included).
  void set_parameter(const std::string& name, Variable value);
  // Sets the view of parameter `name` (an empty one removes it); throws
  // naming the parameter when its layer does not read it through a view.
  void set_parameter_view(const std::string& name, ParameterView view);
  // Whether parameter `name` exists and its layer reads it through a view.
  bool accepts_view(const std::string& name) const;
  // Parameter `name` as forward sees it: its view applied, or the parameter.
  Variable viewed_parameter(const std::string& name) const;
  const Tensor& buffer(const std::string& name) const;
  void set_buffer(const std::string& name, Tensor value);
  // The submodule at dotted path `name`; throws when there is none.
  Module& submodule(const std::string& name);

  // ---- modes ----
  // Sets training mode here and in every submodule.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // ---- state ----
  // Every parameter's value and every buffer, by dotted name (handles, not
  // copies; any format).
  NamedTensors state_dict() const;
  // Loads tensors of any format. With `strict`, the names must be exactly
  // this module's (missing and unexpected names are listed in the error);
  // without it, unknown names are ignored and missing ones kept. Shapes must
  // always match. Values are converted to the parameter's dtype and device
  // and never alias `state`'s: a dense value loaded into a dense parameter is
  // copied in place, anything else replaces the parameter by a new leaf with
  // its own values, in the loaded format (requires_grad kept). Checks every
  // name and shape before changing anything (check_state_dict).
  void load_state_dict(const NamedTensors& state, bool strict = true);
  // The checks load_state_dict makes before it changes anything: throws
  // coppice::Error naming duplicate, missing or unexpected names and
  // undefined or misshapen tensors.
  void check_state_dict(const NamedTensors& state, bool strict = true) const;
  // Moves every parameter (new leaves, requires_grad kept) and buffer.
  void to(Device device);
  // Sets every parameter's gradient to undefined.
  void zero_grad();
  // Parameters' stored entries (nnz for sparse ones).
  int64_t num_parameters() const;

  // ---- sparsity ----
  // Applies `schedule` to this module (parameter names and module names
  // relative to it) and attaches the output rules; returns the applied
  // schedule, also kept here. Throws (before changing anything) on a bad
  // schedule, as apply_schedule does.
  const AppliedSchedule& apply_sparsity(const SparsitySchedule& schedule, const SparsifyContext& ctx = {});
  // The schedule last applied here (null when none).
  const AppliedSchedule* applied_schedule() const { return applied_.get(); }
  // The output rule attached to this module (null when none).
  const OutputSparsity* output_rule() const { return output_rule_; }
  // The step random output sparsifiers draw with (set recursively).
  void set_sparsity_step(uint64_t step);

  // ---- auxiliary losses ----
  // The losses the last forward of this module and its submodules added to
  // the training objective (a mixture of experts' load balancing: 0-D
  // Variables, depth first), which the training loop adds to the loss it
  // differentiates; empty for most models.
  std::vector<Variable> auxiliary_losses() const;

 protected:
  // Registration (names: non-empty, no '.', unique within this module).
  // `viewable`: forward reads the parameter through view_of() only.
  Variable* register_parameter(const std::string& name, Variable value, bool viewable = false);
  Tensor* register_buffer(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // Runs `op` on `inputs` (the op's inputs in the order the output rule's
  // backward stages refer to, e.g. linear: x, weight, bias) through the
  // attached output rule's SparsifiedOp, or directly when none is attached.
  Variable run_op(const std::vector<Variable>& inputs, const SingleOpFn& op) const;

  // This module's auxiliary loss for the forward it is in (replacing the
  // last one's); undefined: none.
  void set_auxiliary_loss(Variable loss) { auxiliary_loss_ = std::move(loss); }

  // The parameter whose slot register_parameter returned, as forward sees it:
  // its view applied, or the parameter itself when it has none.
  Variable view_of(const Variable* slot) const;

 private:
  struct ParameterSlot {
    std::string name;
    Variable value;
    bool viewable = false;
    ParameterView view;
  };
  struct BufferSlot {
    std::string name;
    Tensor value;
  };
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name) const;
  // The owner of dotted `name` and the last component; null when a path
  // component is not a submodule.
  std::pair<Module*, std::string> resolve(const std::string& name);
  std::pair<const Module*, std::string> resolve(const std::string& name) const;
  ParameterSlot* find_parameter(const std::string& local);
  BufferSlot* find_buffer(const std::string& local);
  std::string known_parameter_names() const;

  std::string type_name_;
  bool training_ = true;
  std::deque<ParameterSlot> parameters_;  // deque: slots never move
  std::deque<BufferSlot> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;

  std::shared_ptr<AppliedSchedule> applied_;
  const OutputSparsity* output_rule_ = nullptr;  // points into an AppliedSchedule kept alive by keep_alive_
  std::shared_ptr<AppliedSchedule> keep_alive_;
  SparsifyContext sparsity_ctx_;
  Variable auxiliary_loss_;
};

using ModulePtr = std::shared_ptr<Module>;

}  // namespace coppice

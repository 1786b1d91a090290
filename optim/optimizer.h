// Optimizer: the base of SGD, Adam and AdamW over parameter groups of
// Variables in any format (docs/architecture.md, Compact training state).
//
// A parameter group is a list of Variables plus hyperparameters that override
// the optimizer's defaults (torch.optim's param_groups). step() updates every
// parameter that has a gradient, in place: the new values are written into
// values(param.value()), whose storage the sparse impl shares, so the
// Variable and every handle to its value see them.
//
// Sparse parameters (CSR, CSC, COO, BSR, n:m, Blocked-ELL, masked, or any
// format with values()): the gradient must be in the parameter's format and
// pattern (the same pattern_version), and every state tensor (momentum
// buffer, exp_avg, exp_avg_sq) is a dense tensor shaped like
// values(param): nnz-sized and aligned with the pattern. A gradient of
// another pattern, format, dtype or device throws naming the parameter.
// Masked parameters: values() is dense-sized, so their state is too; the
// update touches only mask-true positions (elsewhere parameter and state keep
// what they hold). Blocked-ELL padding slots are updated like stored ones,
// from whatever the gradient holds there (every reader ignores padding).
// State tensors have the parameter's dtype and device, except for bf16 and
// f16 parameters (mixed precision): their state is f32, and the optimizer
// keeps f32 master weights as the state "master" (shaped like values(param),
// so remap_state keeps it aligned through mask changes and state_io saves
// it). A step reads the 16-bit gradient as f32, updates the master and the
// other state in f32 and writes the master, rounded to nearest, into
// values(param). Without the master a small lr * grad would round away
// against a 16-bit weight and training would stall.
//
// On a device with multi-tensor kernels (optim/multi_tensor.h: CUDA), the
// parameters whose values, gradient and state are contiguous f32 arrays (or
// 16-bit ones with f32 master weights) are not stepped one kernel each:
// step() queues them and steps them together after the loop, a launch per
// group, dtype and step count (or a few, in chunks), with the same bits.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "optim/finite_check.h"
#include "optim/multi_tensor.h"
#include "optim/param_group.h"
#include "tensor/tensor.h"

namespace coppice {

// The state of a 16-bit parameter that holds its f32 master weights.
inline constexpr const char* kMasterWeightsState = "master";

// True for the dtypes whose parameters get f32 master weights (bf16, f16).
bool uses_master_weights(DType param_dtype);
// The dtype of an optimizer's state tensors for a parameter of `param_dtype`
// (f32 for bf16/f16, the parameter's own otherwise).
DType optimizer_state_dtype(DType param_dtype);

// What an optimizer keeps for one parameter.
struct ParamState {
  // Steps taken on this parameter (torch's state["step"]; Adam's bias
  // correction uses it). Kept by remap_state.
  int64_t step = 0;
  // The pattern version the state tensors are aligned with (0: dense).
  uint64_t pattern_version = 0;
  // By name ("momentum_buffer", "exp_avg", "exp_avg_sq", and "master" for
  // bf16/f16 parameters); each shaped like values(param), on its device, of
  // optimizer_state_dtype(its dtype).
  std::map<std::string, Tensor> tensors;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "sgd", "adam", "adamw".
  const std::string& name() const { return name_; }
  const Hyperparameters& defaults() const { return defaults_; }

  // One update of every parameter whose grad is defined. grad_scale is the
  // factor the gradients carry (a LossScaler's scale; see
  // optim/loss_scaler.h): each gradient is divided by it as it is read (in
  // f32 for 16-bit parameters, so a scaled f16 gradient is unscaled without
  // underflowing); it must be finite and > 0.
  //
  // nonfinite: null, or flags with one slot per parameter in the order of
  // param_groups() (group by group; optimizer_parameters' order,
  // optim/loss_scaler.h): every gradient the step reads is checked for
  // inf/NaN into its parameter's slot (a parameter without a gradient
  // leaves its slot alone). A parameter that a fused kernel steps
  // (optim/sgd_step.h, optim/adam_step.h) is tested by that kernel on the
  // elements it reads anyway, at no pass and no launch of its own (the
  // gradient divided by grad_scale when that is not 1: an overflow there
  // counts); any other (the tensor-op path: masked values, non-contiguous
  // ones, flags on another device) is folded with NonfiniteFlag::add after
  // its update. Nothing is read to the host.
  //
  // grad_factor: undefined, or the clip factor as an f32 tensor of one
  // element (clip_grad_norm_on_device, optim/clip.h), read on the device:
  // every gradient is multiplied by it as it is read (after the division by
  // grad_scale; one rounding, so an f32 step is the bits of clip_grad_norm
  // then step()), and where it is not finite (the gradients' norm was not)
  // no parameter and no state tensor changes. The fused kernels and the
  // multi-tensor launch read it on the device; a parameter on the tensor-op
  // path (masked, non-contiguous) has it read to the host once a step, the
  // one host read such a step makes. A skipped step still counts in the
  // host's bookkeeping (ParamState::step, a first momentum buffer allocated
  // but unwritten): it is for a caller that stops when the step was not
  // finite (the trainer under on_nonfinite: stop), not one that goes on.
  // A skipped step tests no gradient for `nonfinite`: the norm that made
  // the factor flags them (clip_grad_norm_on_device's `nonfinite`).
  void step(double grad_scale = 1.0, NonfiniteFlag* nonfinite = nullptr, const Tensor& grad_factor = Tensor());
  // Whether step() may step parameters together in multi-tensor launches
  // (on by default; off, each takes its own kernel: the same bits, for
  // parity tests and measurements).
  void set_multi_tensor(bool on) { multi_tensor_ = on; }
  bool multi_tensor() const { return multi_tensor_; }

  // Clears every gradient (set_to_none, as torch's default) or replaces it by
  // zeros of its pattern.
  void zero_grad(bool set_to_none = true);

  // Adds a group; its options override the defaults (unknown keys throw).
  // A parameter may appear in one group only.
  void add_param_group(ParamGroup group);
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // A group's value for `key` (the group's own or the default's).
  double option(size_t group, const std::string& key) const;
  // Sets a group's `key` (e.g. "lr" by a scheduler); the key must be known.
  void set_option(size_t group, const std::string& key, double value);

  // The state of `param`, or nullptr before its first step (or when it is not
  // one of this optimizer's parameters).
  const ParamState* state(const Variable& param) const;
  // The same, for loading (creates an empty state); throws for a foreign param.
  ParamState& mutable_state(const Variable& param);
  // Forgets the state of `param` (it starts afresh at its next step).
  void reset_state(const Variable& param);
  // The state tensors this optimizer keeps for a parameter with `options`
  // (e.g. no momentum buffer for SGD without momentum).
  virtual std::vector<std::string> state_names(const Hyperparameters& options) const = 0;

  // ---- after a mask change (for the mask updater) --------------------------
  //
  // remap_state(param, keep_from): rebuilds every state tensor of `param` for
  // its new pattern. keep_from is an i64 tensor (any device; 0-d taken as 1-D) with one entry
  // per element of values(new value) (= new nnz; for masked, the dense numel;
  // for Blocked-ELL, values' numel with padding): keep_from[j] is the slot of
  // the old values that new slot j continues, or -1 for a new entry. Survivors
  // keep their state bit for bit, new entries start at zero, old slots not
  // named are dropped; the master weights of a new entry start at its value
  // in the new parameter (zero or initialised; exact in f32). The step count
  // is kept (as RigL does). The state is then aligned with pattern_version(param.value()), so call it after the
  // parameter's value carries the new pattern. A parameter without state yet
  // is left alone. Throws for a foreign parameter, a keep_from that is not
  // i64 1-D of the right size, or an entry outside [-1, old slots).
  // The gradient of the old pattern is not touched: clear it (set_grad({}))
  // or give one of the new pattern before the next step().
  void remap_state(const Variable& param, const Tensor& keep_from);
  // A mask update's way: gives `param` (one of this optimizer's) the value
  // `new_value` in place (Variable::set_value: same shape, dtype and device;
  // the gradient cleared), so the Variable keeps its identity and the model,
  // this optimizer and every other holder see the new pattern, then remaps its
  // state through remap_state(param, keep_from). A foreign parameter, an
  // undefined value or a keep_from of the wrong size is refused before
  // anything changes.
  void set_value(const Variable& param, const Tensor& new_value, const Tensor& keep_from);
  // For a parameter that is replaced by another Variable (a model's
  // load_state_dict): replace_param swaps `old_param` for `new_param` in its
  // group (same place, same hyperparameters) and moves its state over through
  // remap_state(new_param, keep_from).
  void replace_param(const Variable& old_param, const Variable& new_param, const Tensor& keep_from);
  // Makes a new leaf holding `new_value` with old_param's name and
  // requires_grad (no gradient), replaces old_param with it, remaps its state
  // and returns it (hand it to the model in its place). Holders of old_param
  // keep the old value: set_value keeps the Variable instead.
  Variable replace_value(const Variable& old_param, const Tensor& new_value, const Tensor& keep_from);

 protected:
  Optimizer(std::string name, Hyperparameters defaults, std::vector<ParamGroup> groups);

  // Computes one step for one parameter. `p` and `g` are values(param) and
  // values(grad) (dense, same shape, dtype and device); `options` are the
  // group's, complete; state.step is already incremented. Returns the new
  // parameter values. When `in_place` is true the implementation may write
  // into `p` and the state tensors (returning `p`); otherwise it must leave
  // them untouched and put new tensors into `state`.
  virtual Tensor update(const Tensor& p, const Tensor& g, const Hyperparameters& options, ParamState& state,
                        bool in_place) = 0;
  // The same step for a 16-bit parameter in one pass, where an optimizer has
  // one: `master` (f32, state.tensors' master weights) and the state updated
  // in place from the 16-bit gradient g16 (not scaled), and the master
  // rounded into p16, bit for bit as update() on g16 in f32 followed by a
  // copy into p16. Returns false, touching nothing, to take that path.
  virtual bool update_mixed(const Tensor& master, const Tensor& g16, const Tensor& p16, const Hyperparameters& options,
                            ParamState& state);
  // Throws naming the group when `options` are inconsistent (e.g. Nesterov
  // without momentum). Called for every group added and every set_option.
  virtual void validate(const Hyperparameters& options, size_t group) const;

  // For update() and update_mixed(), during a step(grad_scale, nonfinite):
  // the parameter's flag, an f32 0-d tensor on its device, to hand to a
  // fused kernel as its non-finite flag (undefined when the step checks
  // nothing or the flags live on another device). An implementation whose
  // fused kernel took it calls gradient_checked(); otherwise step() folds
  // the gradient into the flag itself.
  const Tensor& nonfinite_slot() const { return nonfinite_slot_; }
  void gradient_checked() { gradient_checked_ = true; }

  // For update() and update_mixed(), during a step with a grad_factor: the
  // factor on `device` (undefined without one), to hand to a fused kernel.
  Tensor grad_factor_on(Device device);
  // For the tensor-op path of update(): the factor read to the host (once a
  // step), or nullopt without one. Not finite: return the parameter and
  // touch no state.
  std::optional<float> host_grad_factor();

  // A parameter a multi-tensor step may take (optim/multi_tensor.h), during
  // step(): its group, its f32 values (or master weights) and gradient
  // (contiguous, f32 or the 16-bit parameter's dtype, on one device with
  // kernels for it), its 16-bit values (or undefined) and its flag (or null).
  struct MultiCandidate {
    size_t group = 0;
    Tensor param;
    Tensor grad;
    Tensor param16;
    float* flag = nullptr;
  };
  // Queues the step of `c` (state.step already incremented) into `queue`,
  // making the state it needs; returns false, touching nothing, to step it
  // on its own instead. The default takes none.
  virtual bool queue_multi(const MultiCandidate& c, const Hyperparameters& options, ParamState& state,
                           MultiStepQueue& queue);
  // The factor's address for a multi-tensor launch on `device`, or null.
  const float* multi_factor(Device device);

 private:
  struct Slot {
    size_t group;
    size_t index;
  };
  Slot find(const Variable& param, const char* op) const;
  Hyperparameters complete(const Hyperparameters& overrides) const;
  void step_params(double grad_scale, NonfiniteFlag* nonfinite);
  // A dense parameter with a row-sparse gradient (sparse/row_sparse.h):
  // update() runs on the gathered rows of the parameter and of each state
  // tensor, which are written back in place (index_copy_: only those rows
  // are read or written); untouched rows and their state keep
  // their bits. Lazy state, torch.optim.SparseAdam's semantics: a row's
  // moments and momentum change only on the steps that touch it, Adam's
  // bias correction counts every step of the parameter, weight decay reaches
  // only the touched rows, and state first created on a step that touches
  // some rows starts at zero for the others unless init_state made it (so SGD's momentum buffer of a
  // row first touched later begins momentum * 0 + (1 - dampening) * g).
  // An optimizer whose state starts at something other than zero (Adagrad's
  // initial accumulator) creates it whole for `p` here, before step_rows
  // gathers rows of it; the default creates nothing.
  virtual void init_state(const Tensor& p, const Hyperparameters& options, ParamState& state) const;
  void step_rows(const Variable& param, const Hyperparameters& options, ParamState& state, double grad_scale);
  void step_param(const Variable& param, size_t group, const Hyperparameters& options, ParamState& state,
                  double grad_scale);
  bool try_queue_multi(const Tensor& value, const Tensor& p, const Tensor& g, const Tensor& target, size_t group,
                       const Hyperparameters& options, ParamState& state, double grad_scale);
  void launch_queued();

  std::string name_;
  Hyperparameters defaults_;
  std::vector<ParamGroup> groups_;
  std::vector<Hyperparameters> options_;        // complete, per group
  std::vector<std::vector<ParamState>> state_;  // parallel to groups_[g].params
  std::vector<std::vector<bool>> has_state_;
  Tensor nonfinite_slot_;  // the parameter's flag during step(); see nonfinite_slot()
  bool gradient_checked_ = false;
  // During step(): the clip factor (one copy per device it was asked on),
  // its host value once read, and the parameters queued for multi-tensor
  // launches.
  Tensor grad_factor_;
  std::map<std::pair<int, int>, Tensor> grad_factor_copies_;
  std::optional<float> host_factor_;
  MultiStepQueue multi_;
  bool multi_tensor_ = true;
};

// How a parameter is named in messages: "'name'" or "parameter i of group g".
std::string describe_param(const Variable& param, size_t group, size_t index);

}  // namespace coppice

#include "optim/sgd.h"

#include <cmath>
#include <optional>
#include <utility>

#include "optim/sgd_step.h"
#include "tensor/ops.h"

namespace coppice {

Hyperparameters SgdOptions::to_hyperparameters() const {
  return {{"lr", lr},
          {"momentum", momentum},
          {"dampening", dampening},
          {"weight_decay", weight_decay},
          {"nesterov", nesterov ? 1.0 : 0.0}};
}

Sgd::Sgd(std::vector<Variable> params, const SgdOptions& options)
    : Sgd(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

Sgd::Sgd(std::vector<ParamGroup> groups, const SgdOptions& defaults)
    : Optimizer("sgd", defaults.to_hyperparameters(), {}) {
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void Sgd::validate(const Hyperparameters& o, size_t group) const {
  Optimizer::validate(o, group);
  COPPICE_CHECK(o.at("momentum") >= 0.0, "sgd: group ", group, " has a negative momentum ", o.at("momentum"));
  COPPICE_CHECK(o.at("weight_decay") >= 0.0, "sgd: group ", group, " has a negative weight_decay ",
                o.at("weight_decay"));
  const double nesterov = o.at("nesterov");
  COPPICE_CHECK(nesterov == 0.0 || nesterov == 1.0, "sgd: group ", group, " has nesterov = ", nesterov, " (0 or 1)");
  COPPICE_CHECK(nesterov == 0.0 || (o.at("momentum") > 0.0 && o.at("dampening") == 0.0), "sgd: group ", group,
                ": Nesterov momentum requires a momentum and zero dampening");
}

std::vector<std::string> Sgd::state_names(const Hyperparameters& o) const {
  if (o.at("momentum") != 0.0) return {"momentum_buffer"};
  return {};
}

namespace {

// The fused step's arguments for `p` and its buffer: the state's, or (on
// the first step) a fresh uninitialised one that the step fills, not reads.
SgdStepArgs step_args(const Tensor& p, const Hyperparameters& o, const ParamState& state, Tensor* buf) {
  SgdStepArgs args;
  args.lr = o.at("lr");
  args.momentum = o.at("momentum");
  args.dampening = o.at("dampening");
  args.weight_decay = o.at("weight_decay");
  args.nesterov = o.at("nesterov") != 0.0;
  if (args.momentum != 0.0) {
    auto it = state.tensors.find("momentum_buffer");
    args.first = it == state.tensors.end();
    *buf = args.first ? empty(p.shape(), p.options()) : it->second;
  }
  return args;
}

}  // namespace

bool Sgd::queue_multi(const MultiCandidate& c, const Hyperparameters& o, ParamState& state, MultiStepQueue& queue) {
  Tensor buf;
  const SgdStepArgs args = step_args(c.param, o, state, &buf);
  const bool has_momentum = args.momentum != 0.0;
  if (has_momentum && (!buf.is_dense() || !buf.is_contiguous() || buf.dtype() != DType::kF32 ||
                       buf.device() != c.param.device() || buf.shape() != c.param.shape())) {
    return false;
  }
  MultiStep& batch = queue.batch(c.group, c.param.device(), c.grad.dtype(), args.first ? 1 : 0);
  batch.kind = MultiStepKind::kSgd;
  batch.sgd = args;
  batch.factor = multi_factor(c.param.device());
  MultiStepEntry e;
  e.param = c.param.data<float>();
  e.grad = c.grad.data_ptr();
  e.state1 = has_momentum ? buf.data<float>() : nullptr;
  e.param16 = c.param16.defined() ? c.param16.data_ptr() : nullptr;
  e.flag = c.flag;
  e.n = c.param.numel();
  batch.entries.push_back(e);
  if (args.first) state.tensors["momentum_buffer"] = buf;
  return true;
}

bool Sgd::update_mixed(const Tensor& master, const Tensor& g16, const Tensor& p16, const Hyperparameters& o,
                       ParamState& state) {
  Tensor buf;
  const SgdStepArgs args = step_args(master, o, state, &buf);
  if (!fused_sgd_step_mixed(master, g16, buf, p16, args, nonfinite_slot(), grad_factor_on(master.device()))) {
    return false;
  }
  if (nonfinite_slot().defined()) gradient_checked();
  if (args.first) state.tensors["momentum_buffer"] = buf;
  return true;
}

Tensor Sgd::update(const Tensor& p, const Tensor& grad, const Hyperparameters& o, ParamState& state, bool in_place) {
  const double lr = o.at("lr"), momentum = o.at("momentum"), dampening = o.at("dampening");
  const double weight_decay = o.at("weight_decay");
  auto it = state.tensors.find("momentum_buffer");

  if (in_place) {
    Tensor buf;
    const SgdStepArgs args = step_args(p, o, state, &buf);
    if (fused_sgd_step(p, grad, buf, args, nonfinite_slot(), grad_factor_on(p.device()))) {
      if (nonfinite_slot().defined()) gradient_checked();
      if (args.first) state.tensors["momentum_buffer"] = buf;
      return p;
    }
  }

  Tensor g = grad;
  // The clip factor, read to the host on this path (Optimizer::step).
  if (const std::optional<float> factor = host_grad_factor()) {
    if (!std::isfinite(*factor)) return p;
    g = mul(g, static_cast<double>(*factor));
  }
  if (weight_decay != 0.0) g = add(g, mul(p, weight_decay));
  if (momentum != 0.0) {
    Tensor buf;
    if (it == state.tensors.end()) {
      buf = g.contiguous().clone();
    } else {
      buf = add(mul(it->second, momentum), mul(g, 1.0 - dampening));
    }
    state.tensors["momentum_buffer"] = buf;
    g = o.at("nesterov") != 0.0 ? add(g, mul(buf, momentum)) : buf;
  }
  return sub(p, mul(g, lr));
}

}  // namespace coppice

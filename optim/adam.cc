#include "optim/adam.h"

#include <cmath>
#include <optional>
#include <utility>

#include "optim/adam_step.h"
#include "tensor/ops.h"

namespace coppice {

Hyperparameters AdamOptions::to_hyperparameters() const {
  return {{"lr", lr}, {"beta1", beta1}, {"beta2", beta2}, {"eps", eps}, {"weight_decay", weight_decay}};
}

Adam::Adam(std::vector<Variable> params, const AdamOptions& options)
    : Adam(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults)
    : Adam("adam", std::move(groups), defaults, /*decoupled=*/false) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, const AdamOptions& defaults, bool decoupled)
    : Optimizer(std::move(name), defaults.to_hyperparameters(), {}), decoupled_(decoupled) {
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

AdamW::AdamW(std::vector<Variable> params, const AdamWOptions& options)
    : AdamW(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& defaults)
    : Adam("adamw", std::move(groups), defaults, /*decoupled=*/true) {}

void Adam::validate(const Hyperparameters& o, size_t group) const {
  Optimizer::validate(o, group);
  const double beta1 = o.at("beta1"), beta2 = o.at("beta2");
  COPPICE_CHECK(beta1 >= 0.0 && beta1 < 1.0, name(), ": group ", group, " has beta1 = ", beta1, " (need [0, 1))");
  COPPICE_CHECK(beta2 >= 0.0 && beta2 < 1.0, name(), ": group ", group, " has beta2 = ", beta2, " (need [0, 1))");
  COPPICE_CHECK(o.at("eps") >= 0.0, name(), ": group ", group, " has a negative eps ", o.at("eps"));
  COPPICE_CHECK(o.at("weight_decay") >= 0.0, name(), ": group ", group, " has a negative weight_decay ",
                o.at("weight_decay"));
}

std::vector<std::string> Adam::state_names(const Hyperparameters&) const { return {"exp_avg", "exp_avg_sq"}; }

namespace {

AdamStepArgs step_args(const Hyperparameters& o, const ParamState& state, bool decoupled) {
  AdamStepArgs args;
  args.lr = o.at("lr");
  args.beta1 = o.at("beta1");
  args.beta2 = o.at("beta2");
  args.eps = o.at("eps");
  args.weight_decay = o.at("weight_decay");
  args.decoupled = decoupled;
  args.step = state.step;
  return args;
}

}  // namespace

bool Adam::queue_multi(const MultiCandidate& c, const Hyperparameters& o, ParamState& state, MultiStepQueue& queue) {
  Tensor& m = state.tensors["exp_avg"];
  Tensor& v = state.tensors["exp_avg_sq"];
  if (!m.defined()) m = zeros(c.param.shape(), c.param.options());
  if (!v.defined()) v = zeros(c.param.shape(), c.param.options());
  for (const Tensor* t : {&m, &v}) {
    if (!t->is_dense() || !t->is_contiguous() || t->dtype() != DType::kF32 || t->device() != c.param.device() ||
        t->shape() != c.param.shape()) {
      return false;  // the zeros made above are what update() would make
    }
  }
  MultiStep& batch = queue.batch(c.group, c.param.device(), c.grad.dtype(), state.step);
  batch.kind = MultiStepKind::kAdam;
  batch.adam = step_args(o, state, decoupled_);
  batch.factor = multi_factor(c.param.device());
  MultiStepEntry e;
  e.param = c.param.data<float>();
  e.grad = c.grad.data_ptr();
  e.state1 = m.data<float>();
  e.state2 = v.data<float>();
  e.param16 = c.param16.defined() ? c.param16.data_ptr() : nullptr;
  e.flag = c.flag;
  e.n = c.param.numel();
  batch.entries.push_back(e);
  return true;
}

Tensor Adam::update(const Tensor& p, const Tensor& grad, const Hyperparameters& o, ParamState& state, bool in_place) {
  const AdamStepArgs args = step_args(o, state, decoupled_);

  Tensor& m = state.tensors["exp_avg"];
  Tensor& v = state.tensors["exp_avg_sq"];
  if (!m.defined()) m = zeros(p.shape(), p.options());
  if (!v.defined()) v = zeros(p.shape(), p.options());

  if (in_place && fused_adam_step(p, grad, m, v, args, nonfinite_slot(), grad_factor_on(p.device()))) {
    if (nonfinite_slot().defined()) gradient_checked();
    return p;
  }

  const double bias_correction1 = 1.0 - std::pow(args.beta1, static_cast<double>(args.step));
  const double bias_correction2 = 1.0 - std::pow(args.beta2, static_cast<double>(args.step));
  const double step_size = args.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);

  Tensor param = p;
  Tensor g = grad;
  // The clip factor, read to the host on this path (Optimizer::step).
  if (const std::optional<float> factor = host_grad_factor()) {
    if (!std::isfinite(*factor)) return p;
    g = mul(g, static_cast<double>(*factor));
  }
  if (args.weight_decay != 0.0) {
    if (decoupled_) {
      param = mul(param, 1.0 - args.lr * args.weight_decay);
    } else {
      g = add(g, mul(param, args.weight_decay));
    }
  }
  // torch: exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2).
  m = add(m, mul(sub(g, m), 1.0 - args.beta1));
  v = add(mul(v, args.beta2), mul(mul(g, 1.0 - args.beta2), g));
  Tensor denom = add(div(sqrt(v), bias_correction2_sqrt), args.eps);
  return sub(param, mul(div(m, denom), step_size));
}

}  // namespace coppice

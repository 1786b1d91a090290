#include "optim/adagrad.h"

#include <cmath>
#include <optional>
#include <utility>

#include "tensor/ops.h"

namespace coppice {

Hyperparameters AdagradOptions::to_hyperparameters() const {
  return {{"lr", lr},
          {"lr_decay", lr_decay},
          {"weight_decay", weight_decay},
          {"initial_accumulator_value", initial_accumulator_value},
          {"eps", eps}};
}

Adagrad::Adagrad(std::vector<Variable> params, const AdagradOptions& options)
    : Adagrad(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& defaults)
    : Optimizer("adagrad", defaults.to_hyperparameters(), {}) {
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void Adagrad::validate(const Hyperparameters& o, size_t group) const {
  Optimizer::validate(o, group);
  for (const char* key : {"lr_decay", "weight_decay", "initial_accumulator_value"}) {
    COPPICE_CHECK(o.at(key) >= 0.0, "adagrad: group ", group, " has a negative ", key, " ", o.at(key));
  }
  COPPICE_CHECK(o.at("eps") > 0.0, "adagrad: group ", group, " has eps ", o.at("eps"), " (it must be > 0)");
}

std::vector<std::string> Adagrad::state_names(const Hyperparameters&) const { return {"sum"}; }

void Adagrad::init_state(const Tensor& p, const Hyperparameters& o, ParamState& state) const {
  Tensor& sum = state.tensors["sum"];
  if (!sum.defined()) sum = full(p.shape(), o.at("initial_accumulator_value"), p.options());
}

Tensor Adagrad::update(const Tensor& p, const Tensor& grad, const Hyperparameters& o, ParamState& state, bool) {
  Tensor g = grad;
  // The clip factor, read to the host on this path (Optimizer::step).
  if (const std::optional<float> factor = host_grad_factor()) {
    if (!std::isfinite(*factor)) return p;
    g = mul(g, static_cast<double>(*factor));
  }
  if (o.at("weight_decay") != 0.0) g = add(g, mul(p, o.at("weight_decay")));
  init_state(p, o, state);
  Tensor& sum = state.tensors["sum"];
  sum = add(sum, mul(g, g));
  const double clr = o.at("lr") / (1.0 + static_cast<double>(state.step - 1) * o.at("lr_decay"));
  return sub(p, mul(div(g, add(sqrt(sum), o.at("eps"))), clr));
}

}  // namespace coppice

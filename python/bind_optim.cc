// coppice.optim: the optimizers (SGD, Adam, AdamW over parameters of any
// format: optim/optimizer.h), gradient clipping, and MaskUpdater, which runs
// prune and regrow (optim/mask_updater.h) over a model and its optimizer one
// step at a time, as the trainer's loop does (train/trainer.cc), so that a
// Python script can train a sparse model with SET, RigL or SNFS itself.
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/dense_gradient_view.h"
#include "models/module.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/mask_schedule.h"
#include "optim/mask_updater.h"
#include "optim/sgd.h"
#include "python/bindings.h"
#include "tensor/error.h"
#include "train/model_parameters.h"

namespace coppice::python {
namespace {

// Parameters as a list of Variables (one group), or of dicts {"params": [...], "lr": ...} (one group each).
std::vector<ParamGroup> groups_of(const py::iterable& params, const char* op) {
  std::vector<ParamGroup> groups;
  ParamGroup plain;
  for (const py::handle& h : params) {
    if (py::isinstance<py::dict>(h)) {
      ParamGroup g;
      for (const auto& [key, value] : h.cast<py::dict>()) {
        const std::string k = key.cast<std::string>();
        if (k == "params") {
          COPPICE_CHECK(py::isinstance<py::iterable>(value) && !py::isinstance<py::str>(value), op,
                        ": a group's \"params\" must be a list of Variables, got ", type_name_of(value));
          for (const py::handle& p : value) {
            COPPICE_CHECK(py::isinstance<Variable>(p), op, ": a group's \"params\" must be Variables, got ",
                          type_name_of(p));
            g.params.push_back(p.cast<Variable>());
          }
        } else {
          COPPICE_CHECK(py::isinstance<py::float_>(value) || py::isinstance<py::int_>(value), op, ": group option '", k,
                        "' must be a number, got ", type_name_of(value));
          g.options[k] = value.cast<double>();
        }
      }
      groups.push_back(std::move(g));
    } else {
      COPPICE_CHECK(py::isinstance<Variable>(h), op,
                    ": parameters must be Variables (or dicts of parameter groups), got ",
                    py::str(py::type::of(h).attr("__name__")).cast<std::string>());
      plain.params.push_back(h.cast<Variable>());
    }
  }
  COPPICE_CHECK(groups.empty() || plain.params.empty(), op, ": give Variables or parameter groups, not both");
  if (groups.empty()) groups.push_back(std::move(plain));
  return groups;
}

// A step writes every parameter that has a gradient in place: none may be on
// read-only memory (a Variable over a read-only or memory-mapped array).
void check_parameters_writable(const Optimizer& o, const std::string& class_name) {
  for (size_t g = 0; g < o.param_groups().size(); ++g) {
    const std::vector<Variable>& params = o.param_groups()[g].params;
    for (size_t i = 0; i < params.size(); ++i) {
      const Variable& p = params[i];
      if (!p.defined() || !p.grad().defined()) continue;
      check_writable(p.value(),
                     str_cat("coppice.optim.", class_name, ".step: parameter ",
                             p.name().empty() ? "" : str_cat("'", p.name(), "' "), "(group ", g, ", index ", i, ")"));
    }
  }
}

// ---- prune and regrow, a step at a time -----------------------------------------------------

// The trainer's mask schedule over a Python model and optimizer: each step,
// begin_step(t) before the forward pass (on steps whose growth policy ranks
// the dense gradient, the sparse weights are swapped for dense leaves),
// after_backward() (the weights go back with their gradients projected onto
// their patterns; movement scores accumulate), the optimizer's step, then
// update(t), which prunes and regrows on update steps and rebinds the changed
// weights in the model and the optimizer (their state carried over).
class StepwiseMaskUpdater {
 public:
  StepwiseMaskUpdater(py::object model, py::object optimizer, MaskUpdaterConfig config, std::vector<std::string> layers)
      : model_object_(std::move(model)),
        optimizer_object_(std::move(optimizer)),
        model_(model_object_.cast<Module&>()),
        optimizer_(optimizer_object_.cast<Optimizer&>()) {
    if (layers.empty()) {
      for (const auto& [name, p] : model_.named_parameters()) {
        if (p.value().is_sparse()) layers.push_back(name);
      }
      COPPICE_CHECK(!layers.empty(),
                    "MaskUpdater: the model has no sparse parameter to update; make weights sparse "
                    "first (Module.apply_sparsity) or name the layers");
    }
    updater_ = std::make_unique<MaskUpdater>(std::move(config));
    for (const std::string& name : layers) updater_->add_layer(name, model_.parameter(name).value());
    schedule_ = make_prune_and_regrow_schedule(*updater_, std::make_shared<ModelParameters>(model_, optimizer_));
  }

  void begin_step(int64_t step) {
    if (view_.is_open()) view_.close(1.0);  // a step abandoned before after_backward (its forward raised)
    signals_.clear();
    step_ = step;
    if (schedule_->needs_dense_gradient(step)) view_.open(model_, schedule_->layers(), {}, /*probe_blocks=*/true);
  }

  void after_backward() {
    if (view_.is_open()) signals_ = view_.close(1.0);
    schedule_->before_optimizer_step(1.0);
  }

  std::optional<MaskUpdateStats> update(int64_t step) {
    if (!schedule_->changes_masks(step, /*optimizer_step_skipped=*/false)) return std::nullopt;
    COPPICE_CHECK(!schedule_->needs_dense_gradient(step) || (step_ == step && !signals_.empty()),
                  "MaskUpdater.update: step ", step, " ranks the dense gradient; call begin_step(", step,
                  ") before its forward pass and after_backward() after its backward pass");
    MaskUpdateStats stats = schedule_->update(step, signals_);
    signals_.clear();
    return stats;
  }

  const MaskUpdater& updater() const { return *updater_; }
  const MaskSchedule& schedule() const { return *schedule_; }

 private:
  // The Python objects keep the model (and a forward written in Python) and the optimizer alive.
  py::object model_object_, optimizer_object_;
  Module& model_;
  Optimizer& optimizer_;
  std::unique_ptr<MaskUpdater> updater_;
  std::unique_ptr<MaskSchedule> schedule_;  // refers to updater_: declared after it, destroyed first
  DenseGradientView view_;
  std::map<std::string, GrowthSignal> signals_;
  int64_t step_ = -1;
};

MaskUpdaterConfig updater_config(int64_t start_step, int64_t end_step, int64_t interval, double drop_fraction,
                                 const std::string& drop_schedule, const std::string& prune, const std::string& growth,
                                 bool allow_regrow_dropped, uint64_t seed) {
  MaskUpdaterConfig c;
  c.start_step = start_step;
  c.end_step = end_step;
  c.interval = interval;
  c.drop_fraction = drop_fraction;
  c.schedule = parse_drop_schedule(drop_schedule);
  c.growth = growth;
  c.allow_regrow_dropped = allow_regrow_dropped;
  c.seed = seed;
  if (prune == "magnitude" || prune == "movement") {
    c.prune = parse_prune_criterion(prune);
  } else {
    COPPICE_CHECK(python_prune_criterion(prune, &c.prune_score), "MaskUpdater: unknown prune criterion '", prune,
                  "'; known: magnitude, movement",
                  str_cat(python_prune_criteria().empty() ? "" : ", ", str_join(python_prune_criteria(), ", ")),
                  " (coppice.register_prune_criterion adds one)");
    c.prune = PruneCriterion::kCustom;
  }
  validate(c);
  return c;
}

py::dict stats_dict(const MaskUpdateStats& s) {
  py::dict d;
  d["step"] = s.step;
  d["dropped"] = s.dropped;
  d["grown"] = s.grown;
  d["itop_rate"] = s.itop_rate;
  return d;
}

void bind_optimizers(py::module_& optim) {
  py::class_<Optimizer, std::shared_ptr<Optimizer>>(optim, "Optimizer",
                                                    "The base of SGD, Adam and AdamW (optim/optimizer.h).")
      .def(
          "step",
          [](const py::object& self, double grad_scale) {
            Optimizer& o = self.cast<Optimizer&>();
            check_parameters_writable(o, type_name_of(self));
            py::gil_scoped_release release;
            o.step(grad_scale);
          },
          py::arg("grad_scale") = 1.0, "Updates every parameter that has a gradient, in place.")
      .def("zero_grad", &Optimizer::zero_grad, py::arg("set_to_none") = true)
      .def_property_readonly("name", &Optimizer::name)
      .def(
          "option", [](const Optimizer& o, const std::string& key, size_t group) { return o.option(group, key); },
          py::arg("key"), py::arg("group") = 0)
      .def(
          "set_option",
          [](Optimizer& o, const std::string& key, double value, const std::optional<size_t>& group) {
            if (group) return o.set_option(*group, key, value);
            for (size_t g = 0; g < o.param_groups().size(); ++g) o.set_option(g, key, value);
          },
          py::arg("key"), py::arg("value"), py::arg("group") = py::none(),
          "Sets a hyperparameter (\"lr\", ...) of one group, or of every group.")
      .def_property_readonly("param_groups",
                             [](const Optimizer& o) {
                               py::list out;
                               for (size_t g = 0; g < o.param_groups().size(); ++g) {
                                 py::dict d;
                                 d["params"] = o.param_groups()[g].params;
                                 for (const auto& [key, unused] : o.defaults()) d[py::str(key)] = o.option(g, key);
                                 out.append(d);
                               }
                               return out;
                             })
      .def(
          "state",
          [](const Optimizer& o, const Variable& param) -> py::object {
            const ParamState* s = o.state(param);
            if (s == nullptr) return py::none();
            py::dict d;
            d["step"] = s->step;
            for (const auto& [name, t] : s->tensors) d[py::str(name)] = t;
            return d;
          },
          py::arg("param"), "The parameter's state (\"step\" and its tensors, nnz-sized for sparse ones), or None.")
      .def(
          "add_param_group",
          [](Optimizer& o, const py::dict& group) {
            for (ParamGroup& g : groups_of(py::make_tuple(group), "add_param_group")) o.add_param_group(std::move(g));
          },
          py::arg("group"));

  py::class_<Sgd, Optimizer, std::shared_ptr<Sgd>>(optim, "SGD", "torch.optim.SGD's update (optim/sgd.h).")
      .def(py::init([](const py::iterable& params, double lr, double momentum, double dampening, double weight_decay,
                       bool nesterov) {
             SgdOptions o;
             o.lr = lr;
             o.momentum = momentum;
             o.dampening = dampening;
             o.weight_decay = weight_decay;
             o.nesterov = nesterov;
             return std::make_shared<Sgd>(groups_of(params, "SGD"), o);
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("momentum") = 0.0, py::arg("dampening") = 0.0,
           py::arg("weight_decay") = 0.0, py::arg("nesterov") = false);
  auto adam_options = [](double lr, const std::pair<double, double>& betas, double eps, double weight_decay) {
    AdamOptions o;
    o.lr = lr;
    o.beta1 = betas.first;
    o.beta2 = betas.second;
    o.eps = eps;
    o.weight_decay = weight_decay;
    return o;
  };
  py::class_<Adam, Optimizer, std::shared_ptr<Adam>>(optim, "Adam", "torch.optim.Adam's update (optim/adam.h).")
      .def(py::init([adam_options](const py::iterable& params, double lr, const std::pair<double, double>& betas,
                                   double eps, double weight_decay) {
             return std::make_shared<Adam>(groups_of(params, "Adam"), adam_options(lr, betas, eps, weight_decay));
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_pair(0.9, 0.999),
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0);
  py::class_<AdamW, Adam, std::shared_ptr<AdamW>>(optim, "AdamW", "torch.optim.AdamW's update (optim/adam.h).")
      .def(py::init([adam_options](const py::iterable& params, double lr, const std::pair<double, double>& betas,
                                   double eps, double weight_decay) {
             AdamWOptions o;
             static_cast<AdamOptions&>(o) = adam_options(lr, betas, eps, weight_decay);
             return std::make_shared<AdamW>(groups_of(params, "AdamW"), o);
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_pair(0.9, 0.999),
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 1e-2);

  optim.def("clip_grad_norm", &clip_grad_norm, py::arg("params"), py::arg("max_norm"), py::arg("norm_type") = 2.0,
            "Scales the gradients so that their global norm is at most max_norm; returns the norm before.");
}

void bind_mask_updater(py::module_& optim) {
  py::class_<StepwiseMaskUpdater>(
      optim, "MaskUpdater",
      "Prune and regrow over a model's sparse weights and their optimizer, a step at a time (optim/mask_updater.h). "
      "Each step: begin_step(t), forward and backward, after_backward(), the optimizer's step(), update(t).")
      .def(py::init([](py::object model, py::object optimizer, int64_t end_step, int64_t interval, double drop_fraction,
                       const std::string& growth, const std::string& prune, int64_t start_step,
                       const std::string& drop_schedule, bool allow_regrow_dropped, uint64_t seed,
                       std::vector<std::string> layers) {
             COPPICE_CHECK(py::isinstance<Module>(model), "MaskUpdater: model must be a coppice.nn.Module");
             COPPICE_CHECK(py::isinstance<Optimizer>(optimizer), "MaskUpdater: optimizer must be a coppice.optim one");
             MaskUpdaterConfig c = updater_config(start_step, end_step, interval, drop_fraction, drop_schedule, prune,
                                                  growth, allow_regrow_dropped, seed);
             return std::make_unique<StepwiseMaskUpdater>(std::move(model), std::move(optimizer), std::move(c),
                                                          std::move(layers));
           }),
           py::arg("model"), py::arg("optimizer"), py::arg("end_step"), py::arg("interval") = 100,
           py::arg("drop_fraction") = 0.3, py::arg("growth") = "random", py::arg("prune") = "magnitude",
           py::arg("start_step") = 0, py::arg("drop_schedule") = "cosine", py::arg("allow_regrow_dropped") = false,
           py::arg("seed") = 0, py::arg("layers") = std::vector<std::string>{},
           "growth: random (SET), gradient (RigL), momentum (SNFS) or a registered policy; prune: magnitude, "
           "movement or a registered prune criterion; layers: every sparse parameter unless named.")
      .def(
          "begin_step",
          [](StepwiseMaskUpdater& u, int64_t step) {
            py::gil_scoped_release release;
            u.begin_step(step);
          },
          py::arg("step"), "Before step t's forward pass.")
      .def(
          "after_backward",
          [](StepwiseMaskUpdater& u) {
            py::gil_scoped_release release;
            u.after_backward();
          },
          "After the backward pass, before the optimizer's step.")
      .def(
          "update",
          [](StepwiseMaskUpdater& u, int64_t step) -> py::object {
            std::optional<MaskUpdateStats> s;
            {
              py::gil_scoped_release release;
              s = u.update(step);
            }
            return s ? py::object(stats_dict(*s)) : py::object(py::none());
          },
          py::arg("step"),
          "After the optimizer's step: on update steps, prunes and regrows and returns what changed per layer "
          "(dropped, grown, itop_rate); None on other steps.")
      .def("is_update_step",
           [](const StepwiseMaskUpdater& u, int64_t step) { return u.updater().is_update_step(step); })
      .def("needs_dense_gradient",
           [](const StepwiseMaskUpdater& u, int64_t step) { return u.schedule().needs_dense_gradient(step); })
      .def("drop_fraction",
           [](const StepwiseMaskUpdater& u, int64_t step) { return drop_fraction_at(u.updater().config(), step); })
      .def_property_readonly("layers", [](const StepwiseMaskUpdater& u) { return u.updater().layers(); })
      .def(
          "itop_rate",
          [](const StepwiseMaskUpdater& u, const std::string& name) { return u.updater().itop_rate(name); },
          py::arg("layer"), "The fraction of the layer's positions ever stored since it was added.");
}

}  // namespace

void bind_optim(py::module_& m) {
  py::module_ optim = m.def_submodule("optim", "Optimizers and mask updates (optim/).");
  bind_optimizers(optim);
  bind_mask_updater(optim);
}

}  // namespace coppice::python

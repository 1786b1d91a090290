// coppice.optim: the optimizers (SGD, Adam, AdamW, Adagrad over parameters of any
// format: optim/optimizer.h) with their state as a dict (optim/state_io.h's
// save and restore, as the trainer's checkpoints keep it), learning-rate
// schedules (optim/lr_schedule.h, and the trainer's job_lr_schedule),
// gradient clipping, and MaskUpdater, which runs
// prune and regrow (optim/mask_updater.h) over a model and its optimizer one
// step at a time, as the trainer's loop does (train/trainer.cc), so that a
// Python script can train a sparse model with SET, RigL or SNFS itself. Its
// schedule keywords and state dict are shared with PatternUpdater, the same
// selection over plain tensors (mask_updater_args.h, bind_pattern_update.cc).
#include <pybind11/stl.h>

#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "models/dense_gradient_view.h"
#include "models/module.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/lr_schedule.h"
#include "optim/mask_schedule.h"
#include "optim/mask_updater.h"
#include "optim/sgd.h"
#include "optim/state_io.h"
#include "python/bindings.h"
#include "python/mask_updater_args.h"
#include "tensor/error.h"
#include "tensor/io/safetensors.h"
#include "train/config.h"
#include "train/job.h"
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

// ---- the state as a dict ----------------------------------------------------------------------
//
// state_dict() is save_optimizer_state's content (optim/state_io.h, what a
// checkpoint keeps: copies of the state tensors, the step counts, every
// group's hyperparameters), as {"optimizer": name, "param_groups": [{"params":
// [names], hyperparameter: value, ...}], "state": {name: {"step": n, state
// name: Tensor}}}; load_state_dict() turns such a dict back into that file
// and restores it through plan_optimizer_state and apply_optimizer_state,
// which check everything before changing anything. State is kept by
// parameter name; a parameter without one is named by its place,
// "group.<g>.param.<i>", for the call.

std::string exact_decimal(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

class PlaceNames {
 public:
  explicit PlaceNames(const Optimizer& o) {
    for (size_t g = 0; g < o.param_groups().size(); ++g) {
      const std::vector<Variable>& params = o.param_groups()[g].params;
      for (size_t i = 0; i < params.size(); ++i) {
        if (!params[i].name().empty()) continue;
        params[i].set_name(str_cat("group.", g, ".param.", i));
        named_.push_back(params[i]);
      }
    }
  }
  ~PlaceNames() {
    for (const Variable& v : named_) v.set_name("");
  }
  PlaceNames(const PlaceNames&) = delete;
  PlaceNames& operator=(const PlaceNames&) = delete;

 private:
  std::vector<Variable> named_;
};

py::dict optimizer_state_dict(const Optimizer& o, const std::string& who) {
  SafetensorsFile file;
  {
    PlaceNames names(o);
    absl::StatusOr<std::string> bytes = serialize_optimizer_state(o);
    if (!bytes.ok()) fail(who, ": ", bytes.status().message());
    absl::StatusOr<SafetensorsFile> parsed = parse_safetensors(*bytes, "optimizer state");
    if (!parsed.ok()) fail(who, ": ", parsed.status().message());
    file = std::move(*parsed);
    py::list groups;
    py::dict state;
    for (size_t g = 0; g < o.param_groups().size(); ++g) {
      py::dict group;
      py::list params;
      for (const Variable& p : o.param_groups()[g].params) {
        params.append(p.name());
        const ParamState* st = o.state(p);
        if (st == nullptr) continue;
        py::dict entry;
        entry["step"] = st->step;
        for (const auto& kv : st->tensors) {
          const Tensor* t = file.find(p.name() + "." + kv.first);
          COPPICE_CHECK(t != nullptr, who, ": no tensor '", p.name(), ".", kv.first, "' in the saved state");
          entry[py::str(kv.first)] = *t;
        }
        state[py::str(p.name())] = entry;
      }
      group["params"] = params;
      for (const auto& kv : o.defaults()) group[py::str(kv.first)] = o.option(g, kv.first);
      groups.append(group);
    }
    py::dict d;
    d["optimizer"] = o.name();
    d["param_groups"] = groups;
    d["state"] = state;
    return d;
  }
}

void optimizer_load_state_dict(Optimizer& o, const py::object& state_dict, const std::string& who) {
  COPPICE_CHECK(py::isinstance<py::dict>(state_dict), who, ": state_dict must be a dict (from state_dict()), got ",
                type_name_of(state_dict));
  const py::dict d = state_dict.cast<py::dict>();
  for (const char* key : {"optimizer", "param_groups", "state"}) {
    COPPICE_CHECK(d.contains(key), who, ": state_dict has no '", key, "'");
  }
  SafetensorsFile file;
  COPPICE_CHECK(py::isinstance<py::str>(d["optimizer"]), who, ": state_dict['optimizer'] must be a str, got ",
                type_name_of(d["optimizer"]));
  file.metadata["coppice.optimizer"] = d["optimizer"].cast<std::string>();
  // Before the groups' hyperparameters, which differ between optimizers.
  COPPICE_CHECK(file.metadata["coppice.optimizer"] == o.name(), who, ": the state is of optimizer '",
                file.metadata["coppice.optimizer"], "', not '", o.name(), "'");
  const py::object groups = d["param_groups"];
  COPPICE_CHECK(py::isinstance<py::list>(groups) || py::isinstance<py::tuple>(groups), who,
                ": state_dict['param_groups'] must be a list, got ", type_name_of(groups));
  const py::sequence group_list = groups.cast<py::sequence>();
  file.metadata["coppice.groups"] = std::to_string(group_list.size());
  for (size_t g = 0; g < group_list.size(); ++g) {
    const std::string at = str_cat("state_dict['param_groups'][", g, "]");
    const py::object group = group_list[g];
    COPPICE_CHECK(py::isinstance<py::dict>(group), who, ": ", at, " must be a dict, got ", type_name_of(group));
    const std::string prefix = str_cat("group.", g, ".");
    for (const auto& [k, v] : group.cast<py::dict>()) {
      COPPICE_CHECK(py::isinstance<py::str>(k), who, ": ", at, " has a key that is not a str");
      const std::string key = k.cast<std::string>();
      if (key == "params") {
        COPPICE_CHECK(py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v), who, ": ", at,
                      "['params'] must be a list of parameter names, got ", type_name_of(v));
        const py::sequence names = py::reinterpret_borrow<py::sequence>(v);
        file.metadata[prefix + "params"] = std::to_string(names.size());
        for (size_t i = 0; i < names.size(); ++i) {
          COPPICE_CHECK(py::isinstance<py::str>(names[i]), who, ": ", at, "['params'][", i,
                        "] must be a parameter name (str), got ", type_name_of(names[i]));
          file.metadata[str_cat(prefix, "param.", i)] = names[i].cast<std::string>();
        }
      } else {
        COPPICE_CHECK(o.defaults().count(key) != 0, who, ": ", at, " has hyperparameter '", key, "', which ", o.name(),
                      " does not have");
        COPPICE_CHECK((py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v)) && !py::isinstance<py::bool_>(v),
                      who, ": ", at, "['", key, "'] must be a number, got ", type_name_of(v));
        file.metadata[prefix + key] = exact_decimal(v.cast<double>());
      }
    }
  }
  const py::object state = d["state"];
  COPPICE_CHECK(py::isinstance<py::dict>(state), who, ": state_dict['state'] must be a dict, got ",
                type_name_of(state));
  for (const auto& [k, v] : state.cast<py::dict>()) {
    COPPICE_CHECK(py::isinstance<py::str>(k), who, ": state_dict['state'] has a key that is not a parameter name");
    const std::string name = k.cast<std::string>();
    const std::string at = str_cat("state_dict['state']['", name, "']");
    COPPICE_CHECK(py::isinstance<py::dict>(v), who, ": ", at, " must be a dict, got ", type_name_of(v));
    const py::dict entry = py::reinterpret_borrow<py::dict>(v);
    COPPICE_CHECK(entry.contains("step"), who, ": ", at, " has no 'step'");
    for (const auto& [sk, sv] : entry) {
      COPPICE_CHECK(py::isinstance<py::str>(sk), who, ": ", at, " has a key that is not a str");
      const std::string key = sk.cast<std::string>();
      if (key == "step") {
        COPPICE_CHECK(py::isinstance<py::int_>(sv) && !py::isinstance<py::bool_>(sv), who, ": ", at,
                      "['step'] must be an int, got ", type_name_of(sv));
        file.metadata["step." + name] = std::to_string(sv.cast<int64_t>());
      } else {
        const std::string what = str_cat(who, ": ", at, "['", key, "']");
        Tensor t = tensor_of(py::reinterpret_borrow<py::object>(sv), what);
        COPPICE_CHECK(t.is_dense(), what, " must be a dense tensor, got ", t.format());
        file.tensors.emplace_back(name + "." + key, t.to(Device::cpu()).contiguous());
      }
    }
  }
  PlaceNames names(o);
  absl::StatusOr<OptimizerStatePlan> plan = plan_optimizer_state(o, file, "state_dict");
  if (!plan.ok()) fail(who, ": ", plan.status().message());
  const absl::Status applied =
      apply_optimizer_state(o, std::move(*plan), /*restore_hyperparameters=*/true, "state_dict");
  if (!applied.ok()) fail(who, ": ", applied.message());
}

// ---- learning-rate schedules ------------------------------------------------------------------

// A schedule with how it was made, for repr.
struct PyLrSchedule {
  LrSchedulePtr schedule;
  std::string text;
};

// LrScheduler over a Python optimizer, which it keeps alive.
class PyLrScheduler {
 public:
  PyLrScheduler(py::object optimizer, const PyLrSchedule& schedule)
      : optimizer_(std::move(optimizer)),
        schedule_(schedule),
        scheduler_(optimizer_.cast<Optimizer&>(), schedule.schedule) {}
  LrScheduler& get() { return scheduler_; }
  const LrScheduler& get() const { return scheduler_; }
  const PyLrSchedule& schedule() const { return schedule_; }

 private:
  py::object optimizer_;
  PyLrSchedule schedule_;
  LrScheduler scheduler_;
};

// ---- prune and regrow, a step at a time -----------------------------------------------------

// The trainer's mask schedule over a Python model and optimizer: each step,
// begin_step(t) before the forward pass (on steps whose growth policy ranks
// the dense gradient, the sparse weights are swapped for dense leaves),
// after_backward() (the weights go back with their gradients projected onto
// their patterns; movement scores accumulate), the optimizer's step, then
// update(t), which prunes and regrows on update steps and gives the changed
// weights their new patterns in place (the same Variables in the model, the
// optimizer and the user's hands; their optimizer state carried over).
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

  // What a trainer checkpoint keeps of the mask method ("updater.<key>",
  // train/checkpoint.h): MaskUpdater::state_tensors, copied.
  py::dict state_dict() const { return mask_state_dict(*updater_); }

  // Checked as a checkpoint's is (against the layers and the parameters they
  // hold now) before anything changes, then restored.
  void load_state_dict(const py::object& state) {
    std::map<std::string, Tensor> params;
    for (const std::string& name : updater_->layers()) params[name] = model_.parameter(name).value();
    load_mask_state_dict(*updater_, state, &params, "MaskUpdater.load_state_dict");
  }

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
          "state_dict",
          [](const py::object& self) {
            return optimizer_state_dict(self.cast<const Optimizer&>(),
                                        str_cat("coppice.optim.", type_name_of(self), ".state_dict"));
          },
          "The optimizer's state as a dict of copies, what a checkpoint keeps (optim/state_io.h): "
          "{'optimizer': name, 'param_groups': [{'params': [names], 'lr': ..., ...}], 'state': {name: {'step': n, "
          "'exp_avg': Tensor, ...}}}. State tensors are shaped like the parameter's stored values (nnz-sized for a "
          "sparse one). Parameters are named by Variable.name, or 'group.<g>.param.<i>' where they have none.")
      .def(
          "load_state_dict",
          [](const py::object& self, const py::object& state) {
            optimizer_load_state_dict(self.cast<Optimizer&>(), state,
                                      str_cat("coppice.optim.", type_name_of(self), ".load_state_dict"));
          },
          py::arg("state_dict"),
          "Restores state_dict()'s state and hyperparameters (arrays are taken for Tensors) after checking all of "
          "it against this optimizer (its name, groups, parameter names, state names, shapes and dtypes); the "
          "first mismatch raises coppice.Error naming it and nothing changes. Sparse parameters must have the "
          "patterns they had when it was saved.")
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
  py::class_<Adagrad, Optimizer, std::shared_ptr<Adagrad>>(
      optim, "Adagrad",
      "torch.optim.Adagrad's update (optim/adagrad.h); with an embedding's row-sparse gradient only the rows used "
      "step, and their sums alone grow.")
      .def(py::init([](const py::iterable& params, double lr, double lr_decay, double weight_decay,
                       double initial_accumulator_value, double eps) {
             AdagradOptions o;
             o.lr = lr;
             o.lr_decay = lr_decay;
             o.weight_decay = weight_decay;
             o.initial_accumulator_value = initial_accumulator_value;
             o.eps = eps;
             return std::make_shared<Adagrad>(groups_of(params, "Adagrad"), o);
           }),
           py::arg("params"), py::arg("lr") = 1e-2, py::arg("lr_decay") = 0.0, py::arg("weight_decay") = 0.0,
           py::arg("initial_accumulator_value") = 0.0, py::arg("eps") = 1e-10);

  optim.def("clip_grad_norm", &clip_grad_norm, py::arg("params"), py::arg("max_norm"), py::arg("norm_type") = 2.0,
            "Scales the gradients so that their global norm is at most max_norm; returns the norm before.");
}

void bind_lr_schedules(py::module_& optim) {
  py::class_<PyLrSchedule>(optim, "LrSchedule",
                           "A learning-rate schedule (optim/lr_schedule.h): lr(base_lr, step), step 0 the lr before "
                           "the first scheduler step. Made by constant_lr, step_lr, cosine_lr, linear_warmup, "
                           "linear_ramp and job_lr_schedule.")
      .def(
          "lr", [](const PyLrSchedule& s, double base_lr, int64_t step) { return s.schedule->lr(base_lr, step); },
          py::arg("base_lr"), py::arg("step"))
      .def("__repr__", [](const PyLrSchedule& s) { return s.text; });
  optim.def(
      "constant_lr",
      [] {
        return PyLrSchedule{constant_lr(), "constant_lr()"};
      },
      "base_lr at every step.");
  optim.def(
      "step_lr",
      [](int64_t step_size, double gamma) {
        return PyLrSchedule{step_lr(step_size, gamma),
                            str_cat("step_lr(step_size=", step_size, ", gamma=", gamma, ")")};
      },
      py::arg("step_size"), py::arg("gamma") = 0.1, "base_lr * gamma ** (step // step_size) (torch's StepLR).");
  optim.def(
      "cosine_lr",
      [](int64_t t_max, double eta_min) {
        return PyLrSchedule{cosine_lr(t_max, eta_min), str_cat("cosine_lr(t_max=", t_max, ", eta_min=", eta_min, ")")};
      },
      py::arg("t_max"), py::arg("eta_min") = 0.0,
      "eta_min + (base_lr - eta_min) * (1 + cos(pi * step / t_max)) / 2 (CosineAnnealingLR's closed form; past t_max "
      "the cosine goes on).");
  optim.def(
      "linear_warmup",
      [](int64_t warmup_steps, double start_factor, const std::optional<PyLrSchedule>& then) {
        return PyLrSchedule{linear_warmup(warmup_steps, start_factor, then ? then->schedule : nullptr),
                            str_cat("linear_warmup(warmup_steps=", warmup_steps, ", start_factor=", start_factor,
                                    then ? str_cat(", then=", then->text) : "", ")")};
      },
      py::arg("warmup_steps"), py::arg("start_factor"), py::arg("then") = py::none(),
      "base_lr * (start_factor + (1 - start_factor) * step / warmup_steps) for step < warmup_steps (start_factor in "
      "(0, 1], torch's LinearLR), then `then` (constant when None) at step - warmup_steps.");
  optim.def(
      "linear_ramp",
      [](int64_t start_step, int64_t ramp_steps, const PyLrSchedule& inner) {
        return PyLrSchedule{
            linear_ramp(start_step, ramp_steps, inner.schedule),
            str_cat("linear_ramp(start_step=", start_step, ", ramp_steps=", ramp_steps, ", inner=", inner.text, ")")};
      },
      py::arg("start_step"), py::arg("ramp_steps"), py::arg("inner"),
      "inner's lr times (step - start_step + 1) / ramp_steps for start_step <= step < start_step + ramp_steps, "
      "inner's elsewhere (the trainer's ramp after mask_update.densify_step).");
  optim.def(
      "job_lr_schedule",
      [](const py::object& job, std::optional<int64_t> total_steps) {
        absl::StatusOr<JobConfig> config = absl::InvalidArgumentError("no job");
        if (py::isinstance<py::str>(job)) {
          config = load_job_config(job.cast<std::string>());
        } else {
          const std::string text = py::module_::import("json").attr("dumps")(job).cast<std::string>();
          config = parse_job_config(text);
        }
        if (!config.ok()) throw py::value_error(std::string(config.status().message()));
        if (!total_steps) {
          COPPICE_CHECK(config->training.steps.has_value(),
                        "job_lr_schedule: the job counts epochs (training.epochs); give total_steps");
          total_steps = *config->training.steps;
        }
        return PyLrSchedule{job_lr_schedule(*config, *total_steps),
                            str_cat("job_lr_schedule(<job>, total_steps=", *total_steps, ")")};
      },
      py::arg("job"), py::arg("total_steps") = py::none(),
      "The schedule the trainer steps for a job (a YAML path or a dict of its keys, validated as coppice.train "
      "does): lr_schedule's warm-up (from a factor of 0 too), then constant, step or cosine, and the ramp after "
      "mask_update.densify_step; total_steps: training.steps unless given.");

  py::class_<PyLrScheduler>(optim, "LrScheduler",
                            "Sets every parameter group's lr from a schedule (optim/lr_schedule.h's LrScheduler): the "
                            "base lrs are the groups' lrs when it is made, and it sets step 0's lr at once; call "
                            "step() after each optimizer step.")
      .def(py::init([](py::object optimizer, const PyLrSchedule& schedule) {
             COPPICE_CHECK(py::isinstance<Optimizer>(optimizer),
                           "LrScheduler: optimizer must be a coppice.optim one, got ", type_name_of(optimizer));
             return std::make_unique<PyLrScheduler>(std::move(optimizer), schedule);
           }),
           py::arg("optimizer"), py::arg("schedule"))
      .def(
          "step", [](PyLrScheduler& s) { s.get().step(); }, "Advances one step and sets the lrs.")
      .def(
          "set_step", [](PyLrScheduler& s, int64_t step) { s.get().set_step(step); }, py::arg("step"),
          "Jumps to `step` (when resuming) and sets the lrs.")
      .def_property_readonly(
          "current_step", [](const PyLrScheduler& s) { return s.get().current_step(); }, "Steps taken.")
      .def_property_readonly(
          "lr", [](const PyLrScheduler& s) { return s.get().last_lrs().at(0); }, "The first group's current lr.")
      .def_property_readonly("base_lrs", [](const PyLrScheduler& s) { return s.get().base_lrs(); })
      .def(
          "get_last_lr", [](const PyLrScheduler& s) { return s.get().last_lrs(); }, "Every group's current lr.")
      .def_property_readonly("schedule", [](const PyLrScheduler& s) { return s.schedule(); })
      .def(
          "state_dict",
          [](const PyLrScheduler& s) {
            py::dict d;
            d["step"] = s.get().current_step();
            return d;
          },
          "{'step': current_step}; load_state_dict sets it back (the schedule is a function of the step).")
      .def(
          "load_state_dict",
          [](PyLrScheduler& s, const py::dict& d) {
            COPPICE_CHECK(d.contains("step") && py::isinstance<py::int_>(d["step"]),
                          "LrScheduler.load_state_dict: state_dict['step'] must be an int");
            s.get().set_step(d["step"].cast<int64_t>());
          },
          py::arg("state_dict"));
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
             MaskUpdaterConfig c = updater_config("MaskUpdater", start_step, end_step, interval, drop_fraction,
                                                  drop_schedule, prune, growth, allow_regrow_dropped, seed);
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
      .def("state_dict", &StepwiseMaskUpdater::state_dict,
           "The updater's own state, what a trainer checkpoint keeps of it (as 'updater.<key>'): a dict of name to "
           "Tensor (copies), per layer '<layer>.ever_active' (bool, the layer's shape: the ITOP record) and, with "
           "prune='movement', '<layer>.movement_scores' (one per stored value) and '<layer>.movement_steps'. The "
           "masks themselves are the model's (model.state_dict()); the schedule is a function of the step. "
           "coppice.save writes it as it is.")
      .def("load_state_dict", &StepwiseMaskUpdater::load_state_dict, py::arg("state_dict"),
           "Restores state_dict()'s entries (arrays are taken for Tensors) after checking them against this "
           "updater's layers and the parameters they hold now; a missing, unknown or mismatched entry raises "
           "coppice.Error naming it, and nothing changes. Load the model's state first (its patterns), then the "
           "optimizer's and this.")
      .def(
          "itop_rate",
          [](const StepwiseMaskUpdater& u, const std::string& name) { return u.updater().itop_rate(name); },
          py::arg("layer"), "The fraction of the layer's positions ever stored since it was added.");
}

}  // namespace

// ---- shared with PatternUpdater (mask_updater_args.h) ------------------------------------------

MaskUpdaterConfig updater_config(const char* who, int64_t start_step, int64_t end_step, int64_t interval,
                                 double drop_fraction, const std::string& drop_schedule, const std::string& prune,
                                 const std::string& growth, bool allow_regrow_dropped, uint64_t seed) {
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
    COPPICE_CHECK(python_prune_criterion(prune, &c.prune_score), who, ": unknown prune criterion '", prune,
                  "'; known: magnitude, movement",
                  str_cat(python_prune_criteria().empty() ? "" : ", ", str_join(python_prune_criteria(), ", ")),
                  " (coppice.register_prune_criterion adds one)");
    c.prune = PruneCriterion::kCustom;
  }
  validate(c);
  return c;
}

py::dict mask_state_dict(const MaskState& state) {
  py::dict d;
  for (const auto& [key, t] : state.state_tensors()) d[py::str(key)] = t.clone();
  return d;
}

void load_mask_state_dict(MaskState& state, const py::object& state_dict, const std::map<std::string, Tensor>* params,
                          const std::string& who) {
  COPPICE_CHECK(py::isinstance<py::dict>(state_dict), who,
                ": state_dict must be a dict of name to tensor (from state_dict()), got ", type_name_of(state_dict));
  std::map<std::string, Tensor> tensors;
  for (const auto& [k, v] : state_dict.cast<py::dict>()) {
    COPPICE_CHECK(py::isinstance<py::str>(k), who, ": a key of state_dict is ", type_name_of(k), ", not an entry name");
    const std::string key = k.cast<std::string>();
    tensors[key] = tensor_of(py::reinterpret_borrow<py::object>(v), str_cat(who, ": state_dict['", key, "']"));
  }
  try {
    state.check_state_tensors(tensors, params);
  } catch (const Error& e) {
    std::string why = e.what();
    const std::string own = "mask updater: load_state_tensors: ";  // the checkpoint reader's words
    if (why.rfind(own, 0) == 0) why = why.substr(own.size());
    fail(who, ": ", why);
  }
  py::gil_scoped_release release;
  state.load_state_tensors(tensors);
}

void bind_optim(py::module_& m) {
  py::module_ optim = m.def_submodule("optim", "Optimizers and mask updates (optim/).");
  bind_optimizers(optim);
  bind_lr_schedules(optim);
  bind_mask_updater(optim);
}

}  // namespace coppice::python

// The mask updates' selections over plain tensors, for code that keeps its
// own weights, gradients and optimizer state (a PyTorch layer) rather than
// Coppice's Module and Optimizer:
//   coppice.optim.PatternUpdater   prune and regrow (optim/mask_updater.h:
//                                  SET, RigL, SNFS; on n:m weights the trainer's
//                                  rigl_nm, each group regrowing within itself,
//                                  optim/group_regrow.h), a layer at a time by
//                                  name, handing back each new parameter and
//                                  keep_from (each new slot's old slot) for
//                                  the caller to carry its own state over;
//   coppice.optim.GmpPruner, gmp_density_at, prune_to_density
//                                  gradual magnitude pruning (optim/gmp.h) and
//                                  the one-shot pruning its steps run
//                                  (optim/prune.h);
//   coppice.nm_mask                the n:m selection SR-STE projects dense
//                                  weights through (optim/sr_ste.h's
//                                  NmProjection).
// No new selection is written here: each call is optim/'s own. Arrays may be
// anything tensor_of_any takes (NumPy, DLPack producers such as PyTorch
// tensors on the CPU or a GPU, without a copy).
#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "optim/finite_check.h"
#include "optim/gmp.h"
#include "optim/mask_updater.h"
#include "optim/prune.h"
#include "optim/sr_ste.h"
#include "python/bindings.h"
#include "python/mask_updater_args.h"
#include "sparse/nm.h"
#include "sparse/nm_transposable.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"

namespace coppice::python {
namespace {

// A sparse coppice.Tensor, or a coppice.Error naming `what`.
Tensor sparse_param(const py::handle& o, const std::string& what) {
  COPPICE_CHECK(py::isinstance<Tensor>(o), what,
                " must be a sparse coppice.Tensor (coppice.sparse_from_mask, sparse_from_parts or "
                "Tensor.to_format make one), got ",
                type_name_of(o));
  Tensor t = o.cast<Tensor>();
  COPPICE_CHECK(t.defined() && t.is_sparse(), what, " must be a sparse coppice.Tensor, got a ",
                t.defined() ? t.format() : std::string("undefined"), " one");
  return t;
}

// A dense-shaped input of a layer (its gradient or momentum): the parameter's shape.
Tensor shaped_like(const py::object& o, const Tensor& param, const std::string& what) {
  Tensor t = tensor_of_any(o, what);
  COPPICE_CHECK(t.shape() == param.shape(), what, " must have the parameter's shape ", shape_to_string(param.shape()),
                ", got ", shape_to_string(t.shape()));
  return t;
}

// (new parameter, keep_from or None) of a mask change: keep_from undefined means nothing changed.
py::tuple change_tuple(const MaskChange& c) {
  return py::make_tuple(c.param, c.keep_from.defined() ? py::cast(c.keep_from) : py::object(py::none()));
}

// ---- prune and regrow over plain tensors ----------------------------------------------------

class PatternUpdater {
 public:
  PatternUpdater(MaskUpdaterConfig config, std::string prune) : prune_(std::move(prune)), updater_(std::move(config)) {}

  void add_layer(const std::string& name, const py::object& param) {
    const Tensor p = sparse_param(param, str_cat("PatternUpdater.add_layer: param of layer '", name, "'"));
    py::gil_scoped_release release;
    updater_.add_layer(name, p);
  }

  // The layer's name, or a coppice.Error naming the call and the known layers.
  void check_layer(const std::string& name, const char* who) const {
    const std::vector<std::string>& names = updater_.layers();
    COPPICE_CHECK(std::find(names.begin(), names.end(), name) != names.end(), "PatternUpdater.", who, ": no layer '",
                  name, "'; layers: ", names.empty() ? "none (add_layer adds one)" : str_join(names, ", "));
  }

  py::dict update(int64_t step, const py::object& inputs) {
    const std::string who = "PatternUpdater.update";
    COPPICE_CHECK(py::isinstance<py::dict>(inputs), who,
                  ": inputs must be a dict of layer name to {'param': ..., 'gradient': ..., 'momentum': ...}, got ",
                  type_name_of(inputs));
    std::map<std::string, LayerInputs> in;
    for (const auto& [k, v] : inputs.cast<py::dict>()) {
      COPPICE_CHECK(py::isinstance<py::str>(k), who, ": a key of inputs is ", type_name_of(k), ", not a layer name");
      const std::string name = k.cast<std::string>();
      check_layer(name, "update");
      const std::string at = str_cat(who, ": inputs['", name, "']");
      COPPICE_CHECK(py::isinstance<py::dict>(v), at, " must be a dict with 'param' (and 'gradient', 'momentum'), got ",
                    type_name_of(v));
      const py::dict entry = py::reinterpret_borrow<py::dict>(v);
      for (const auto& [ek, unused] : entry) {
        const std::string key = py::isinstance<py::str>(ek) ? ek.cast<std::string>() : std::string();
        COPPICE_CHECK(key == "param" || key == "gradient" || key == "momentum", at, " has key ",
                      py::repr(ek).cast<std::string>(), "; known: param, gradient, momentum");
      }
      COPPICE_CHECK(entry.contains("param"), at, " has no 'param'");
      LayerInputs& li = in[name];
      li.param = sparse_param(entry["param"], at + "['param']");
      if (entry.contains("gradient") && !entry["gradient"].is_none()) {
        li.growth_signal = GrowthSignal::dense_gradient(shaped_like(entry["gradient"], li.param, at + "['gradient']"));
      }
      if (entry.contains("momentum") && !entry["momentum"].is_none()) {
        li.momentum = shaped_like(entry["momentum"], li.param, at + "['momentum']");
      }
    }
    for (const std::string& name : updater_.layers()) {
      COPPICE_CHECK(in.count(name), who, ": inputs has no entry for layer '", name,
                    "' (every layer's 'param' is needed at every call)");
    }
    MaskUpdateResult r;
    {
      py::gil_scoped_release release;
      r = updater_.update(step, in);
    }
    py::dict layers;
    for (const LayerUpdate& u : r.layers) {
      py::dict d;
      d["param"] = u.param;
      d["keep_from"] = u.keep_from.defined() ? py::cast(u.keep_from) : py::object(py::none());
      d["changed"] = u.changed;
      d["dropped"] = u.dropped;
      d["grown"] = u.grown;
      d["nnz"] = u.nnz;
      d["density"] = u.density;
      d["itop_rate"] = u.itop_rate;
      layers[py::str(u.name)] = d;
    }
    py::dict out;
    out["step"] = r.step;
    out["updated"] = r.updated;
    out["drop_fraction"] = r.drop_fraction;
    out["nnz"] = r.nnz;
    out["numel"] = r.numel;
    out["density"] = r.density();
    out["layers"] = layers;
    return out;
  }

  void accumulate_movement(const std::string& name, const py::object& param, const py::object& gradient) {
    check_layer(name, "accumulate_movement");
    const std::string at = str_cat("PatternUpdater.accumulate_movement: layer '", name, "'");
    const Tensor p = sparse_param(param, at + ": param");
    const Tensor g = tensor_of_any(gradient, at + ": gradient");
    py::gil_scoped_release release;
    updater_.accumulate_movement(name, p, g);
  }

  void load_state_dict(const py::object& state, const py::object& params) {
    const std::string who = "PatternUpdater.load_state_dict";
    if (params.is_none()) return load_mask_state_dict(updater_, state, nullptr, who);
    COPPICE_CHECK(py::isinstance<py::dict>(params), who, ": params must be a dict of layer name to parameter, got ",
                  type_name_of(params));
    std::map<std::string, Tensor> ps;
    for (const auto& [k, v] : params.cast<py::dict>()) {
      COPPICE_CHECK(py::isinstance<py::str>(k), who, ": a key of params is ", type_name_of(k), ", not a layer name");
      const std::string name = k.cast<std::string>();
      check_layer(name, "load_state_dict");
      ps[name] = sparse_param(v, str_cat(who, ": params['", name, "']"));
    }
    load_mask_state_dict(updater_, state, &ps, who);
  }

  std::string repr() const {
    const MaskUpdaterConfig& c = updater_.config();
    return str_cat("coppice.optim.PatternUpdater(growth='", c.growth, "', prune='", prune_,
                   "', start_step=", c.start_step, ", end_step=", c.end_step, ", interval=", c.interval,
                   ", drop_fraction=", c.drop_fraction, ", drop_schedule='", drop_schedule_name(c.schedule),
                   "', layers=[", str_join(updater_.layers(), ", "), "])");
  }

  const MaskUpdater& updater() const { return updater_; }
  MaskUpdater& updater() { return updater_; }

 private:
  std::string prune_;  // as given (a criterion registered from Python is kCustom in the config)
  MaskUpdater updater_;
};

void bind_pattern_updater(py::module_& optim) {
  py::class_<PatternUpdater>(
      optim, "PatternUpdater",
      "Prune and regrow over plain tensors (optim/mask_updater.h): MaskUpdater's selection without a model or an "
      "optimizer. add_layer(name, param) registers each sparse weight; update(step, inputs) takes every layer's "
      "current parameter (and its dense gradient or momentum when the growth policy ranks by them) and hands back "
      "the new parameters with keep_from, each new value slot's old slot (-1: grown), for the caller to carry its "
      "optimizer state over: survivors keep their values bit for bit, grown entries start at zero, and each layer "
      "keeps its nnz. n:m layers regrow within their groups (the trainer's rigl_nm); BSR and Blocked-ELL layers "
      "keep, drop and grow whole blocks.")
      .def(py::init([](int64_t end_step, int64_t interval, double drop_fraction, const std::string& growth,
                       const std::string& prune, int64_t start_step, const std::string& drop_schedule,
                       bool allow_regrow_dropped, uint64_t seed) {
             MaskUpdaterConfig c = updater_config("PatternUpdater", start_step, end_step, interval, drop_fraction,
                                                  drop_schedule, prune, growth, allow_regrow_dropped, seed);
             return std::make_unique<PatternUpdater>(std::move(c), prune);
           }),
           py::arg("end_step"), py::arg("interval") = 100, py::arg("drop_fraction") = 0.3, py::arg("growth") = "random",
           py::arg("prune") = "magnitude", py::arg("start_step") = 0, py::arg("drop_schedule") = "cosine",
           py::arg("allow_regrow_dropped") = false, py::arg("seed") = 0,
           "MaskUpdater's schedule keywords: updates at start_step + j * interval before end_step, each dropping "
           "round(drop_fraction(step) * nnz) entries per layer (drop_schedule: cosine, linear or constant); growth: "
           "random (SET), gradient (RigL), momentum (SNFS) or a registered policy; prune: magnitude, movement or a "
           "registered prune criterion; seed: the key of random growth (the same masks on every device and rank).")
      .def("add_layer", &PatternUpdater::add_layer, py::arg("name"), py::arg("param"),
           "Registers a layer with its initial parameter, a sparse coppice.Tensor on the CPU or a GPU (coo, csr, "
           "csc, masked, nm, bsr or blocked_ell): the start of its ITOP record.")
      .def_property_readonly(
          "layers", [](const PatternUpdater& u) { return u.updater().layers(); }, "Layer names, in add_layer order.")
      .def(
          "is_update_step", [](const PatternUpdater& u, int64_t step) { return u.updater().is_update_step(step); },
          py::arg("step"))
      .def(
          "needs_dense_gradient",
          [](const PatternUpdater& u, int64_t step) { return u.updater().needs_dense_gradient(step); }, py::arg("step"),
          "Whether update(step) needs each layer's 'gradient' (update steps of gradient growth).")
      .def(
          "needs_momentum", [](const PatternUpdater& u, int64_t step) { return u.updater().needs_momentum(step); },
          py::arg("step"), "Whether update(step) needs each layer's 'momentum' (update steps of momentum growth).")
      .def(
          "drop_fraction",
          [](const PatternUpdater& u, int64_t step) { return drop_fraction_at(u.updater().config(), step); },
          py::arg("step"), "The drop-fraction schedule at `step` (0 outside [start_step, end_step)).")
      .def(
          "itop_rate",
          [](const PatternUpdater& u, const std::string& name) {
            u.check_layer(name, "itop_rate");
            return u.updater().itop_rate(name);
          },
          py::arg("layer"), "The fraction of the layer's positions ever stored since add_layer.")
      .def("update", &PatternUpdater::update, py::arg("step"), py::arg("inputs"),
           "inputs: {layer: {'param': sparse Tensor (required), 'gradient': the dense gradient of the parameter's "
           "shape (RigL's growth ranks it; needed when needs_dense_gradient(step)), 'momentum': of the parameter's "
           "shape (needs_momentum(step))}} for every layer; arrays may be NumPy or DLPack producers (PyTorch "
           "tensors, on the CPU or a GPU: no copy). Returns {'step', 'updated' (whether step is an update step), "
           "'drop_fraction', 'nnz', 'numel', 'density' (over every layer), 'layers': {layer: {'param' (the new "
           "parameter, the input itself when unchanged), 'keep_from' (i64, one per value slot of the new param: "
           "its old slot or -1; on the CPU, a BSR layer's on its device; None when unchanged), 'changed', "
           "'dropped', 'grown' (entries), 'nnz', 'density', 'itop_rate'}}} with layers in add_layer order. On other "
           "steps nothing changes. Every input is checked before any layer changes; a missing or unknown layer, a "
           "misshapen gradient, an inf or NaN raise coppice.Error naming it.")
      .def("accumulate_movement", &PatternUpdater::accumulate_movement, py::arg("layer"), py::arg("param"),
           py::arg("gradient"),
           "prune='movement': adds -param * gradient to the layer's scores; call every step with the gradient of "
           "the current pattern (of the parameter's format and nnz, or dense of its shape).")
      .def(
          "state_dict", [](const PatternUpdater& u) { return mask_state_dict(u.updater()); },
          "The updater's own state, as MaskUpdater.state_dict: per layer '<layer>.ever_active' (bool, the layer's "
          "shape: the ITOP record) and, with prune='movement', '<layer>.movement_scores' (one per stored value) and "
          "'<layer>.movement_steps'; Tensor copies. The masks are the caller's parameters.")
      .def("load_state_dict", &PatternUpdater::load_state_dict, py::arg("state_dict"), py::arg("params") = py::none(),
           "Restores state_dict()'s entries into the layers added so far, after checking all of them (and the "
           "movement scores against params, {layer: the parameter it holds now}, when given); a missing, unknown "
           "or mismatched entry raises coppice.Error naming it, and nothing changes.")
      .def("__repr__", &PatternUpdater::repr);
}

// ---- gradual magnitude pruning --------------------------------------------------------------

GmpConfig gmp_config(int64_t start_step, int64_t end_step, int64_t frequency, double initial_density,
                     double final_density) {
  GmpConfig c;
  c.start_step = start_step;
  c.end_step = end_step;
  c.frequency = frequency;
  c.initial_density = initial_density;
  c.final_density = final_density;
  validate(c);
  return c;
}

void bind_gmp(py::module_& optim) {
  optim.def(
      "gmp_density_at",
      [](int64_t step, int64_t end_step, int64_t start_step, int64_t frequency, double initial_density,
         double final_density) {
        return gmp_density_at(gmp_config(start_step, end_step, frequency, initial_density, final_density), step);
      },
      py::arg("step"), py::kw_only(), py::arg("end_step"), py::arg("start_step") = 0, py::arg("frequency") = 100,
      py::arg("initial_density") = 1.0, py::arg("final_density") = 0.1,
      "GMP's scheduled density at `step` (optim/gmp.h, the job's mask_update keys): initial_density before "
      "start_step, final_density from end_step on, between them 1 - s_f - (s_i - s_f) (1 - (step - start_step) / "
      "(end_step - start_step))^3 with s = 1 - density. frequency does not change it (GmpPruner.is_prune_step "
      "reads it) but is checked with the rest.");
  optim.def(
      "prune_to_density",
      [](const py::object& param, double density) {
        const Tensor p = sparse_param(param, "prune_to_density: param");
        MaskChange c;
        {
          py::gil_scoped_release release;
          c = prune_to_density(p, density);
        }
        return change_tuple(c);
      },
      py::arg("param"), py::arg("density"),
      "One-shot magnitude pruning (optim/prune.h), what each GMP step runs: keeps the round(density * numel) "
      "stored entries of largest |w| (ties to the lower position); BSR and Blocked-ELL keep round(density * "
      "blocks) whole blocks of largest sum of squares. Only removes entries. Returns (new_param, keep_from): "
      "keep_from is i64, one per value slot of new_param, its old slot; (param, None) when nothing needs to go.");

  py::class_<GmpPruner>(optim, "GmpPruner",
                        "Gradual magnitude pruning (optim/gmp.h), as the trainer's gmp method runs it on each layer.")
      .def(py::init([](int64_t end_step, int64_t start_step, int64_t frequency, double initial_density,
                       double final_density) {
             return std::make_unique<GmpPruner>(
                 gmp_config(start_step, end_step, frequency, initial_density, final_density));
           }),
           py::kw_only(), py::arg("end_step"), py::arg("start_step") = 0, py::arg("frequency") = 100,
           py::arg("initial_density") = 1.0, py::arg("final_density") = 0.1)
      .def("is_prune_step", &GmpPruner::is_prune_step, py::arg("step"),
           "start_step + j * frequency up to end_step, and end_step itself.")
      .def(
          "density_at", [](const GmpPruner& g, int64_t step) { return gmp_density_at(g.config(), step); },
          py::arg("step"), "gmp_density_at with this pruner's schedule.")
      .def(
          "prune",
          [](const GmpPruner& g, int64_t step, const py::object& param) {
            const Tensor p = sparse_param(param, "GmpPruner.prune: param");
            MaskChange c;
            {
              py::gil_scoped_release release;
              c = g.prune(step, p);
            }
            return change_tuple(c);
          },
          py::arg("step"), py::arg("param"),
          "On a prune step, prune_to_density(param, density_at(step)); otherwise (param, None).")
      .def("__repr__", [](const GmpPruner& g) {
        const GmpConfig& c = g.config();
        return str_cat("coppice.optim.GmpPruner(start_step=", c.start_step, ", end_step=", c.end_step,
                       ", frequency=", c.frequency, ", initial_density=", c.initial_density,
                       ", final_density=", c.final_density, ")");
      });
}

// ---- n:m ----------------------------------------------------------------------------------------

void bind_nm_mask(py::module_& m) {
  m.def(
      "nm_mask",
      [](const py::object& weight, int64_t n, int64_t mm, bool transposable) {
        constexpr const char* who = "coppice.nm_mask";
        const Tensor w = tensor_of_any(weight, str_cat(who, ": weight"));
        COPPICE_CHECK(w.is_dense() && is_floating(w.dtype()), who, ": weight must be a dense floating tensor, got ",
                      w.format(), " ", dtype_name(w.dtype()));
        check_nm_shape(w.shape(), n, mm, who);
        COPPICE_CHECK(!transposable || (mm <= kMaxTransposableM && w.dim() == 2 && w.size(0) % mm == 0), who,
                      ": a transposable mask needs m <= ", kMaxTransposableM,
                      " and a 2-D weight whose both dims m divides, got m = ", mm, " and shape ",
                      shape_to_string(w.shape()));
        py::gil_scoped_release release;
        try {
          return NmProjection(w, n, mm, transposable).mask();
        } catch (const NonfiniteError& e) {
          std::string why = e.what();
          const std::string own = "sr_ste: refresh: ";  // SR-STE's words
          if (why.rfind(own, 0) == 0) why = why.substr(own.size());
          throw NonfiniteError(str_cat(who, ": ", why));
        }
      },
      py::arg("weight"), py::arg("n"), py::arg("m"), py::arg("transposable") = false,
      "The n:m selection SR-STE projects a dense weight through (optim/sr_ste.h): a bool mask of the weight's "
      "shape and device keeping, in every group of m consecutive entries of a row (along the last dim), the n of "
      "largest |w|, ties to the lower index; with transposable (2-D, m <= 4 dividing both dims) the mask that is "
      "n:m along the columns too and keeps the largest sum of |w| per m x m tile (sparse/nm_transposable.h). A "
      "weight holding an inf or a NaN is refused. weight: a coppice.Tensor, NumPy array or DLPack producer.");
}

}  // namespace

void bind_pattern_update(py::module_& m) {
  py::module_ optim = m.attr("optim").cast<py::module_>();
  bind_pattern_updater(optim);
  bind_gmp(optim);
  bind_nm_mask(m);
}

}  // namespace coppice::python

// Sparsity from Python: sparsifiers by registry name (sparsifiers/registry.h:
// the built-ins and any registered, from C++ or Python), the context their
// random choices are keyed by, and SparsityBuilder, which writes the schedule
// that Module.apply_sparsity applies (sparsifiers/sparsity_builder.h).
//
// A sparsifier's parameters are given as keywords and handed on as the
// strings a job file would hold (magnitude's sparsity=0.9 becomes "0.9"), so
// the registry's own checks name a bad or unknown one.
#include <pybind11/stl.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "optim/density.h"
#include "python/bindings.h"
#include "sparsifiers/registry.h"
#include "sparsifiers/sparsifier.h"
#include "sparsifiers/sparsity_builder.h"
#include "tensor/error.h"

namespace coppice::python {
namespace {

SparsifierSpec spec_of(const std::string& name, const py::kwargs& params) {
  SparsifierSpec spec{name, {}};
  for (const auto& [key, value] : params) spec.params[key.cast<std::string>()] = py::str(value).cast<std::string>();
  return spec;
}

OutputFormat output_format(const std::string& name, int64_t block_rows, int64_t block_cols, int64_t n, int64_t m) {
  OutputFormat f;
  f.name = name;
  f.options.block_rows = block_rows;
  f.options.block_cols = block_cols;
  f.options.n = n;
  f.options.m = m;
  return f;
}

SparsifyContext context_of(const py::object& ctx) {
  if (ctx.is_none()) return SparsifyContext{};
  COPPICE_CHECK(py::isinstance<SparsifyContext>(ctx), "Sparsifier: ctx must be a coppice.SparsifyContext or None, got ",
                type_name_of(ctx));
  return ctx.cast<SparsifyContext>();
}

}  // namespace

void bind_sparsity(py::module_& m) {
  py::class_<SparsifyContext>(m, "SparsifyContext",
                              "What a sparsifier's random choices are keyed by: seed, purpose, step, rank "
                              "(sparsifiers/sparsifier.h).")
      .def(py::init([](uint64_t seed, uint64_t purpose, uint64_t step, uint64_t rank) {
             return SparsifyContext{seed, purpose, step, rank};
           }),
           py::arg("seed") = 0, py::arg("purpose") = 0, py::arg("step") = 0, py::arg("rank") = 0)
      .def_readwrite("seed", &SparsifyContext::seed)
      .def_readwrite("purpose", &SparsifyContext::purpose)
      .def_readwrite("step", &SparsifyContext::step)
      .def_readwrite("rank", &SparsifyContext::rank)
      .def("__repr__", [](const SparsifyContext& c) {
        return str_cat("coppice.SparsifyContext(seed=", c.seed, ", purpose=", c.purpose, ", step=", c.step,
                       ", rank=", c.rank, ")");
      });

  py::class_<Sparsifier, SparsifierPtr>(m, "Sparsifier", "A sparsifier (sparsifiers/sparsifier.h), made by name.")
      .def("describe", &Sparsifier::describe)
      .def_property_readonly("kind", [](const Sparsifier& s) { return std::string(sparsifier_kind_name(s.kind())); })
      .def(
          "keep_mask",
          [](const Sparsifier& s, const py::object& x, const py::object& ctx) {
            const Tensor t = tensor_of(x, "Sparsifier.keep_mask: x");
            const SparsifyContext c = context_of(ctx);
            py::gil_scoped_release release;
            return s.keep_mask(t, c);
          },
          py::arg("x"), py::arg("ctx") = py::none(), "The entries of x to keep: a bool Tensor of x's shape.")
      .def(
          "apply",
          [](const Sparsifier& s, const py::object& x, const std::string& format, int64_t block_rows,
             int64_t block_cols, int64_t n, int64_t mm, const py::object& ctx) {
            const Tensor t = tensor_of(x, "Sparsifier.apply: x");
            const OutputFormat f = output_format(format, block_rows, block_cols, n, mm);
            const SparsifyContext c = context_of(ctx);
            py::gil_scoped_release release;
            return s.apply(t, f, c);
          },
          py::arg("x"), py::arg("format") = "dense", py::arg("block_rows") = 0, py::arg("block_cols") = 0,
          py::arg("n") = 0, py::arg("m") = 0, py::arg("ctx") = py::none(),
          "x's kept entries in `format` (dense: zeros where dropped).")
      .def("__repr__", [](const Sparsifier& s) { return str_cat("coppice.Sparsifier(", s.describe(), ")"); });
  m.def(
      "sparsifier",
      [](const std::string& name, const py::kwargs& params) { return make_sparsifier(spec_of(name, params)); },
      py::arg("name"), "The sparsifier registered as `name`, with its parameters as keywords.");

  // Rule builders point into their SparsityBuilder's schedule: each keeps it alive.
  py::class_<ParameterRuleBuilder>(m, "ParameterRule", "One parameter rule of a SparsityBuilder; setters chain.")
      .def(
          "format",
          [](ParameterRuleBuilder& r, const std::string& name, int64_t block_rows, int64_t block_cols, int64_t n,
             int64_t mm) -> ParameterRuleBuilder& {
            return r.format(name, output_format(name, block_rows, block_cols, n, mm).options);
          },
          py::arg("name"), py::arg("block_rows") = 0, py::arg("block_cols") = 0, py::arg("n") = 0, py::arg("m") = 0,
          py::return_value_policy::reference_internal, "The weight's format (dense by default).")
      .def(
          "sparsify",
          [](ParameterRuleBuilder& r, const std::string& name, const py::kwargs& params) -> ParameterRuleBuilder& {
            return r.sparsify(spec_of(name, params));
          },
          py::arg("name"), py::return_value_policy::reference_internal,
          "The initial sparsifier, by registry name, with its parameters as keywords.")
      .def("density", &ParameterRuleBuilder::density, py::arg("density"), py::return_value_policy::reference_internal,
           "The fraction of entries kept, in (0, 1] (without a sparsifier: magnitude to it).");
  py::class_<OutputRuleBuilder>(m, "OutputRule",
                                "One module-output rule of a SparsityBuilder: forward() per output, backward() per "
                                "input gradient, in the module's order (linear: x, weight, bias).")
      .def(
          "forward",
          [](OutputRuleBuilder& r, const py::object& name, const std::string& format,
             const py::kwargs& params) -> OutputRuleBuilder& {
            return r.forward(name.is_none() ? SparsifierSpec{} : spec_of(name.cast<std::string>(), params), format);
          },
          py::arg("name") = py::none(), py::arg("format") = "dense", py::return_value_policy::reference_internal,
          "The next output: sparsifier `name` (None: keep all) with its parameters, stored in `format`.")
      .def(
          "backward",
          [](OutputRuleBuilder& r, const py::object& name, const std::string& format,
             const py::kwargs& params) -> OutputRuleBuilder& {
            return r.backward(name.is_none() ? SparsifierSpec{} : spec_of(name.cast<std::string>(), params), format);
          },
          py::arg("name") = py::none(), py::arg("format") = "dense", py::return_value_policy::reference_internal,
          "The next input's gradient, as forward().");
  py::class_<SparsityBuilder>(m, "SparsityBuilder",
                              "Writes a sparsity schedule (sparsifiers/sparsity_builder.h); Module.apply_sparsity "
                              "checks and applies it.")
      .def(py::init<>())
      .def(
          "__getitem__", [](SparsityBuilder& b, const std::string& name) { return b[name]; }, py::keep_alive<0, 1>(),
          "A rule for the parameter named exactly `name` (\"fc1.weight\").")
      .def("regex", &SparsityBuilder::regex, py::arg("pattern"), py::keep_alive<0, 1>(),
           "A rule for every parameter whose whole name matches `pattern` (RE2).")
      .def("output", &SparsityBuilder::output, py::arg("module"), py::keep_alive<0, 1>(),
           "A rule for the outputs of the module named exactly `module`.")
      .def("output_regex", &SparsityBuilder::output_regex, py::arg("pattern"), py::keep_alive<0, 1>());

  m.def(
      "layer_densities",
      [](const std::vector<std::pair<std::string, Shape>>& shapes, double density, const std::string& distribution,
         const std::set<std::string>& dense, const std::map<std::string, double>& overrides) {
        std::vector<LayerShape> layers;
        for (const auto& [name, shape] : shapes) layers.push_back({name, shape});
        DensityOptions o;
        o.distribution = parse_density_distribution(distribution);
        o.density = density;
        o.dense = dense;
        o.overrides = overrides;
        std::vector<std::pair<std::string, double>> out;
        for (const LayerDensity& l : layer_densities(layers, o)) out.emplace_back(l.name, l.density);
        return out;
      },
      py::arg("shapes"), py::arg("density"), py::arg("distribution") = "erk",
      py::arg("dense") = std::set<std::string>{}, py::arg("overrides") = std::map<std::string, double>{},
      "Each layer's density when `density` (the overall fraction of stored weights) is split over the layers by "
      "`distribution`: uniform, er (Erdos-Renyi) or erk (ER-Kernel), as the trainer's sparsity.distribution "
      "(optim/density.h). shapes: a list of (name, shape); dense: names kept dense; overrides: name -> a fixed "
      "density. Returns a list of (name, density) in the same order; layers that would pass 1 are made dense and "
      "the rest share what is left.");
}

}  // namespace coppice::python

// coppice.nn: Module (models/module.h) with its named parameters, state and
// sparsity, the layers of models/layers.h, and the zoo's models by name.
// A Python class may derive from Module: it registers its parameters and
// submodules by name and defines forward(self, x), which the library calls
// (taking the GIL for it) wherever it calls a module's forward.
//
// Modules are held by shared_ptr on both sides. A module written in Python
// lives in its Python object, so a parent that holds one (Sequential,
// register_module) keeps that object alive too.
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/layers.h"
#include "models/module.h"
#include "models/zoo.h"
#include "python/bindings.h"
#include "sparse/formats.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/sparsity_builder.h"
#include "tensor/error.h"
#include "tensor/generator.h"

namespace coppice::python {
namespace {

// The trampoline of modules written in Python: forward goes to the Python
// method; registration, protected in C++, is public to them.
class PyModule : public Module {
 public:
  using Module::Module;

  Variable forward(const Variable& x) override {
    py::gil_scoped_acquire gil;
    const py::function f = py::get_override(static_cast<const Module*>(this), "forward");
    COPPICE_CHECK(f, type_name(), ": a Module written in Python needs a method forward(self, x)");
    const std::string who = str_cat("module ", type_name(), ".forward");
    try {
      // A copy, not a reference: the Python code may keep its argument.
      return variable_returned(f(py::cast(x, py::return_value_policy::copy)), who);
    } catch (py::error_already_set& e) { fail_from_python(who, e); }
  }

  void add_parameter(const std::string& name, Variable value) { register_parameter(name, std::move(value)); }
  void add_buffer(const std::string& name, Tensor value) { register_buffer(name, std::move(value)); }
  void add_module(const std::string& name, ModulePtr module) { register_module(name, std::move(module)); }
};

PyModule& written_in_python(Module& m, const char* what) {
  auto* p = dynamic_cast<PyModule*>(&m);
  COPPICE_CHECK(p != nullptr, m.type_name(), ".", what, ": only a Module written in Python registers its own");
  return *p;
}

LayerOptions layer_options(const std::string& dtype, const std::string& device) {
  LayerOptions o;
  COPPICE_CHECK(dtype_from_name(dtype, &o.dtype), "layer: unknown dtype '", dtype, "'");
  o.device = Device::parse(device);
  return o;
}

// Runs `make(gen)` with a generator seeded by `seed`, or the default one (coppice.manual_seed) without.
template <typename M, typename F>
std::shared_ptr<M> seeded(const std::optional<uint64_t>& seed, F make) {
  if (!seed) return make(default_generator());
  Generator gen(*seed);
  return make(gen);
}

int64_t square_of(const py::object& o, const char* what) {
  if (py::isinstance<py::int_>(o)) return o.cast<int64_t>();
  const std::vector<int64_t> v = o.cast<std::vector<int64_t>>();
  COPPICE_CHECK(v.size() == 2 && v[0] == v[1], what, ": the layer takes square sizes (an int, or two equal ints)");
  return v[0];
}

// A module's submodules with their dotted names, depth first (Module::named_modules' order),
// as the shared_ptrs that Python holds them by.
void collect_modules(const Module& m, const std::string& prefix, py::list& out) {
  for (const auto& [name, child] : m.children()) {
    const std::string full = prefix.empty() ? name : str_cat(prefix, ".", name);
    out.append(py::make_tuple(full, child));
    collect_modules(*child, full, out);
  }
}

ModulePtr submodule_ptr(const Module& m, const std::string& dotted) {
  const Module* at = &m;
  ModulePtr found;
  size_t start = 0;
  while (start <= dotted.size()) {
    const size_t dot = dotted.find('.', start);
    const std::string part = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    found = nullptr;
    for (const auto& [name, child] : at->children()) {
      if (name == part) found = child;
    }
    COPPICE_CHECK(found != nullptr, m.type_name(), ": no submodule '", dotted, "'");
    at = found.get();
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return found;
}

ModelOption model_option(const py::handle& v, const std::string& name) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  // A list of sizes, as the zoo reads it ("784,300,100,10").
  if (py::isinstance<py::sequence>(v)) return str_join(v.cast<std::vector<int64_t>>(), ",");
  fail("make_model: option '", name, "' must be a bool, int, float, string or list of ints");
}

// A tensor's format with the options that make it (for load_state_dict's
// format check): "dense", "csr", "bsr 4x4", "nm 2:4".
std::string format_with_options(const Tensor& t) {
  const std::string format(t.format());
  if (const auto block = block_shape_of(t)) return str_cat(format, " ", block->first, "x", block->second);
  const FormatSpec* spec = find_format(format);
  if (spec != nullptr && spec->options == FormatOptionKind::kNm && spec->options_of) {
    const FormatOptions o = spec->options_of(t);
    return str_cat(format, " ", o.n, ":", o.m);
  }
  return format;
}

// Python's load_state_dict keeps a sparse parameter's format: Module::load_state_dict
// (models/module.h) takes the loaded tensor's format, so a dense array given for a
// BSR weight would turn it dense. Refused before anything changes.
void check_formats_kept(const Module& m, const NamedTensors& state) {
  std::map<std::string, Tensor> params;
  for (const auto& [name, v] : m.named_parameters()) params[name] = v.value();
  for (const auto& [name, t] : state) {
    auto it = params.find(name);
    if (it == params.end() || !it->second.is_sparse() || !t.defined()) continue;
    const std::string own = format_with_options(it->second), given = format_with_options(t);
    COPPICE_CHECK(own == given, "load_state_dict: state['", name, "'] is ", given, ", the module's parameter '", name,
                  "' is ", own, ": loading does not change a sparse parameter's format; give a ", own,
                  " tensor (e.g. value.to_format(...), or coppice.sparse_from_mask with the parameter's pattern)");
  }
}

void bind_module(py::module_& nn) {
  py::class_<Module, PyModule, ModulePtr>(nn, "Module",
                                          "The base of every layer and model (models/module.h). A Python subclass "
                                          "calls super().__init__(), registers parameters and submodules by name, "
                                          "and defines forward(self, x).")
      .def(py::init<std::string>(), py::arg("type_name") = "Module")
      .def(
          "__call__",
          [](Module& m, const py::object& x) {
            const Variable v = variable_of(x, str_cat(m.type_name(), "(x): x"));
            py::gil_scoped_release release;
            return m.forward(v);
          },
          py::arg("x"), "The forward pass (an array or Tensor input is a constant).")
      .def_property_readonly("type_name", &Module::type_name)
      .def("named_parameters",
           [](const Module& m) {
             py::list out;
             for (const auto& [name, p] : m.named_parameters()) out.append(py::make_tuple(name, p));
             return out;
           })
      .def("parameters", &Module::parameters)
      .def(
          "parameter", [](const Module& m, const std::string& name) { return m.parameter(name); }, py::arg("name"),
          "The parameter's current Variable: the same object while the parameter is (a mask update changes it in "
          "place; apply_sparsity, set_parameter and loading a sparse value replace it).")
      .def(
          "set_parameter",
          [](Module& m, const std::string& name, const py::object& value) {
            m.set_parameter(name, variable_of(value, str_cat("set_parameter: value of '", name, "'")));
          },
          py::arg("name"), py::arg("value"), "Replaces the parameter (any format; the shape must match).")
      .def("named_buffers",
           [](const Module& m) {
             py::list out;
             for (const auto& [name, b] : m.named_buffers()) out.append(py::make_tuple(name, b));
             return out;
           })
      .def(
          "buffer", [](const Module& m, const std::string& name) { return m.buffer(name); }, py::arg("name"))
      .def("children",
           [](const Module& m) {
             py::list out;
             for (const auto& [name, child] : m.children()) out.append(py::make_tuple(name, child));
             return out;
           })
      .def("named_modules",
           [](const Module& m) {
             py::list out;
             collect_modules(m, "", out);
             return out;
           })
      .def("submodule", &submodule_ptr, py::arg("name"))
      .def(
          "train", [](Module& m, bool on) { m.train(on); }, py::arg("on") = true)
      .def("eval", &Module::eval)
      .def_property_readonly("training", &Module::is_training)
      .def("state_dict",
           [](const Module& m) {
             py::dict out;
             for (const auto& [name, t] : m.state_dict()) out[py::str(name)] = t;
             return out;
           })
      .def(
          "load_state_dict",
          [](Module& m, const py::dict& state, bool strict) {
            NamedTensors tensors;
            for (const auto& [key, t] : state) {
              COPPICE_CHECK(py::isinstance<py::str>(key), "load_state_dict: a key of the state is ", type_name_of(key),
                            " ", py::repr(key).cast<std::string>(), ", not a parameter or buffer name");
              const std::string name = key.cast<std::string>();
              tensors.emplace_back(name, tensor_of(py::reinterpret_borrow<py::object>(t),
                                                   str_cat("load_state_dict: state['", name, "']")));
            }
            check_formats_kept(m, tensors);
            m.load_state_dict(tensors, strict);
          },
          py::arg("state"), py::arg("strict") = true,
          "Loads a dict of name to tensor (any format; arrays too). strict: the names must be exactly the module's. "
          "Shapes must match; values are converted to the parameter's dtype and device and copied. A sparse "
          "parameter keeps its format: a value of another format or other options (a dense array for a BSR weight, "
          "BSR of another block shape, n:m of another n or m) is refused with an error naming the key and both "
          "formats, before anything changes (there is no conversion rule: the C++ Module::load_state_dict would "
          "take the given format). A value of the same format replaces the parameter with the value's pattern. A "
          "dense parameter takes a value of any format (a sparse value makes it sparse, as in C++).")
      .def(
          "to", [](Module& m, const std::string& device) { m.to(Device::parse(device)); }, py::arg("device"))
      .def("zero_grad", &Module::zero_grad)
      .def("num_parameters", &Module::num_parameters)
      .def(
          "apply_sparsity",
          [](Module& m, const SparsityBuilder& b, uint64_t seed) {
            SparsifyContext ctx;
            ctx.seed = seed;
            const AppliedSchedule* applied = nullptr;
            {
              py::gil_scoped_release release;
              applied = &m.apply_sparsity(b.schedule(), ctx);
            }
            py::dict density;
            for (const ScheduledParameter& p : applied->parameters()) {
              if (!p.rule) continue;
              const Tensor& v = p.value.value();
              density[py::str(p.name)] = static_cast<double>(nnz(v)) / static_cast<double>(v.numel());
            }
            return density;
          },
          py::arg("schedule"), py::arg("seed") = 0,
          "Checks the schedule against this module, then sparsifies the parameters it selects into their formats "
          "(new leaves: make the optimizer afterwards) and attaches its output rules; returns each selected "
          "parameter's density.")
      .def(
          "register_parameter",
          [](Module& m, const std::string& name, const py::object& value, bool requires_grad) {
            Variable v = py::isinstance<Variable>(value)
                             ? value.cast<Variable>()
                             : Variable(tensor_of(value, str_cat("register_parameter: value of '", name, "'")),
                                        requires_grad, name);
            written_in_python(m, "register_parameter").add_parameter(name, std::move(v));
          },
          py::arg("name"), py::arg("value"), py::arg("requires_grad") = true,
          "Adds a parameter (a Variable, or an array made a leaf on its memory); read it in forward with "
          "self.parameter(name), which sees replacements.")
      .def(
          "register_buffer",
          [](Module& m, const std::string& name, const py::object& value) {
            written_in_python(m, "register_buffer")
                .add_buffer(name, tensor_of(value, str_cat("register_buffer: value of '", name, "'")));
          },
          py::arg("name"), py::arg("value"))
      .def(
          "register_module",
          [](Module& m, const std::string& name, const ModulePtr& child) {
            written_in_python(m, "register_module").add_module(name, child);
            return child;
          },
          py::arg("name"), py::arg("module"), py::keep_alive<1, 3>(), "Adds a submodule; returns it.")
      .def("__repr__", [](const Module& m) {
        return str_cat("coppice.nn.", m.type_name(), "(", m.named_parameters().size(), " parameters)");
      });
}

void bind_layers(py::module_& nn) {
  py::class_<Linear, Module, std::shared_ptr<Linear>>(nn, "Linear", "y = x W^T + b; W [out, in] in any format.")
      .def(py::init([](int64_t in, int64_t out, bool bias, const std::string& dtype, const std::string& device,
                       std::optional<uint64_t> seed) {
             const LayerOptions o = layer_options(dtype, device);
             return seeded<Linear>(seed, [&](Generator& g) { return std::make_shared<Linear>(in, out, bias, o, g); });
           }),
           py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true, py::arg("dtype") = "f32",
           py::arg("device") = "cpu", py::arg("seed") = py::none())
      .def_property_readonly("weight", [](const Linear& l) { return l.weight(); })
      .def_property_readonly("bias",
                             [](const Linear& l) -> py::object {
                               return l.bias().defined() ? py::cast(l.bias()) : py::object(py::none());
                             })
      .def_property_readonly("in_features", &Linear::in_features)
      .def_property_readonly("out_features", &Linear::out_features)
      .def(
          "forward_relu",
          [](Linear& l, const py::object& x) {
            const Variable v = variable_of(x, "Linear.forward_relu: x");
            py::gil_scoped_release release;
            return l.forward_relu(v);
          },
          py::arg("x"), "relu(self(x)) as one op where no output rule is attached.");

  py::class_<Conv2d, Module, std::shared_ptr<Conv2d>>(nn, "Conv2d", "x [N, C, H, W]; weight [out, in, k, k].")
      .def(py::init([](int64_t in, int64_t out, const py::object& kernel, const py::object& stride,
                       const py::object& padding, const py::object& dilation, bool bias, const std::string& dtype,
                       const std::string& device, std::optional<uint64_t> seed) {
             Conv2dOptions c;
             const int64_t s = square_of(stride, "Conv2d: stride"), p = square_of(padding, "Conv2d: padding");
             const int64_t d = square_of(dilation, "Conv2d: dilation");
             c.stride = {s, s};
             c.padding = {p, p};
             c.dilation = {d, d};
             const int64_t k = square_of(kernel, "Conv2d: kernel_size");
             const LayerOptions o = layer_options(dtype, device);
             return seeded<Conv2d>(seed,
                                   [&](Generator& g) { return std::make_shared<Conv2d>(in, out, k, c, bias, o, g); });
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
           py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("bias") = true, py::arg("dtype") = "f32",
           py::arg("device") = "cpu", py::arg("seed") = py::none())
      .def_property_readonly("weight", [](const Conv2d& c) { return c.weight(); });

  py::class_<LayerNorm, Module, std::shared_ptr<LayerNorm>>(nn, "LayerNorm")
      .def(py::init([](const py::object& shape, double eps, bool affine, const std::string& dtype,
                       const std::string& device) {
             const Shape s = py::isinstance<py::int_>(shape) ? Shape{shape.cast<int64_t>()}
                                                             : Shape(shape.cast<std::vector<int64_t>>());
             return std::make_shared<LayerNorm>(s, eps, affine, layer_options(dtype, device));
           }),
           py::arg("normalized_shape"), py::arg("eps") = 1e-5, py::arg("elementwise_affine") = true,
           py::arg("dtype") = "f32", py::arg("device") = "cpu");
  py::class_<BatchNorm, Module, std::shared_ptr<BatchNorm>>(nn, "BatchNorm");
  py::class_<BatchNorm1d, BatchNorm, std::shared_ptr<BatchNorm1d>>(nn, "BatchNorm1d")
      .def(py::init([](int64_t n, double eps, double momentum, bool affine, const std::string& dtype,
                       const std::string& device) {
             return std::make_shared<BatchNorm1d>(n, eps, momentum, affine, layer_options(dtype, device));
           }),
           py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.1, py::arg("affine") = true,
           py::arg("dtype") = "f32", py::arg("device") = "cpu");
  py::class_<BatchNorm2d, BatchNorm, std::shared_ptr<BatchNorm2d>>(nn, "BatchNorm2d")
      .def(py::init([](int64_t n, double eps, double momentum, bool affine, const std::string& dtype,
                       const std::string& device) {
             return std::make_shared<BatchNorm2d>(n, eps, momentum, affine, layer_options(dtype, device));
           }),
           py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.1, py::arg("affine") = true,
           py::arg("dtype") = "f32", py::arg("device") = "cpu");
  py::class_<Dropout, Module, std::shared_ptr<Dropout>>(nn, "Dropout")
      .def(py::init<double, uint64_t>(), py::arg("p") = 0.5, py::arg("seed") = 0);
  py::class_<Embedding, Module, std::shared_ptr<Embedding>>(nn, "Embedding")
      .def(py::init([](int64_t num, int64_t dim, const std::string& dtype, const std::string& device,
                       std::optional<uint64_t> seed, double init_std) {
             const LayerOptions o = layer_options(dtype, device);
             return seeded<Embedding>(
                 seed, [&](Generator& g) { return std::make_shared<Embedding>(num, dim, o, g, init_std); });
           }),
           py::arg("num_embeddings"), py::arg("embedding_dim"), py::arg("dtype") = "f32", py::arg("device") = "cpu",
           py::arg("seed") = py::none(), py::arg("init_std") = 1.0)
      .def_property_readonly("weight", [](const Embedding& e) { return e.weight(); });
  py::class_<ReLU, Module, std::shared_ptr<ReLU>>(nn, "ReLU").def(py::init<>());
  py::class_<GELU, Module, std::shared_ptr<GELU>>(nn, "GELU")
      .def(py::init([](const std::string& approximate) {
             return std::make_shared<GELU>(gelu_form_of(approximate, "nn.GELU"));
           }),
           py::arg("approximate") = "none",
           "GELU as PyTorch's nn.GELU: approximate 'none' (gelu, the exact erf form) or 'tanh' (gelu_tanh, GPT-2's "
           "approximation).")
      .def_property_readonly("approximate",
                             [](const GELU& g) { return g.form() == GeluForm::kTanh ? "tanh" : "none"; });
  py::class_<MaxPool2d, Module, std::shared_ptr<MaxPool2d>>(nn, "MaxPool2d")
      .def(py::init<int64_t, int64_t>(), py::arg("kernel_size"), py::arg("stride") = 0,
           "Max pooling with a square kernel (stride 0: the kernel).");
  py::class_<Flatten, Module, std::shared_ptr<Flatten>>(nn, "Flatten")
      .def(py::init<int64_t, int64_t>(), py::arg("start_dim") = 1, py::arg("end_dim") = -1);

  // The arguments (the modules, or one list of them) stay alive with the Sequential: keep_alive on the tuple.
  py::class_<Sequential, Module, std::shared_ptr<Sequential>>(nn, "Sequential",
                                                              "Children named \"0\", \"1\", ... run in order.")
      .def(py::init([](const py::args& args) {
             auto s = std::make_shared<Sequential>();
             const bool one_list = args.size() == 1 && !py::isinstance<Module>(args[0]) &&
                                   py::isinstance<py::sequence>(args[0]) && !py::isinstance<py::str>(args[0]);
             const py::sequence modules = one_list ? args[0].cast<py::sequence>() : py::sequence(args);
             for (const py::handle& m : modules) {
               COPPICE_CHECK(py::isinstance<Module>(m), "nn.Sequential: module ", s->size(),
                             " must be a coppice.nn.Module, got ", type_name_of(m));
               s->push_back(m.cast<ModulePtr>());
             }
             return s;
           }),
           py::keep_alive<1, 2>())
      .def(
          "append",
          [](Sequential& s, const ModulePtr& m, const std::string& name) {
            s.push_back(m, name);
            return m;
          },
          py::arg("module"), py::arg("name") = "", py::keep_alive<1, 2>(),
          "Appends under the next index (or `name`); returns the module.")
      .def("__len__", &Sequential::size)
      .def("__getitem__", [](const Sequential& s, int64_t i) {
        const int64_t n = static_cast<int64_t>(s.size());
        COPPICE_CHECK(i >= -n && i < n, "Sequential: index ", i, " out of range for ", n, " modules");
        return s.children()[static_cast<size_t>(i < 0 ? i + n : i)].second;
      });
}

}  // namespace

void bind_nn(py::module_& m) {
  py::module_ nn = m.def_submodule("nn", "Modules and layers (models/).");
  bind_module(nn);
  bind_layers(nn);
  nn.def(
      "make_model",
      [](const std::string& name, const py::kwargs& options) {
        ModelConfig c;
        c.name = name;
        for (const auto& [key, value] : options) {
          const std::string k = key.cast<std::string>();
          c.options[k] = model_option(value, k);
        }
        return make_model(c);
      },
      py::arg("name"),
      "A model of the zoo (models/zoo.h: mlp, lenet5, vit, char_lm, gpt; gcn and sage, whose graph only a job gives) "
      "with its options as keywords "
      "(mlp's sizes as a list).");
  nn.def("model_names", &model_names);
}

}  // namespace coppice::python

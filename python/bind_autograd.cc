// Autograd from Python: coppice.Variable, no_grad, and the differentiable
// functions of autograd/ (autograd.h), each bound to the C++ function of the
// same name; nothing is computed here.
//
// A function given Variables returns a Variable (recording a graph node
// unless grad mode is off); given only Tensors or arrays (no Variable), it
// returns the Tensor the same op gives, with no graph. Arrays and Tensors
// beside a Variable are constants. Python numbers are scalars where the C++
// function has a scalar form (x + 1, x * 0.5, x ** 2).
#include <pybind11/stl.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "python/bindings.h"
#include "tensor/binary_ops.h"
#include "tensor/error.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"
#include "tensor/unary_ops.h"

namespace coppice::python {

// ---- one Python object per Variable (bindings.h) --------------------------------------------
//
// By the variable's identity, the Variable inside the Python object that wraps
// it. An entry is trusted only while pybind11 still has a live Variable object
// registered at that address holding the same variable, so a dead or reused
// entry is never handed out; dead ones are dropped when the table doubles.
// Python calls these with the GIL held.
namespace {

struct VariableObjects {
  std::unordered_map<const void*, const Variable*> by_identity;
  size_t purge_at = 1024;
};

VariableObjects& variable_objects() {
  static VariableObjects* objects = new VariableObjects;  // never destroyed: used until the interpreter ends
  return *objects;
}

// The live object registered at `inside` when it still wraps `v`'s variable (a new reference).
py::handle live_object(const Variable* inside, const Variable& v) {
  const py::detail::type_info* type = py::detail::get_type_info(typeid(Variable));
  if (type == nullptr) return {};
  py::handle h = py::detail::find_registered_python_instance(const_cast<Variable*>(inside), type);
  if (!h) return {};
  if (inside->is_same(v)) return h;
  h.dec_ref();
  return {};
}

}  // namespace

py::handle existing_variable_object(const Variable& v) {
  if (!v.defined()) return {};
  VariableObjects& objects = variable_objects();
  auto it = objects.by_identity.find(v.identity());
  if (it == objects.by_identity.end()) return {};
  if (py::handle h = live_object(it->second, v)) return h;
  objects.by_identity.erase(it);
  return {};
}

void remember_variable_object(const Variable* inside) {
  if (inside == nullptr || !inside->defined()) return;
  VariableObjects& objects = variable_objects();
  auto [it, added] = objects.by_identity.emplace(inside->identity(), inside);
  if (!added && it->second != inside) {
    // Another object wrapping the same variable stays its object while it lives.
    if (py::handle h = live_object(it->second, *inside)) {
      h.dec_ref();
      return;
    }
    it->second = inside;
  }
  if (objects.by_identity.size() < objects.purge_at) return;
  for (auto e = objects.by_identity.begin(); e != objects.by_identity.end();) {
    // A dead entry's Variable may be freed: only the address is looked up until pybind11 vouches for it.
    const py::detail::type_info* type = py::detail::get_type_info(typeid(Variable));
    py::handle h = type != nullptr ? py::detail::find_registered_python_instance(const_cast<Variable*>(e->second), type)
                                   : py::handle();
    const bool alive = h && e->second->identity() == e->first;
    if (h) h.dec_ref();
    e = alive ? std::next(e) : objects.by_identity.erase(e);
  }
  objects.purge_at = std::max<size_t>(1024, 2 * objects.by_identity.size());
}

namespace {

bool is_scalar(const py::handle& o) {
  return py::isinstance<py::float_>(o) || (py::isinstance<py::int_>(o) && !py::isinstance<py::bool_>(o));
}

// The operands of one call, made Variables; the result is a Variable when any
// operand was one, else its value.
class Operands {
 public:
  Variable operator()(const py::object& o, const char* what = "an operand") {
    if (py::isinstance<Variable>(o)) {
      any_variable_ = true;
      return o.cast<Variable>();
    }
    return Variable(tensor_of(o, what));
  }
  std::optional<Variable> optional(const py::object& o) {
    if (o.is_none()) return std::nullopt;
    return (*this)(o, "an optional operand");
  }
  py::object result(const Variable& v) const { return any_variable_ ? py::cast(v) : py::cast(v.value()); }

 private:
  bool any_variable_ = false;
};

Variable or_undefined(const std::optional<Variable>& v) { return v ? *v : Variable(); }

// A unary function f(Variable) -> Variable.
template <typename F>
auto unary(F f) {
  return [f](const py::object& x) {
    Operands in;
    const Variable v = in(x, "argument x");
    return in.result(f(v));
  };
}

// A binary function: (Variable, Variable), and (Variable, scalar) / (scalar, Variable) where given.
template <typename VV, typename VS, typename SV>
py::object binary(const py::object& a, const py::object& b, VV vv, VS vs, SV sv) {
  Operands in;
  if (is_scalar(b) && !is_scalar(a)) {
    const Variable x = in(a, "argument a");
    return in.result(vs(x, b.cast<double>()));
  }
  if (is_scalar(a) && !is_scalar(b)) {
    const Variable y = in(b, "argument b");
    return in.result(sv(a.cast<double>(), y));
  }
  const Variable x = in(a, "argument a"), y = in(b, "argument b");
  return in.result(vv(x, y));
}

// Registers the binary op Op of tensor/binary_ops.h under its name, with its
// docstring; f(a, b) is its C++ function, called with a number where
// Op::kScalars allows one (elsewhere a number is an error).
template <typename Op, typename F>
void def_binary(py::module_& m, F f) {
  using binary_ops::Scalars;
  auto vs = [f](const Variable& a, double b) -> Variable {
    if constexpr (Op::kScalars == Scalars::kNone) {
      fail(Op::kName, ": an operand is a number; pass an array");
    } else {
      return f(a, b);
    }
  };
  auto sv = [f](double a, const Variable& b) -> Variable {
    if constexpr (Op::kScalars != Scalars::kEitherSide) {
      fail(Op::kName, ": an operand is a number; pass an array");
    } else {
      return f(a, b);
    }
  };
  m.def(
      Op::kName,
      [f, vs, sv](const py::object& a, const py::object& b) {
        return binary(
            a, b, [f](const Variable& x, const Variable& y) { return f(x, y); }, vs, sv);
      },
      py::arg("a"), py::arg("b"), Op::kDoc);
}

// A dim list from an int or a sequence of ints; None: all dims (empty).
std::vector<int64_t> dims_of(const py::object& o) {
  if (o.is_none()) return {};
  if (py::isinstance<py::int_>(o)) return {o.cast<int64_t>()};
  return o.cast<std::vector<int64_t>>();
}

// A pair (stride, padding, kernel) from an int or a sequence of two.
std::vector<int64_t> pair_of(const py::object& o, const char* what) {
  if (py::isinstance<py::int_>(o)) return {o.cast<int64_t>(), o.cast<int64_t>()};
  std::vector<int64_t> v = o.cast<std::vector<int64_t>>();
  COPPICE_CHECK(v.size() == 2, what, " must be an int or two ints, got ", v.size(), " values");
  return v;
}

// A shape from reshape(2, 3) or reshape((2, 3)).
Shape shape_of_args(const py::args& args) {
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) return args[0].cast<std::vector<int64_t>>();
  return args.cast<std::vector<int64_t>>();
}

Reduction parse_reduction(const std::string& r, const char* who) {
  if (r == "mean") return Reduction::kMean;
  if (r == "sum") return Reduction::kSum;
  if (r == "none") return Reduction::kNone;
  fail(who, ": reduction must be mean, sum or none, got '", r, "'");
}

Tensor target_of(const py::object& o, const char* what) {
  if (py::isinstance<Variable>(o)) return o.cast<Variable>().value();
  return tensor_of(o, what);
}

std::string describe_variable(const Variable& v) {
  if (!v.defined()) return "coppice.Variable(undefined)";
  const Tensor& t = v.value();
  return str_cat("coppice.Variable(", t.format(), ", ", shape_to_string(t.shape()), ", ", dtype_name(t.dtype()), ", ",
                 t.device().to_string(), v.requires_grad() ? ", requires_grad=True" : "",
                 v.grad_fn() != nullptr ? str_cat(", grad_fn=", v.grad_fn()->name()) : "",
                 v.name().empty() ? "" : str_cat(", name='", v.name(), "'"), ")");
}

// `with coppice.no_grad():` (NoGradGuard's scope, as a Python context manager).
struct NoGrad {
  bool previous = true;
};

void bind_variable(py::module_& m) {
  py::class_<Variable> v(m, "Variable",
                         "A tensor value with what reverse-mode autograd needs (autograd/variable.h): a leaf made "
                         "here, or the result of a differentiable function.");
  v.def(py::init([](const py::object& data, bool requires_grad, const std::string& name) {
          return Variable(tensor_of(data, "coppice.Variable: data"), requires_grad, name);
        }),
        py::arg("data"), py::arg("requires_grad") = false, py::arg("name") = "",
        "A leaf on the memory of `data` (a coppice.Tensor, or an array: no copy); requires_grad needs a "
        "floating-point value.")
      .def_property_readonly(
          "data", [](const Variable& x) { return x.value(); }, "The value, a coppice.Tensor (the same memory).")
      .def_property_readonly(
          "tensor", [](const Variable& x) { return x.value(); }, "The value, a coppice.Tensor (the same memory).")
      .def_property(
          "grad",
          [](const Variable& x) -> py::object {
            return x.grad().defined() ? py::cast(x.grad()) : py::object(py::none());
          },
          [](const Variable& x, const py::object& g) {
            x.set_grad(g.is_none() ? Tensor() : tensor_of(g, "coppice.Variable.grad"));
          },
          "The accumulated gradient (a Tensor in the value's format and pattern), None before a backward pass "
          "reaches this leaf; assign None to clear it.")
      .def_property("requires_grad", &Variable::requires_grad, &Variable::set_requires_grad)
      .def_property("name", &Variable::name, &Variable::set_name)
      .def_property_readonly("is_leaf", &Variable::is_leaf)
      .def_property_readonly("grad_fn",
                             [](const Variable& x) -> py::object {
                               return x.grad_fn() != nullptr ? py::cast(x.grad_fn()->name()) : py::object(py::none());
                             })
      .def_property_readonly("shape", [](const Variable& x) { return std::vector<int64_t>(x.shape()); })
      .def_property_readonly("dtype", [](const Variable& x) { return std::string(dtype_name(x.dtype())); })
      .def_property_readonly("device", [](const Variable& x) { return x.device().to_string(); })
      .def_property_readonly("format", [](const Variable& x) { return std::string(x.value().format()); })
      .def("dim", &Variable::dim)
      .def("numel", &Variable::numel)
      .def("item", &Variable::item)
      .def(
          "numpy", [](const Variable& x) { return to_numpy(x.value()); },
          "An array on the value's memory (dense CPU values).")
      .def(
          "__array__", [](const Variable& x, const py::object&) { return to_numpy(x.value()); },
          py::arg("dtype") = py::none())
      .def(
          "backward",
          [](const Variable& x, const py::object& grad, bool retain_graph) {
            const Tensor g = grad.is_none() ? Tensor() : tensor_of(grad, "coppice.Variable.backward: grad");
            py::gil_scoped_release release;
            x.backward(g, retain_graph);
          },
          py::arg("grad") = py::none(), py::arg("retain_graph") = false,
          "Accumulates d(this)/d(leaf) into every leaf that requires grad (grad: ones for a one-element value).")
      .def("detach", &Variable::detach, "A new leaf on the same value, cut off from the graph.")
      .def("zero_grad", &Variable::zero_grad)
      .def(
          "to",
          [](const Variable& x, const std::string& dtype) {
            DType d;
            COPPICE_CHECK(dtype_from_name(dtype, &d), "Variable.to: unknown dtype '", dtype, "'");
            return to_dtype(x, d);
          },
          py::arg("dtype"), "Converted to a floating dtype (differentiable).")
      .def("__repr__", &describe_variable);

  // Operators: a number on either side is a scalar; arrays and Tensors are constants.
  auto add_vv = [](const Variable& a, const Variable& b) { return a + b; };
  auto add_vs = [](const Variable& a, double b) { return a + b; };
  auto add_sv = [](double a, const Variable& b) { return a + b; };
  auto sub_vv = [](const Variable& a, const Variable& b) { return a - b; };
  auto sub_vs = [](const Variable& a, double b) { return a - b; };
  auto sub_sv = [](double a, const Variable& b) { return a - b; };
  auto mul_vv = [](const Variable& a, const Variable& b) { return a * b; };
  auto mul_vs = [](const Variable& a, double b) { return a * b; };
  auto mul_sv = [](double a, const Variable& b) { return a * b; };
  auto div_vv = [](const Variable& a, const Variable& b) { return a / b; };
  auto div_vs = [](const Variable& a, double b) { return a / b; };
  auto div_sv = [](double a, const Variable& b) { return a / b; };
  auto mm = [](const Variable& a, const Variable& b) { return matmul(a, b); };
  auto no_scalar_vs = [](const Variable&, double) -> Variable { fail(op::kMatmul, ": an operand is a number"); };
  auto no_scalar_sv = [](double, const Variable&) -> Variable { fail(op::kMatmul, ": an operand is a number"); };
  v.def("__add__", [=](const py::object& a, const py::object& b) { return binary(a, b, add_vv, add_vs, add_sv); })
      .def("__radd__", [=](const py::object& a, const py::object& b) { return binary(b, a, add_vv, add_vs, add_sv); })
      .def("__sub__", [=](const py::object& a, const py::object& b) { return binary(a, b, sub_vv, sub_vs, sub_sv); })
      .def("__rsub__", [=](const py::object& a, const py::object& b) { return binary(b, a, sub_vv, sub_vs, sub_sv); })
      .def("__mul__", [=](const py::object& a, const py::object& b) { return binary(a, b, mul_vv, mul_vs, mul_sv); })
      .def("__rmul__", [=](const py::object& a, const py::object& b) { return binary(b, a, mul_vv, mul_vs, mul_sv); })
      .def("__truediv__",
           [=](const py::object& a, const py::object& b) { return binary(a, b, div_vv, div_vs, div_sv); })
      .def("__rtruediv__",
           [=](const py::object& a, const py::object& b) { return binary(b, a, div_vv, div_vs, div_sv); })
      .def("__matmul__",
           [=](const py::object& a, const py::object& b) { return binary(a, b, mm, no_scalar_vs, no_scalar_sv); })
      .def("__rmatmul__",
           [=](const py::object& a, const py::object& b) { return binary(b, a, mm, no_scalar_vs, no_scalar_sv); })
      .def("__neg__", [](const Variable& x) { return -x; })
      .def("__pow__", [](const Variable& x, double e) { return pow(x, e); });
  // NumPy defers to these operators (array + Variable calls Variable.__radd__) instead of looping over the array.
  v.attr("__array_ufunc__") = py::none();

  // Shape methods, as the functions below.
  v.def("reshape", [](const Variable& x, const py::args& shape) { return reshape(x, shape_of_args(shape)); })
      .def("view", [](const Variable& x, const py::args& shape) { return view(x, shape_of_args(shape)); })
      .def(
          "flatten", [](const Variable& x, int64_t start, int64_t end) { return flatten(x, start, end); },
          py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      .def(op::kTranspose, [](const Variable& x, int64_t d0, int64_t d1) { return transpose(x, d0, d1); })
      .def("t", [](const Variable& x) { return t(x); })
      .def("permute", [](const Variable& x, const py::args& dims) { return permute(x, shape_of_args(dims)); })
      .def("unsqueeze", [](const Variable& x, int64_t dim) { return unsqueeze(x, dim); })
      .def(
          op::kSum,
          [](const Variable& x, const py::object& dim, bool keepdim) {
            return dim.is_none() ? sum(x) : sum(x, dims_of(dim), keepdim);
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def(
          "mean",
          [](const Variable& x, const py::object& dim, bool keepdim) {
            return dim.is_none() ? mean(x) : mean(x, dims_of(dim), keepdim);
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def(unary_ops::Relu::kName, [](const Variable& x) { return relu(x); })
      .def("to_dense", [](const Variable& x) { return to_dense(x); });

  py::class_<NoGrad>(m, "no_grad",
                     "with coppice.no_grad(): ops record no graph on this thread, and their results do not require "
                     "grad (autograd/no_grad.h). Nests.")
      .def(py::init<>())
      .def("__enter__",
           [](NoGrad& g) {
             g.previous = GradMode::is_enabled();
             GradMode::set_enabled(false);
           })
      .def("__exit__", [](NoGrad& g, const py::args&) {
        GradMode::set_enabled(g.previous);
        return false;
      });
  m.def("is_grad_enabled", &GradMode::is_enabled);
  m.def("set_grad_enabled", &GradMode::set_enabled, py::arg("enabled"));
}

void bind_functions(py::module_& m) {
  // ---- elementwise (autograd/functions/elementwise.h) ----
  // Every differentiable binary op of tensor/binary_ops.h, its docstring and
  // scalar forms the table's.
#define COPPICE_BIND_BINARY(fn, Op) \
  def_binary<binary_ops::Op>(m, [](const auto& a, const auto& b) { return coppice::fn(a, b); });
  COPPICE_DIFFERENTIABLE_BINARY_OPS(COPPICE_BIND_BINARY)
#undef COPPICE_BIND_BINARY

  // Every unary op of tensor/unary_ops.h, its docstring the table's.
#define COPPICE_BIND_UNARY(fn, Op)                                                                   \
  m.def(unary_ops::Op::kName, unary([](const Variable& x) { return coppice::fn(x); }), py::arg("x"), \
        unary_ops::Op::kDoc);
  COPPICE_UNARY_OPS(COPPICE_BIND_UNARY)
#undef COPPICE_BIND_UNARY
  m.def(
      unary_ops::Clamp::kName,
      [](const py::object& x, std::optional<double> lo, std::optional<double> hi) {
        Operands in;
        const Variable v = in(x, "argument x");
        return in.result(clamp(v, lo, hi));
      },
      py::arg("x"), py::arg("min") = py::none(), py::arg("max") = py::none());
  m.def(
      op::kWhere,
      [](const py::object& cond, const py::object& a, const py::object& b) {
        Operands in;
        const Variable x = in(a, "argument a"), y = in(b, "argument b");
        return in.result(where(target_of(cond, "where: cond").to(DType::kBool), x, y));
      },
      py::arg("cond"), py::arg("a"), py::arg("b"), "a where cond holds, else b (cond: a bool array or Tensor).");

  // ---- linear algebra (linalg.h) ----
  m.def(
      op::kMatmul,
      [](const py::object& a, const py::object& b) {
        Operands in;
        const Variable x = in(a, "argument a"), y = in(b, "argument b");
        return in.result(matmul(x, y));
      },
      py::arg("a"), py::arg("b"), "NumPy's matmul; either operand may be sparse (any format).");
  m.def(
      "bmm",
      [](const py::object& a, const py::object& b) {
        Operands in;
        const Variable x = in(a, "argument a"), y = in(b, "argument b");
        return in.result(bmm(x, y));
      },
      py::arg("a"), py::arg("b"),
      "[b, m, k] x [b, k, n]; either may be a sparse 3-D COO (one SpMM over its block-diagonal form).");
  m.def(
      "einsum",
      [](const std::string& spec, const py::args& operands) {
        Operands in;
        std::vector<Variable> vs;
        for (size_t i = 0; i < operands.size(); ++i) vs.push_back(in(operands[i], "an einsum operand"));
        return in.result(einsum(spec, vs));
      },
      py::arg("spec"),
      "NumPy's einsum over operands of any mix of formats, differentiable: each pairwise contraction runs "
      "on dense GEMM, SpMM, SDDMM-backed products, SpGEMM or an elementwise product (einsum_plan shows "
      "which); two sparse operands without a route fall back to dense loudly.");
  m.def(
      "einsum_plan",
      [](const std::string& spec, const py::args& operands) {
        Operands in;
        std::vector<Tensor> ts;
        for (size_t i = 0; i < operands.size(); ++i) ts.push_back(in(operands[i], "an einsum operand").value());
        return einsum_plan_text(spec, ts);
      },
      py::arg("spec"), "The steps einsum(spec, *operands) would run, one line each.");
  m.def(
      "rearrange",
      [](const py::object& x, const std::string& pattern, const py::kwargs& sizes) {
        Operands in;
        const Variable v = in(x, "argument x");
        std::map<std::string, int64_t> axis_sizes;
        for (const auto& [name, size] : sizes) axis_sizes[name.cast<std::string>()] = size.cast<int64_t>();
        return in.result(rearrange(v, pattern, axis_sizes));
      },
      py::arg("x"), py::arg("pattern"),
      "einops' rearrange (\"b (h d) -> b h d\", h=8; \"b d -> b n d\", n=4; Scorch's \"bd->bnd\"), for dense "
      "and sparse operands (a sparse result is COO, or CSR when 2-D), differentiable.");
  m.def(
      op::kLinear,
      [](const py::object& x, const py::object& weight, const py::object& bias) {
        Operands in;
        const Variable a = in(x, "argument x"), w = in(weight, "argument weight");
        const Variable b = or_undefined(in.optional(bias));
        return in.result(linear(a, w, b));
      },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(),
      "x [..., in] times weight [out, in] transposed, plus bias [out]; the weight may be sparse.");
  m.def(
      op::kLinearRelu,
      [](const py::object& x, const py::object& weight, const py::object& bias) {
        Operands in;
        const Variable a = in(x, "argument x"), w = in(weight, "argument weight");
        const Variable b = or_undefined(in.optional(bias));
        return in.result(linear_relu(a, w, b));
      },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(), "relu(linear(x, weight, bias)) as one op.");
  m.def(
      "gelu_mlp",
      [](const py::object& x, const py::object& w1, const py::object& b1, const py::object& w2, const py::object& b2,
         const std::string& approximate) {
        const GeluForm form = gelu_form_of(approximate, "gelu_mlp");
        Operands in;
        const Variable a = in(x, "argument x"), first = in(w1, "argument w1"), second = in(w2, "argument w2");
        const Variable bias1 = or_undefined(in.optional(b1)), bias2 = or_undefined(in.optional(b2));
        return in.result(gelu_mlp(a, first, bias1, second, bias2, form));
      },
      py::arg("x"), py::arg("w1"), py::arg("b1"), py::arg("w2"), py::arg("b2") = py::none(),
      py::arg("approximate") = "none",
      "linear(gelu(linear(x, w1, b1)), w2, b2) as one op (a transformer MLP); the weights may be sparse, and a BSR "
      "weight on CUDA takes the gelu and its gradient inside its products. approximate: 'none' (gelu, the exact "
      "GELU) or 'tanh' (gelu_tanh, GPT-2's approximation), as PyTorch's F.gelu.");

  // ---- neural-network functions (nn.h) ----
  m.def(
      op::kSoftmax,
      [](const py::object& x, int64_t dim) {
        Operands in;
        const Variable v = in(x, "argument x");
        return in.result(softmax(v, dim));
      },
      py::arg("x"), py::arg("dim") = -1);
  m.def(
      op::kLogSoftmax,
      [](const py::object& x, int64_t dim) {
        Operands in;
        const Variable v = in(x, "argument x");
        return in.result(log_softmax(v, dim));
      },
      py::arg("x"), py::arg("dim") = -1);
  m.def(
      op::kCrossEntropy,
      [](const py::object& logits, const py::object& target, double label_smoothing, int64_t ignore_index,
         const std::string& reduction) {
        Operands in;
        const Variable z = in(logits, "argument logits");
        CrossEntropyOptions o;
        o.label_smoothing = label_smoothing;
        o.ignore_index = ignore_index;
        o.reduction = parse_reduction(reduction, "cross_entropy");
        return in.result(cross_entropy(z, target_of(target, "cross_entropy: target"), o));
      },
      py::arg("logits"), py::arg("target"), py::arg("label_smoothing") = 0.0, py::arg("ignore_index") = -100,
      py::arg("reduction") = "mean", "logits [n, c] against int64 class indices [n].");
  // Elementwise losses (nn.h): input and target of one shape and dtype; the target may be a Variable.
  auto def_loss = [&m](const char* name, const char* input_name,
                       Variable (*f)(const Variable&, const Variable&, Reduction), const char* doc) {
    const std::string input_what = str_cat(name, ": ", input_name), target_what = str_cat(name, ": target");
    m.def(
        name,
        [name, f, input_what, target_what](const py::object& input, const py::object& target,
                                           const std::string& reduction) {
          Operands in;
          const Variable x = in(input, input_what.c_str()), y = in(target, target_what.c_str());
          return in.result(f(x, y, parse_reduction(reduction, name)));
        },
        py::arg(input_name), py::arg("target"), py::arg("reduction") = "mean", doc);
  };
  def_loss("mse_loss", "input", &mse_loss,
           "(input - target) ** 2, reduced by reduction ('mean', 'sum' or 'none'); input and target of the same shape "
           "and floating dtype (a Variable target gets a gradient too).");
  def_loss("l1_loss", "input", &l1_loss,
           "|input - target| (gradient sign(input - target), 0 where equal), reduced by reduction ('mean', 'sum' or "
           "'none'); input and target of the same shape and floating dtype.");
  def_loss("binary_cross_entropy_with_logits", "logits", &binary_cross_entropy_with_logits,
           "Binary cross-entropy of targets in [0, 1] against logits x, in the stable form max(x, 0) - x * target + "
           "log1p(exp(-|x|)) (gradient sigmoid(x) - target), reduced by reduction ('mean', 'sum' or 'none'); logits "
           "and target of the same shape and floating dtype.");
  m.def(
      op::kLayerNorm,
      [](const py::object& x, const std::vector<int64_t>& normalized_shape, const py::object& weight,
         const py::object& bias, double eps) {
        Operands in;
        const Variable v = in(x, "argument x");
        const Variable w = or_undefined(in.optional(weight)), b = or_undefined(in.optional(bias));
        return in.result(layer_norm(v, normalized_shape, w, b, eps));
      },
      py::arg("x"), py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
      py::arg("eps") = 1e-5);
  m.def(
      "embedding",
      [](const py::object& weight, const py::object& indices, bool sparse_grad) {
        Operands in;
        const Variable w = in(weight, "argument weight");
        return in.result(embedding(w, target_of(indices, "embedding: indices"), sparse_grad));
      },
      py::arg("weight"), py::arg("indices"), py::arg("sparse_grad") = false,
      "Rows of weight [v, d] picked by indices; sparse_grad: a dense weight's gradient row-sparse (a BSR of [1, d] "
      "blocks holding the rows used); a sparse weight gives its rows, its gradient on its pattern.");
  m.def(
      "embedding_bag",
      [](const py::object& weight, const py::object& indices, const py::object& offsets, const std::string& mode,
         const py::object& per_sample_weights, std::optional<int64_t> padding_idx, bool include_last_offset,
         bool sparse_grad) {
        COPPICE_CHECK(mode == "sum" || mode == "mean" || mode == "max",
                      "embedding_bag: mode must be 'sum', 'mean' or 'max', got '", mode, "'");
        Operands in;
        const Variable w = in(weight, "argument weight");
        const Variable psw = or_undefined(in.optional(per_sample_weights));
        EmbeddingBagOptions o;
        o.mode = mode == "mean" ? BagMode::kMean : mode == "max" ? BagMode::kMax : BagMode::kSum;
        if (!offsets.is_none()) o.offsets = target_of(offsets, "embedding_bag: offsets");
        o.include_last_offset = include_last_offset;
        o.padding_idx = padding_idx;
        o.sparse_grad = sparse_grad;
        return in.result(embedding_bag(w, target_of(indices, "embedding_bag: indices"), o, psw));
      },
      py::arg("weight"), py::arg("indices"), py::arg("offsets") = py::none(), py::arg("mode") = "sum",
      py::arg("per_sample_weights") = py::none(), py::arg("padding_idx") = py::none(),
      py::arg("include_last_offset") = false, py::arg("sparse_grad") = false,
      "Embedding bags (PyTorch's F.embedding_bag): indices 2-D [B, L], or 1-D with offsets; sum, mean or max (the "
      "first largest; its gradient to that entry); "
      "per_sample_weights (sum mode) differentiable; padding_idx skipped and not counted; sparse_grad: weight's "
      "gradient row-sparse. Deterministic on every device.");
  m.def(
      op::kConv2d,
      [](const py::object& x, const py::object& weight, const py::object& bias, const py::object& stride,
         const py::object& padding, const py::object& dilation) {
        Operands in;
        const Variable v = in(x, "argument x"), w = in(weight, "argument weight");
        const Variable b = or_undefined(in.optional(bias));
        Conv2dOptions o;
        o.stride = pair_of(stride, "conv2d: stride");
        o.padding = pair_of(padding, "conv2d: padding");
        o.dilation = pair_of(dilation, "conv2d: dilation");
        return in.result(conv2d(v, w, b, o));
      },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1, py::arg("padding") = 0,
      py::arg("dilation") = 1, "x [n, c, h, w], weight [o, c, kh, kw], bias [o].");
  m.def(
      op::kMaxPool2d,
      [](const py::object& x, const py::object& kernel, const py::object& stride, const py::object& padding) {
        Operands in;
        const Variable v = in(x, "argument x");
        const std::vector<int64_t> k = pair_of(kernel, "max_pool2d: kernel");
        const std::vector<int64_t> s =
            stride.is_none() ? std::vector<int64_t>{} : pair_of(stride, "max_pool2d: stride");
        return in.result(max_pool2d(v, k, s, pair_of(padding, "max_pool2d: padding")));
      },
      py::arg("x"), py::arg("kernel"), py::arg("stride") = py::none(), py::arg("padding") = 0,
      "Max pooling over [n, c, h, w] (stride: the kernel by default).");
  m.def(
      "dropout",
      [](const py::object& x, double p, bool training, std::optional<uint64_t> seed) {
        Operands in;
        const Variable v = in(x, "argument x");
        if (!seed) return in.result(dropout(v, p, training));
        Generator gen(*seed);
        return in.result(dropout(v, p, training, gen));
      },
      py::arg("x"), py::arg("p") = 0.5, py::arg("training") = true, py::arg("seed") = py::none());

  // ---- reductions (reduce.h) ----
  m.def(
      op::kSum,
      [](const py::object& x, const py::object& dim, bool keepdim) {
        Operands in;
        const Variable v = in(x, "argument x");
        return in.result(dim.is_none() ? sum(v) : sum(v, dims_of(dim), keepdim));
      },
      py::arg("x"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def(
      "mean",
      [](const py::object& x, const py::object& dim, bool keepdim) {
        Operands in;
        const Variable v = in(x, "argument x");
        return in.result(dim.is_none() ? mean(v) : mean(v, dims_of(dim), keepdim));
      },
      py::arg("x"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def(
      "max",
      [](const py::object& x, const py::object& dim, bool keepdim) -> py::object {
        Operands in;
        const Variable v = in(x, "argument x");
        if (dim.is_none()) return in.result(max(v));
        const VariableIndices r = max(v, dim.cast<int64_t>(), keepdim);
        return py::make_tuple(in.result(r.values), r.indices);
      },
      py::arg("x"), py::arg("dim") = py::none(), py::arg("keepdim") = false,
      "The maximum; along `dim`, (values, indices).");
  m.def(
      "argmax",
      [](const py::object& x, int64_t dim, bool keepdim) {
        return argmax(Variable(target_of(x, "argmax: x")), dim, keepdim);
      },
      py::arg("x"), py::arg("dim"), py::arg("keepdim") = false, "int64 indices (a Tensor).");
  m.def(
      "norm",
      [](const py::object& x, double p, const py::object& dim, bool keepdim) {
        Operands in;
        const Variable v = in(x, "argument x");
        return in.result(dim.is_none() ? norm(v, p) : norm(v, p, dims_of(dim), keepdim));
      },
      py::arg("x"), py::arg("p") = 2.0, py::arg("dim") = py::none(), py::arg("keepdim") = false);

  // ---- shapes (shape.h) ----
  m.def(
      "reshape",
      [](const py::object& x, const std::vector<int64_t>& shape) {
        Operands in;
        const Variable v = in(x, "argument x");
        return in.result(reshape(v, shape));
      },
      py::arg("x"), py::arg("shape"));
  m.def(
      "flatten",
      [](const py::object& x, int64_t start_dim, int64_t end_dim) {
        Operands in;
        const Variable v = in(x, "argument x");
        return in.result(flatten(v, start_dim, end_dim));
      },
      py::arg("x"), py::arg("start_dim") = 0, py::arg("end_dim") = -1);
  m.def(
      op::kTranspose,
      [](const py::object& x, int64_t d0, int64_t d1) {
        Operands in;
        const Variable v = in(x, "argument x");
        return in.result(transpose(v, d0, d1));
      },
      py::arg("x"), py::arg("dim0"), py::arg("dim1"));
  m.def(
      "permute",
      [](const py::object& x, const std::vector<int64_t>& dims) {
        Operands in;
        const Variable v = in(x, "argument x");
        return in.result(permute(v, dims));
      },
      py::arg("x"), py::arg("dims"));
  m.def(
      "unsqueeze",
      [](const py::object& x, int64_t dim) {
        Operands in;
        const Variable v = in(x, "argument x");
        return in.result(unsqueeze(v, dim));
      },
      py::arg("x"), py::arg("dim"));
  m.def(
      "squeeze",
      [](const py::object& x, std::optional<int64_t> dim) {
        Operands in;
        const Variable v = in(x, "argument x");
        return in.result(dim ? squeeze(v, *dim) : squeeze(v));
      },
      py::arg("x"), py::arg("dim") = py::none());
  auto list_op = [](auto f) {
    return [f](const py::sequence& xs, int64_t dim) {
      Operands in;
      std::vector<Variable> vs;
      for (const py::handle& x : xs) vs.push_back(in(py::reinterpret_borrow<py::object>(x)));
      return in.result(f(vs, dim));
    };
  };
  m.def("cat", list_op([](const std::vector<Variable>& xs, int64_t dim) { return cat(xs, dim); }), py::arg("xs"),
        py::arg("dim") = 0);
  m.def("stack", list_op([](const std::vector<Variable>& xs, int64_t dim) { return stack(xs, dim); }), py::arg("xs"),
        py::arg("dim") = 0);

  // ---- sparse values (sparse_grad.h) ----
  m.def("values", unary([](const Variable& x) { return values(x); }), py::arg("x"),
        "The stored values of a sparse x (differentiable); x itself when dense.");
  m.def(
      "with_values",
      [](const py::object& pattern, const py::object& v) {
        Operands in;
        const Variable x = in(v, "argument v");
        return in.result(with_values(target_of(pattern, "with_values: pattern"), x));
      },
      py::arg("pattern"), py::arg("values"), "A sparse value with pattern's format and pattern and these values.");
  m.def("to_dense", unary([](const Variable& x) { return to_dense(x); }), py::arg("x"));

  // ---- gradcheck (gradcheck.h) ----
  m.def(
      "gradcheck",
      [](const py::function& f, const std::vector<Variable>& inputs, double eps, double atol, double rtol) {
        GradcheckOptions o;
        o.eps = eps;
        o.atol = atol;
        o.rtol = rtol;
        const GradcheckResult r = gradcheck(
            [&f](const std::vector<Variable>& xs) {
              py::tuple args(xs.size());
              for (size_t i = 0; i < xs.size(); ++i) args[i] = py::cast(xs[i]);
              return f(*args).cast<Variable>();
            },
            inputs, o);
        py::dict d;
        d["passed"] = r.passed;
        d["message"] = r.message;
        d["max_abs_error"] = r.max_abs_error;
        return d;
      },
      py::arg("fn"), py::arg("inputs"), py::arg("eps") = 1e-6, py::arg("atol") = 1e-5, py::arg("rtol") = 1e-3,
      "autograd's gradcheck: fn(*inputs) -> Variable, its analytic gradients against central differences in f64.");
}

}  // namespace

Variable variable_of(const py::object& o, const std::string& what) {
  if (py::isinstance<Variable>(o)) return o.cast<Variable>();
  return Variable(tensor_of(o, what));
}

void bind_autograd(py::module_& m) {
  bind_variable(m);
  bind_functions(m);
}

GeluForm gelu_form_of(const std::string& approximate, const char* who) {
  if (approximate == "none") return GeluForm::kErf;
  if (approximate == "tanh") return GeluForm::kTanh;
  throw py::value_error(str_cat(who, ": approximate must be 'none' or 'tanh', got '", approximate, "'"));
}

}  // namespace coppice::python

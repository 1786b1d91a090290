// coppice.kernels: a linear layer's products on plain tensors, without
// autograd. What coppice.torch's functions call: PyTorch's autograd (or
// torch.library's) holds the graph, Coppice runs the products. The backward
// is the one the autograd node of linear at a sparse weight runs
// (autograd/functions/sparse.h): dx = dy W, dW = sddmm(dy^T, x) at W's
// pattern, so the weight's gradient is compact (values' shape).
//
// Operands are coppice.Tensors or anything with __dlpack__ (PyTorch tensors
// on the CPU or a GPU, without a copy), else NumPy arrays.
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <utility>

#include "python/bindings.h"
#include "sparse/ops.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice::python {
namespace {

py::object tensor_or_none(const Tensor& t) { return t.defined() ? py::cast(t) : py::object(py::none()); }

// The weight [out, in] and an x [..., in] it multiplies; throws naming `op`.
void check_linear_operands(const Tensor& x, const Tensor& weight, const char* op) {
  COPPICE_CHECK(weight.dim() == 2, op, ": weight must be a matrix [out, in], got shape ",
                shape_to_string(weight.shape()));
  COPPICE_CHECK(x.is_dense(), op, ": x must be dense, got a ", x.format(), " tensor");
  COPPICE_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), op, ": x of shape ", shape_to_string(x.shape()),
                " does not end in the weight's ", weight.size(1), " input features (weight ",
                shape_to_string(weight.shape()), ")");
  COPPICE_CHECK(x.device() == weight.device(), op, ": x is on ", x.device().to_string(), ", the weight on ",
                weight.device().to_string());
}

Tensor linear_forward(const py::object& x_obj, const py::object& weight_obj, const py::object& bias_obj) {
  const char* op = "coppice.kernels.linear";
  const Tensor x = tensor_of_any(x_obj, str_cat(op, ": x"));
  const Tensor w = tensor_of_any(weight_obj, str_cat(op, ": weight"));
  const Tensor b = bias_obj.is_none() ? Tensor() : tensor_of_any(bias_obj, str_cat(op, ": bias"));
  check_linear_operands(x, w, op);
  COPPICE_CHECK(!b.defined() || (b.is_dense() && b.shape() == Shape{w.size(0)}), op, ": bias must be dense of shape [",
                w.size(0), "], got ", b.format(), " ", shape_to_string(b.shape()));
  py::gil_scoped_release release;
  return linear(x, w, b);
}

// (dx or None, the weight's gradient or None): for a sparse weight its
// values (values(weight)'s shape), for a dense one the dense [out, in].
py::tuple linear_backward(const py::object& dy_obj, const py::object& x_obj, const py::object& weight_obj, bool x_grad,
                          bool weight_grad) {
  const char* op = "coppice.kernels.linear_backward";
  const Tensor dy = tensor_of_any(dy_obj, str_cat(op, ": dy"));
  const Tensor x = tensor_of_any(x_obj, str_cat(op, ": x"));
  const Tensor w = tensor_of_any(weight_obj, str_cat(op, ": weight"));
  check_linear_operands(x, w, op);
  Shape expected = x.shape();
  expected.back() = w.size(0);
  COPPICE_CHECK(dy.is_dense() && dy.shape() == expected, op, ": dy must be dense of shape ", shape_to_string(expected),
                " (x's leading dimensions, then the weight's ", w.size(0), " outputs), got ", dy.format(), " ",
                shape_to_string(dy.shape()));
  Tensor dx, dw;
  {
    py::gil_scoped_release release;
    const Tensor dy2 = dy.reshape({-1, w.size(0)}).contiguous();
    if (x_grad) dx = matmul(dy2, w).reshape(x.shape());
    if (weight_grad) {
      const Tensor x2 = x.reshape({-1, w.size(1)});
      dw = w.is_sparse() ? values(sddmm(dy2.t(), x2, w)) : matmul(dy2.t().contiguous(), x2.contiguous());
    }
  }
  return py::make_tuple(tensor_or_none(dx), tensor_or_none(dw));
}

}  // namespace

void bind_kernels(py::module_& m) {
  py::module_ k = m.def_submodule(
      "kernels",
      "A linear layer's products on plain tensors, without autograd (what coppice.torch calls): operands are "
      "coppice.Tensors or DLPack producers such as PyTorch tensors, used without a copy.");
  k.def("linear", &linear_forward, py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(),
        "x [..., in] times weight [out, in] (any format) transposed, plus bias [out]: coppice.linear's product, "
        "with no graph recorded.");
  k.def("linear_backward", &linear_backward, py::arg("dy"), py::arg("x"), py::arg("weight"), py::arg("x_grad") = true,
        py::arg("weight_grad") = true,
        "The gradients of linear(x, weight) given dy (x's leading shape, then out): (dx or None, the weight's "
        "gradient or None). A sparse weight's gradient is its values' (dy^T x sampled at its pattern, "
        "values(weight)'s shape); a dense one's is [out, in]. The bias gradient is dy summed over its rows.");
  k.def(
      "with_values",
      [](const py::object& pattern, const py::object& v) {
        const Tensor p = tensor_of_any(pattern, "coppice.kernels.with_values: pattern");
        const Tensor vals = tensor_of_any(v, "coppice.kernels.with_values: values");
        COPPICE_CHECK(p.is_sparse(), "coppice.kernels.with_values: pattern must be sparse, got a dense tensor");
        return with_values(p, vals);
      },
      py::arg("pattern"), py::arg("values"),
      "pattern's format, pattern and pattern version with these values (values(pattern)'s shape and device; "
      "the dtype may differ), on their memory.");
  k.def(
      "owned_parts",
      [](const py::object& t_obj) {
        const Tensor t = tensor_of_any(t_obj, "coppice.kernels.owned_parts: t");
        COPPICE_CHECK(t.is_sparse(), "coppice.kernels.owned_parts: t must be sparse, got a dense tensor");
        std::map<std::string, Tensor> out;
        for (const auto& [name, part] : sparse_impl(t, "coppice.kernels.owned_parts").parts())
          out[name] = name == "values" ? part : part.clone();
        return out;
      },
      py::arg("t"),
      "A sparse tensor's parts on its device, the index parts copies the caller owns (Tensor.parts() gives them "
      "read-only, which DLPack cannot export): how a sparse weight's pattern moves into PyTorch buffers.");
}

}  // namespace coppice::python

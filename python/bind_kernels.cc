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

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "python/bindings.h"
#include "sparse/ops.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
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

// A linear's bias: none, or dense of the weight's [out] shape.
void check_bias(const Tensor& b, const Tensor& weight, const char* op) {
  COPPICE_CHECK(!b.defined() || (b.is_dense() && b.shape() == Shape{weight.size(0)}), op,
                ": bias must be dense of shape [", weight.size(0), "], got ", b.format(), " ",
                shape_to_string(b.shape()));
}

// dy of x's leading dimensions and the weight's outputs.
void check_dy(const Tensor& dy, const Tensor& x, const Tensor& weight, const char* op) {
  Shape expected = x.shape();
  expected.back() = weight.size(0);
  COPPICE_CHECK(dy.is_dense() && dy.shape() == expected, op, ": dy must be dense of shape ", shape_to_string(expected),
                " (x's leading dimensions, then the weight's ", weight.size(0), " outputs), got ", dy.format(), " ",
                shape_to_string(dy.shape()));
}

// (dx, the weight's gradient), each undefined where not asked, from dy as
// rows [N, out]: for a sparse weight its values' gradient (dy^T x sampled at
// its pattern), for a dense one [out, in].
std::pair<Tensor, Tensor> linear_gradients(const Tensor& dy2, const Tensor& x, const Tensor& w, bool x_grad,
                                           bool weight_grad) {
  Tensor dx, dw;
  if (x_grad) dx = matmul(dy2, w).reshape(x.shape());
  if (weight_grad) {
    const Tensor x2 = x.reshape({-1, w.size(1)}).contiguous();
    dw = w.is_sparse() ? values(sddmm(dy2.t(), x2, w)) : matmul(dy2.t().contiguous(), x2);
  }
  return {dx, dw};
}

Tensor linear_forward(const py::object& x_obj, const py::object& weight_obj, const py::object& bias_obj) {
  const char* op = "coppice.kernels.linear";
  const Tensor x = tensor_of_any(x_obj, op, "x");
  const Tensor w = tensor_of_any(weight_obj, op, "weight");
  const Tensor b = bias_obj.is_none() ? Tensor() : tensor_of_any(bias_obj, op, "bias");
  check_linear_operands(x, w, op);
  check_bias(b, w, op);
  py::gil_scoped_release release;
  return linear(x, w, b);
}

// (dx or None, the weight's gradient or None): for a sparse weight its
// values (values(weight)'s shape), for a dense one the dense [out, in].
py::tuple linear_backward(const py::object& dy_obj, const py::object& x_obj, const py::object& weight_obj, bool x_grad,
                          bool weight_grad) {
  const char* op = "coppice.kernels.linear_backward";
  const Tensor dy = tensor_of_any(dy_obj, op, "dy");
  const Tensor x = tensor_of_any(x_obj, op, "x");
  const Tensor w = tensor_of_any(weight_obj, op, "weight");
  check_linear_operands(x, w, op);
  check_dy(dy, x, w, op);
  Tensor dx, dw;
  {
    py::gil_scoped_release release;
    std::tie(dx, dw) = linear_gradients(dy.reshape({-1, w.size(0)}).contiguous(), x, w, x_grad, weight_grad);
  }
  return py::make_tuple(tensor_or_none(dx), tensor_or_none(dw));
}

// ---- one call per direction: what coppice.torch's autograd function runs ------------------------
//
// Each call of a torch autograd function pays for every Python step in it
// (a DLPack capsule each way, a torch cast op, the stream check), so the
// whole of a direction is one C++ call here: the casts to the compute dtype
// and back, the product(s) and the bias gradient. Operands and results are
// DLPack capsules (torch.utils.dlpack's), used without a copy.

// None, or a dtype by Coppice's name ("bf16"), for `what` of `op`.
std::optional<DType> dtype_arg(const py::object& name, const char* op, const char* what) {
  if (name.is_none()) return std::nullopt;
  DType d;
  COPPICE_CHECK(py::isinstance<py::str>(name) && dtype_from_name(name.cast<std::string>(), &d), op, ": ", what,
                " must be a dtype name such as 'bf16' or None, got ", py::repr(name).cast<std::string>());
  return d;
}

Tensor cast_to(const Tensor& t, std::optional<DType> dtype) { return dtype && t.defined() ? t.to(*dtype) : t; }

py::object capsule_or_none(const Tensor& t) { return t.defined() ? py::object(to_dlpack(t)) : py::object(py::none()); }

// Runs fn; with a capture stream (PyTorch's current stream while it captures
// a CUDA graph: torch.cuda.graph, torch.compile's reduce-overhead mode), fn's
// work is recorded into that capture instead (tensor/backend.h).
void run_on(Device device, uintptr_t capture_stream, const std::function<void()>& fn) {
  if (capture_stream == 0) {
    fn();
  } else {
    run_in_foreign_capture(device, reinterpret_cast<void*>(capture_stream), fn);
  }
}

// (y, x as computed or None when it is x, values as computed or None when
// they are values): y = x W^T + b in `dtype` (None: the operands' own), W =
// pattern at `values`. The backward wants x and the values as computed.
py::tuple sparse_linear_forward(const py::object& x_obj, const py::object& values_obj, const py::object& pattern_obj,
                                const py::object& bias_obj, const py::object& dtype_obj, uintptr_t capture_stream) {
  const char* op = "coppice.kernels.sparse_linear_forward";
  const std::optional<DType> dtype = dtype_arg(dtype_obj, op, "dtype");
  const Tensor x_in = tensor_of_any(x_obj, op, "x");
  const Tensor values_in = tensor_of_any(values_obj, op, "values");
  const Tensor pattern = tensor_of_any(pattern_obj, op, "pattern");
  const Tensor b_in = bias_obj.is_none() ? Tensor() : tensor_of_any(bias_obj, op, "bias");
  COPPICE_CHECK(pattern.is_sparse(), op, ": pattern must be sparse, got a dense tensor");
  check_linear_operands(x_in, pattern, op);
  check_bias(b_in, pattern, op);
  Tensor x, values, y;
  {
    py::gil_scoped_release release;
    run_on(x_in.device(), capture_stream, [&] {
      x = cast_to(x_in, dtype).contiguous();
      values = cast_to(values_in, dtype);
      const Tensor b = cast_to(b_in, dtype);
      COPPICE_CHECK(x.dtype() == values.dtype() && (!b.defined() || b.dtype() == x.dtype()), op, ": x is ",
                    dtype_name(x.dtype()), ", values ", dtype_name(values.dtype()),
                    b.defined() ? str_cat(", bias ", dtype_name(b.dtype())) : std::string(),
                    " (give a dtype to compute in, or cast them to one)");
      y = linear(x, with_values(pattern, values), b);
    });
  }
  return py::make_tuple(to_dlpack(y), x.is_same(x_in) ? py::object(py::none()) : py::object(to_dlpack(x)),
                        values.is_same(values_in) ? py::object(py::none()) : py::object(to_dlpack(values)));
}

// (dx, dvalues, dbias), each None where not asked: the gradients of
// sparse_linear_forward given dy, from x and the values as it computed
// them, each cast to its dtype argument (None: as computed).
py::tuple sparse_linear_backward(const py::object& dy_obj, const py::object& x_obj, const py::object& values_obj,
                                 const py::object& pattern_obj, bool x_grad, bool values_grad, bool bias_grad,
                                 const py::object& dx_dtype_obj, const py::object& dvalues_dtype_obj,
                                 const py::object& dbias_dtype_obj, uintptr_t capture_stream) {
  const char* op = "coppice.kernels.sparse_linear_backward";
  const std::optional<DType> dx_dtype = dtype_arg(dx_dtype_obj, op, "dx_dtype");
  const std::optional<DType> dvalues_dtype = dtype_arg(dvalues_dtype_obj, op, "dvalues_dtype");
  const std::optional<DType> dbias_dtype = dtype_arg(dbias_dtype_obj, op, "dbias_dtype");
  const Tensor dy_in = tensor_of_any(dy_obj, op, "dy");
  const Tensor x = tensor_of_any(x_obj, op, "x");
  const Tensor values = tensor_of_any(values_obj, op, "values");
  const Tensor pattern = tensor_of_any(pattern_obj, op, "pattern");
  COPPICE_CHECK(pattern.is_sparse(), op, ": pattern must be sparse, got a dense tensor");
  check_linear_operands(x, pattern, op);
  check_dy(dy_in, x, pattern, op);
  Tensor dx, dvalues, dbias;
  {
    py::gil_scoped_release release;
    run_on(x.device(), capture_stream, [&] {
      const Tensor w = with_values(pattern, values);
      const Tensor dy = dy_in.to(x.dtype()).reshape({-1, w.size(0)}).contiguous();
      std::tie(dx, dvalues) = linear_gradients(dy, x, w, x_grad, values_grad);
      dx = cast_to(dx, dx_dtype);
      dvalues = cast_to(dvalues, dvalues_dtype);
      if (bias_grad) dbias = cast_to(sum(dy, {0}), dbias_dtype);
    });
  }
  return py::make_tuple(capsule_or_none(dx), capsule_or_none(dvalues), capsule_or_none(dbias));
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
  k.def("sparse_linear_forward", &sparse_linear_forward, py::arg("x"), py::arg("values"), py::arg("pattern"),
        py::arg("bias") = py::none(), py::arg("dtype") = py::none(), py::arg("capture_stream") = 0,
        "coppice.torch's forward in one call: y = x W^T + b with W = pattern at values, computed in dtype (a "
        "dtype name, or None for the operands' own); operands are DLPack capsules or producers. Returns DLPack "
        "capsules (y, x as computed or None where it is x, values as computed or None where they are values). "
        "capture_stream: 0, or the raw handle of a CUDA stream that PyTorch is capturing a graph on, which the "
        "work is then recorded into (its memory held by the captured graph).");
  k.def("sparse_linear_backward", &sparse_linear_backward, py::arg("dy"), py::arg("x"), py::arg("values"),
        py::arg("pattern"), py::arg("x_grad"), py::arg("values_grad"), py::arg("bias_grad"),
        py::arg("dx_dtype") = py::none(), py::arg("dvalues_dtype") = py::none(), py::arg("dbias_dtype") = py::none(),
        py::arg("capture_stream") = 0,
        "coppice.torch's backward in one call, from x and values as sparse_linear_forward computed them: DLPack "
        "capsules (dx, dvalues, dbias), None where not asked, each cast to its dtype argument (None: as "
        "computed). dvalues is compact (values' shape), dbias dy summed over its rows. capture_stream: as "
        "sparse_linear_forward's.");
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

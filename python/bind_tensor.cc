// The Tensor of Python: NumPy arrays in and out without copies
// (numpy_conversion.cc), DLPack both ways (dlpack_conversion.cc), formats
// from masks and to their parts (the index parts read-only).
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <vector>

#include "python/bindings.h"
#include "python/dlpack.h"
#include "sparse/convert.h"
#include "sparse/formats.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tensor/storage.h"

namespace coppice::python {
namespace {

// The options of a format from the Python keywords (0: the format's default).
FormatOptions format_options(int64_t block_rows, int64_t block_cols, int64_t n, int64_t m) {
  FormatOptions o;
  o.block_rows = block_rows;
  o.block_cols = block_cols;
  o.n = n;
  o.m = m;
  return o;
}

// A sparse tensor's parts, as Python gets them: the stored values writable
// (the same memory: editing a weight's values is editing the weight), every
// other part (indices, offsets, masks, metadata) read-only, since the library
// trusts them when it multiplies.
std::map<std::string, Tensor> parts_for_python(const Tensor& t) {
  std::map<std::string, Tensor> out;
  if (!t.is_sparse()) {
    out["values"] = t;
    return out;
  }
  for (const auto& [name, part] : sparse_impl(t, "coppice.Tensor.parts").parts()) {
    out[name] = name == "values" ? part : read_only_view(part);
  }
  return out;
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", py::buffer_protocol())
      .def(py::init([](const py::object& a) {
             return from_numpy(array_of(a, "coppice.Tensor: array"), "coppice.Tensor: array");
           }),
           py::arg("array"),
           "A tensor on the array's memory (no copy for native, aligned memory with non-negative, item-aligned "
           "strides); read-only where the array is.")
      // The memory belongs to the tensor that exports it (memoryview, numpy.asarray).
      .def_buffer([](const Tensor& t) { return to_numpy(t).request(); })
      .def("numpy", &to_numpy, "An array on the tensor's memory (dense CPU tensors); read-only where it is.")
      .def(
          "__dlpack__", [](const Tensor& t, const py::object&) { return to_dlpack(t); }, py::arg("stream") = py::none(),
          "DLPack export (CPU or CUDA memory, no copy).")
      .def("__dlpack_device__",
           [](const Tensor& t) {
             return py::make_tuple(static_cast<int>(t.device().is_cuda() ? kDLCUDA : kDLCPU),
                                   t.device().is_cuda() ? t.device().index : 0);
           })
      .def(
          "__array__", [](const Tensor& t, const py::object&) { return to_numpy(t); }, py::arg("dtype") = py::none())
      .def_property_readonly("shape", [](const Tensor& t) { return std::vector<int64_t>(t.shape()); })
      .def_property_readonly("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def_property_readonly("device", [](const Tensor& t) { return t.device().to_string(); })
      .def_property_readonly("format", [](const Tensor& t) { return std::string(t.format()); })
      .def_property_readonly("nnz", [](const Tensor& t) { return nnz(t); })
      .def("numel", &Tensor::numel)
      .def(
          "item", [](const Tensor& t) { return t.item(); }, "The value of a one-element tensor, as a float.")
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); })
      .def("to_dense", [](const Tensor& t) { return to_dense(t); })
      .def(
          "to_format",
          [](const Tensor& t, const std::string& format, int64_t block_rows, int64_t block_cols, int64_t n,
             int64_t mm) {
            const FormatOptions o = format_options(block_rows, block_cols, n, mm);
            return to_format(t, format, o);
          },
          py::arg("format"), py::arg("block_rows") = 0, py::arg("block_cols") = 0, py::arg("n") = 0, py::arg("m") = 0)
      .def("parts", &parts_for_python,
           "The parts of the tensor's format on its memory: values writable, index parts read-only.")
      .def("to",
           [](const Tensor& t, const std::string& what) {
             DType d;
             if (dtype_from_name(what, &d)) return t.to(d);
             return t.to(Device::parse(what));
           })
      .def("__repr__", [](const Tensor& t) {
        return str_cat("coppice.Tensor(", t.format(), ", ", shape_to_string(t.shape()), ", ", dtype_name(t.dtype()),
                       ", ", t.device().to_string(), t.is_sparse() ? str_cat(", nnz=", nnz(t)) : "", ")");
      });

  m.def("from_dlpack", &from_dlpack, py::arg("obj"),
        "A tensor on the memory of anything with __dlpack__ (NumPy, PyTorch on the CPU or a GPU): no copy.");
  m.def(
      "tensor", [](const py::object& o) { return tensor_of(o, "coppice.tensor: data"); }, py::arg("data"),
      "A coppice.Tensor of a NumPy array (no copy) or of anything numpy.asarray takes.");
  m.def(
      "sparse_from_mask",
      [](const py::object& dense, const py::object& mask, const std::string& format, int64_t block_rows,
         int64_t block_cols, int64_t n, int64_t mm) {
        const FormatOptions o = format_options(block_rows, block_cols, n, mm);
        return sparse_from_mask(tensor_of(dense, "sparse_from_mask: dense"),
                                tensor_of(mask, "sparse_from_mask: mask").to(DType::kBool), format, o);
      },
      py::arg("dense"), py::arg("mask"), py::arg("format"), py::arg("block_rows") = 0, py::arg("block_cols") = 0,
      py::arg("n") = 0, py::arg("m") = 0);
  m.def(
      "formats", [] { return format_names(); }, "The format names (the format table, sparse/formats.h).");
  m.def("manual_seed", &manual_seed, py::arg("seed"),
        "Seeds this thread's default generator, which layers draw their initial weights from unless given a seed.");
}

}  // namespace coppice::python

// The Tensor of Python: NumPy arrays in and out without copies (Storage::wrap
// on the array's memory; an array on the tensor's), DLPack both ways (CPU and
// CUDA memory), formats from masks and to their parts.
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

// ---- dtypes --------------------------------------------------------------------------------

DType dtype_of_numpy(const py::dtype& d) {
  const char kind = d.kind();
  const size_t size = d.itemsize();
  if (kind == 'f' && size == 4) return DType::kF32;
  if (kind == 'f' && size == 8) return DType::kF64;
  if (kind == 'f' && size == 2) return DType::kF16;
  if (kind == 'i' && size == 4) return DType::kI32;
  if (kind == 'i' && size == 8) return DType::kI64;
  if (kind == 'u' && size == 1) return DType::kU8;
  if (kind == 'b' && size == 1) return DType::kBool;
  throw py::type_error(str_cat("coppice.Tensor: NumPy dtype ", py::str(py::object(d)).cast<std::string>(),
                               " has no Coppice dtype (float16/32/64, int32/64, uint8, bool)"));
}

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::kF32: return py::dtype::of<float>();
    case DType::kF64: return py::dtype::of<double>();
    case DType::kF16: return py::dtype("float16");
    case DType::kI32: return py::dtype::of<int32_t>();
    case DType::kI64: return py::dtype::of<int64_t>();
    case DType::kU8: return py::dtype::of<uint8_t>();
    case DType::kBool: return py::dtype::of<bool>();
    default:
      throw py::type_error(
          str_cat("coppice.Tensor: ", dtype_name(t), " has no NumPy dtype; convert first, e.g. t.to(\"f32\")"));
  }
}

}  // namespace

// ---- NumPy in and out, without copies --------------------------------------------------------

// A Tensor on the array's memory: the array stays alive while any tensor on it does.
Tensor from_numpy(const py::array& a) {
  const DType dtype = dtype_of_numpy(a.dtype());
  const int64_t item = static_cast<int64_t>(a.itemsize());
  Shape shape, strides;
  int64_t extent = a.size() > 0 ? item : 0;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    const int64_t st = static_cast<int64_t>(a.strides(i));
    if (st < 0 || st % item != 0) {
      // Negative or unaligned strides: a copy that has neither.
      return from_numpy(py::array::ensure(a, py::array::c_style | py::array::forcecast));
    }
    shape.push_back(static_cast<int64_t>(a.shape(i)));
    strides.push_back(st / item);
    if (a.shape(i) > 0) extent += (static_cast<int64_t>(a.shape(i)) - 1) * st;
  }
  auto* owner = new py::object(a);  // released, with the GIL, when the last tensor goes
  Storage storage = Storage::wrap(const_cast<void*>(a.data()), static_cast<size_t>(extent), Device::cpu(), [owner] {
    py::gil_scoped_acquire gil;
    delete owner;
  });
  return Tensor::from_storage(storage, shape, strides, 0, dtype);
}

// An array on the tensor's memory (a dense CPU tensor): the tensor stays alive while the array does.
py::array to_numpy(const Tensor& t) {
  COPPICE_CHECK(t.defined(), "coppice.Tensor.numpy: the tensor is undefined");
  COPPICE_CHECK(!t.is_sparse(), "coppice.Tensor.numpy: a ", t.format(),
                " tensor has no single array; use to_dense() or parts()");
  COPPICE_CHECK(t.device().is_cpu(), "coppice.Tensor.numpy: the tensor is on ", t.device().to_string(),
                "; use to(\"cpu\") first");
  const py::dtype dt = numpy_dtype(t.dtype());
  std::vector<py::ssize_t> shape, strides;
  for (int64_t i = 0; i < t.dim(); ++i) {
    shape.push_back(t.size(i));
    strides.push_back(t.stride(i) * static_cast<int64_t>(dtype_size(t.dtype())));
  }
  auto* keep = new Tensor(t);
  py::capsule base(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(dt, shape, strides, t.data_ptr(), base);
}

Tensor tensor_of(const py::object& o) {
  if (py::isinstance<Tensor>(o)) return o.cast<Tensor>();
  return from_numpy(py::array::ensure(o));
}

py::array to_numpy_readonly(const Tensor& t) {
  py::array a = to_numpy(t);
  a.attr("setflags")(py::arg("write") = false);
  return a;
}

Tensor host_float(const Tensor& t) {
  Tensor h = to_dense(t).to(Device::cpu());
  return h.dtype() == DType::kF32 || h.dtype() == DType::kF64 ? h : h.to(DType::kF32);
}

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

// ---- DLPack both ways (CPU and CUDA memory), without copies ------------------------------------

DLDataType dl_dtype(DType t) {
  switch (t) {
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kF64: return {kDLFloat, 64, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kI64: return {kDLInt, 64, 1};
    case DType::kU8: return {kDLUInt, 8, 1};
    case DType::kBool: return {kDLBool, 8, 1};
  }
  fail("__dlpack__: ", dtype_name(t), " has no DLPack type");
}

DType dtype_of_dl(const DLDataType& d) {
  COPPICE_CHECK(d.lanes == 1, "from_dlpack: vector types (lanes ", d.lanes, ") are not supported");
  if (d.code == kDLFloat && d.bits == 32) return DType::kF32;
  if (d.code == kDLFloat && d.bits == 64) return DType::kF64;
  if (d.code == kDLFloat && d.bits == 16) return DType::kF16;
  if (d.code == kDLBfloat && d.bits == 16) return DType::kBF16;
  if (d.code == kDLInt && d.bits == 32) return DType::kI32;
  if (d.code == kDLInt && d.bits == 64) return DType::kI64;
  if (d.code == kDLUInt && d.bits == 8) return DType::kU8;
  if (d.code == kDLBool && d.bits == 8) return DType::kBool;
  fail("from_dlpack: DLPack type (code ", static_cast<int>(d.code), ", bits ", static_cast<int>(d.bits),
       ") has no Coppice dtype");
}

// What an exported DLManagedTensor owns: the tensor (its memory) and the shape and strides arrays.
struct DlpackExport {
  Tensor tensor;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
};

py::capsule to_dlpack(const Tensor& t) {
  COPPICE_CHECK(t.defined() && !t.is_sparse(), "__dlpack__: needs a dense tensor (use to_dense() or parts())");
  auto* e = new DlpackExport{t, std::vector<int64_t>(t.shape()), {}, {}};
  for (int64_t i = 0; i < t.dim(); ++i) e->strides.push_back(t.stride(i));
  DLTensor& d = e->managed.dl_tensor;
  d.data = t.data_ptr();
  d.device = {t.device().is_cuda() ? kDLCUDA : kDLCPU, t.device().is_cuda() ? t.device().index : 0};
  d.ndim = static_cast<int32_t>(t.dim());
  d.dtype = dl_dtype(t.dtype());
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* self) { delete static_cast<DlpackExport*>(self->manager_ctx); };
  // A consumer renames the capsule "used_dltensor" and calls the deleter itself; an unused one is deleted here.
  return py::capsule(&e->managed, "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      m->deleter(m);
    }
  });
}

// A tensor on the producer's memory (anything with __dlpack__: NumPy, PyTorch, another coppice.Tensor).
Tensor from_dlpack(const py::object& obj) {
  py::object cap_obj = py::hasattr(obj, "__dlpack__") ? obj.attr("__dlpack__")() : obj;
  PyObject* cap = cap_obj.ptr();
  COPPICE_CHECK(PyCapsule_IsValid(cap, "dltensor"),
                "from_dlpack: needs an object with __dlpack__ or an unused \"dltensor\" capsule");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  PyCapsule_SetName(cap, "used_dltensor");  // the deleter is ours to call now
  const DLTensor& d = m->dl_tensor;
  COPPICE_CHECK(d.device.device_type == kDLCPU || d.device.device_type == kDLCUDA,
                "from_dlpack: memory on DLPack device type ", static_cast<int>(d.device.device_type),
                " (Coppice takes CPU and CUDA memory)");
  const Device device = d.device.device_type == kDLCUDA ? Device::cuda(d.device.device_id) : Device::cpu();
  const DType dtype = dtype_of_dl(d.dtype);
  const int64_t item = static_cast<int64_t>(dtype_size(dtype));
  Shape shape(d.shape, d.shape + d.ndim), strides(static_cast<size_t>(d.ndim));
  int64_t extent = item, expected = 1;
  bool empty = false;
  for (int32_t i = d.ndim - 1; i >= 0; --i) {
    const size_t k = static_cast<size_t>(i);
    strides[k] = d.strides != nullptr ? d.strides[i] : expected;
    COPPICE_CHECK(strides[k] >= 0, "from_dlpack: negative strides are not supported");
    expected *= shape[k];
    if (shape[k] == 0) empty = true;
    extent += (shape[k] - 1) * strides[k] * item;
  }
  Storage storage =
      Storage::wrap(static_cast<char*>(d.data) + d.byte_offset, static_cast<size_t>(empty ? 0 : extent), device, [m] {
        py::gil_scoped_acquire gil;  // a producer's deleter may touch Python objects
        if (m->deleter != nullptr) m->deleter(m);
      });
  return Tensor::from_storage(storage, shape, strides, 0, dtype);
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", py::buffer_protocol())
      .def(py::init([](const py::array& a) { return from_numpy(a); }), py::arg("array"),
           "A tensor on the array's memory (no copy for non-negative, item-aligned strides).")
      // The memory belongs to the tensor that exports it (memoryview, numpy.asarray).
      .def_buffer([](const Tensor& t) { return to_numpy(t).request(); })
      .def("numpy", &to_numpy, "An array on the tensor's memory (dense CPU tensors).")
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
      .def("parts",
           [](const Tensor& t) {
             std::map<std::string, Tensor> out;
             if (!t.is_sparse()) {
               out["values"] = t;
               return out;
             }
             for (const auto& [name, part] : sparse_impl(t, "coppice.Tensor.parts").parts()) out[name] = part;
             return out;
           })
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
      "tensor", [](const py::object& o) { return tensor_of(o); }, py::arg("data"),
      "A coppice.Tensor of a NumPy array (no copy) or of anything numpy.asarray takes.");
  m.def(
      "sparse_from_mask",
      [](const py::object& dense, const py::object& mask, const std::string& format, int64_t block_rows,
         int64_t block_cols, int64_t n, int64_t mm) {
        const FormatOptions o = format_options(block_rows, block_cols, n, mm);
        return sparse_from_mask(tensor_of(dense), tensor_of(mask).to(DType::kBool), format, o);
      },
      py::arg("dense"), py::arg("mask"), py::arg("format"), py::arg("block_rows") = 0, py::arg("block_cols") = 0,
      py::arg("n") = 0, py::arg("m") = 0);
  m.def(
      "formats", [] { return format_names(); }, "The format names (the format table, sparse/formats.h).");
  m.def("manual_seed", &manual_seed, py::arg("seed"),
        "Seeds this thread's default generator, which layers draw their initial weights from unless given a seed.");
}

}  // namespace coppice::python

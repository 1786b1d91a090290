// NumPy arrays in and out, without copies where the memory allows it, and
// every conversion checked before the library touches the memory: anything
// numpy.asarray refuses (a ragged list, an __array__ that raises) and every
// dtype Coppice lacks is a coppice.Error naming the argument; foreign byte
// order, unaligned memory and negative or unaligned strides are copied;
// read-only memory stays read-only (Storage's flag), both ways.
#include <string>
#include <vector>

#include "python/bindings.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/ops.h"
#include "tensor/storage.h"

namespace coppice::python {
namespace {

DType dtype_of_numpy(const py::dtype& d, const std::string& what) {
  const char kind = d.kind();
  const size_t size = d.itemsize();
  if (kind == 'f' && size == 4) return DType::kF32;
  if (kind == 'f' && size == 8) return DType::kF64;
  if (kind == 'f' && size == 2) return DType::kF16;
  if (kind == 'i' && size == 4) return DType::kI32;
  if (kind == 'i' && size == 8) return DType::kI64;
  if (kind == 'u' && size == 1) return DType::kU8;
  if (kind == 'b' && size == 1) return DType::kBool;
  fail(what, " has NumPy dtype ", py::str(py::object(d)).cast<std::string>(),
       kind == 'O' ? " (Python objects: a ragged list, or values of mixed types)" : "",
       ", which has no Coppice dtype (float16/32/64, int32/64, uint8, bool); convert it first, e.g. "
       "a.astype(numpy.float32)");
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
    default: fail("coppice.Tensor.numpy: ", dtype_name(t), " has no NumPy dtype; convert first, e.g. t.to(\"f32\")");
  }
}

bool is_aligned(const py::array& a) {
  return (py::detail::array_proxy(a.ptr())->flags & py::detail::npy_api::NPY_ARRAY_ALIGNED_) != 0;
}

// Whether the library can use the array's memory as it is: native byte
// order, aligned, strides non-negative multiples of the item size.
bool usable_in_place(const py::array& a) {
  if (!a.dtype().attr("isnative").cast<bool>() || !is_aligned(a)) return false;
  const auto item = static_cast<py::ssize_t>(a.itemsize());
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    if (a.strides(i) < 0 || a.strides(i) % item != 0) return false;
  }
  return true;
}

}  // namespace

py::array array_of(const py::object& o, const std::string& what) {
  if (py::isinstance<py::array>(o)) return py::reinterpret_borrow<py::array>(o);
  try {
    return py::module_::import("numpy").attr("asarray")(o);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_Exception)) throw;  // KeyboardInterrupt, SystemExit: as they are
    // The coppice.Error names the argument; NumPy's exception (or the one an __array__ raised) is its __cause__.
    const std::string message =
        str_cat(what, " is not an array: numpy.asarray(", type_name_of(o), ") raised ", describe_python_error(e));
    py::raise_from(e, coppice_error_type().ptr(), message.c_str());
    throw py::error_already_set();
  }
}

Tensor from_numpy(const py::array& given, const std::string& what) {
  const DType dtype = dtype_of_numpy(given.dtype(), what);  // before any copy: object arrays are refused here
  // Foreign byte order, unaligned memory, negative or unaligned strides: a
  // C-ordered native copy (the library's own memory, so writable).
  const py::array a =
      usable_in_place(given)
          ? given
          : py::array(given.attr("astype")(given.dtype().attr("newbyteorder")("="), py::arg("order") = "C"));
  const int64_t item = static_cast<int64_t>(a.itemsize());
  Shape shape, strides;
  int64_t extent = a.size() > 0 ? item : 0;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    shape.push_back(static_cast<int64_t>(a.shape(i)));
    strides.push_back(static_cast<int64_t>(a.strides(i)) / item);
    if (a.shape(i) > 0) extent += (static_cast<int64_t>(a.shape(i)) - 1) * static_cast<int64_t>(a.strides(i));
  }
  auto* owner = new py::object(a);  // released, with the GIL, when the last tensor goes
  Storage storage = Storage::wrap(
      const_cast<void*>(a.data()), static_cast<size_t>(extent), Device::cpu(),
      [owner] {
        if (!Py_IsInitialized()) return;  // at exit: Python has gone, and the array with it
        py::gil_scoped_acquire gil;
        delete owner;
      },
      /*read_only=*/!a.writeable());
  return Tensor::from_storage(storage, shape, strides, 0, dtype);
}

Tensor tensor_of(const py::object& o, const std::string& what) {
  if (py::isinstance<Tensor>(o)) return o.cast<Tensor>();
  return from_numpy(array_of(o, what), what);
}

// An array on the memory of a dense CPU tensor: the tensor stays alive while
// the array does; read-only where the tensor's memory is.
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
  py::array a(dt, shape, strides, t.data_ptr(), base);
  if (t.storage().read_only()) a.attr("setflags")(py::arg("write") = false);
  return a;
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

Tensor read_only_view(const Tensor& t) {
  if (!t.defined() || !t.is_dense() || t.storage().read_only()) return t;
  const Storage& s = t.storage();
  // The same memory, flagged; the original storage kept alive by the release.
  Storage view = Storage::wrap(
      s.data(), s.nbytes(), s.device(), [keep = s] {}, /*read_only=*/true);
  return Tensor::from_storage(view, t.shape(), t.strides(), t.offset(), t.dtype());
}

void check_writable(const Tensor& t, const std::string& what) {
  if (!t.defined()) return;
  std::vector<Tensor> memory = {t};
  if (t.is_sparse()) {
    memory.clear();
    for (const auto& [name, part] : sparse_impl(t, what).parts()) memory.push_back(part);
  }
  for (const Tensor& m : memory) {
    COPPICE_CHECK(!m.defined() || !m.is_dense() || !m.storage().read_only(), what,
                  " is on read-only memory (a read-only NumPy array, memory map or buffer, or an index part of a "
                  "sparse tensor) and would be written in place; give a writable copy, e.g. numpy.array(a)");
  }
}

}  // namespace coppice::python

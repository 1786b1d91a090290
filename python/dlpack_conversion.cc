// DLPack both ways (CPU and CUDA memory), without copies. What a producer
// hands over is checked before it is used or claimed: the dimension count,
// every size and stride (non-negative, and their extent within int64), the
// data pointer and its alignment. A refused capsule stays unused, so its
// producer still frees it. DLPack 0.8 cannot say that memory is read-only,
// so a read-only tensor is not exported (NumPy refuses the same).
#include <limits>
#include <string>
#include <vector>

#include "python/bindings.h"
#include "python/dlpack.h"
#include "tensor/error.h"
#include "tensor/storage.h"

namespace coppice::python {
namespace {

// More dimensions than any tensor has: a count past it is garbage.
constexpr int32_t kMaxDims = 64;

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

// a * b + c without overflow, for non-negative operands; false past int64.
bool mul_add(int64_t a, int64_t b, int64_t c, int64_t* out) {
  int64_t p = 0;
  return !__builtin_mul_overflow(a, b, &p) && !__builtin_add_overflow(p, c, out);
}

// What an exported DLManagedTensor owns: the tensor (its memory) and the shape and strides arrays.
struct DlpackExport {
  Tensor tensor;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
};

// The shape, strides and byte extent of a producer's tensor, each checked.
struct CheckedLayout {
  Shape shape, strides;
  int64_t extent = 0;  // bytes from the first element to past the last; 0 when empty
};

CheckedLayout checked_layout(const DLTensor& d, int64_t item) {
  COPPICE_CHECK(d.ndim >= 0 && d.ndim <= kMaxDims, "from_dlpack: the producer gives ", d.ndim, " dimensions (0 to ",
                kMaxDims, " taken)");
  COPPICE_CHECK(d.ndim == 0 || d.shape != nullptr, "from_dlpack: the producer gives ", d.ndim,
                " dimensions and no shape");
  CheckedLayout l;
  l.shape.assign(d.shape, d.shape + d.ndim);
  l.strides.resize(static_cast<size_t>(d.ndim));
  bool empty = false;
  for (size_t k = 0; k < l.shape.size(); ++k) {
    COPPICE_CHECK(l.shape[k] >= 0, "from_dlpack: size ", l.shape[k], " of dimension ", k, " in shape ",
                  shape_to_string(l.shape), " is negative");
    if (l.shape[k] == 0) empty = true;
  }
  // Compact row-major strides where the producer gives none; the extent in elements, checked against overflow.
  int64_t expected = 1, last = 0;
  for (int32_t i = d.ndim - 1; i >= 0; --i) {
    const size_t k = static_cast<size_t>(i);
    l.strides[k] = d.strides != nullptr ? d.strides[i] : expected;
    COPPICE_CHECK(l.strides[k] >= 0, "from_dlpack: stride ", l.strides[k], " of dimension ", k,
                  " is negative (not supported)");
    if (!empty) {
      COPPICE_CHECK(mul_add(l.shape[k] - 1, l.strides[k], last, &last) && mul_add(expected, l.shape[k], 0, &expected),
                    "from_dlpack: shape ", shape_to_string(l.shape), " with strides ", shape_to_string(l.strides),
                    " spans more than 2^63 elements");
    }
  }
  if (!empty) {
    COPPICE_CHECK(mul_add(last + 1, item, 0, &l.extent), "from_dlpack: shape ", shape_to_string(l.shape),
                  " with strides ", shape_to_string(l.strides), " spans more than 2^63 bytes");
  }
  return l;
}

}  // namespace

py::capsule to_dlpack(const Tensor& t) {
  COPPICE_CHECK(t.defined() && !t.is_sparse(), "__dlpack__: needs a dense tensor (use to_dense() or parts())");
  COPPICE_CHECK(!t.storage().read_only(), "__dlpack__: the tensor ", shape_to_string(t.shape()),
                " is on read-only memory, which DLPack 0.8 cannot mark read-only; use numpy.asarray(t) (a "
                "read-only view) or export a copy");
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

Tensor from_dlpack(const py::object& obj) {
  // A bare capsule first: asking it for __dlpack__ raises and clears an
  // AttributeError, a microsecond of every coppice.torch call.
  py::object cap_obj =
      PyCapsule_CheckExact(obj.ptr()) || !py::hasattr(obj, "__dlpack__") ? obj : obj.attr("__dlpack__")();
  PyObject* cap = cap_obj.ptr();
  COPPICE_CHECK(PyCapsule_IsValid(cap, "dltensor"),
                "from_dlpack: needs an object with __dlpack__ or an unused \"dltensor\" capsule");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  COPPICE_CHECK(m != nullptr, "from_dlpack: the capsule holds no tensor");
  const DLTensor& d = m->dl_tensor;
  COPPICE_CHECK(d.device.device_type == kDLCPU || d.device.device_type == kDLCUDA,
                "from_dlpack: memory on DLPack device type ", static_cast<int>(d.device.device_type),
                " (Coppice takes CPU and CUDA memory)");
  const DType dtype = dtype_of_dl(d.dtype);
  const int64_t item = static_cast<int64_t>(dtype_size(dtype));
  const CheckedLayout layout = checked_layout(d, item);
  const uintptr_t first = reinterpret_cast<uintptr_t>(d.data) + d.byte_offset;
  COPPICE_CHECK(layout.extent == 0 || d.data != nullptr, "from_dlpack: the producer gives no data for shape ",
                shape_to_string(layout.shape));
  COPPICE_CHECK(first % static_cast<uintptr_t>(item) == 0, "from_dlpack: the data (byte offset ", d.byte_offset,
                ") is not aligned to its ", item, "-byte ", dtype_name(dtype), " elements");
  COPPICE_CHECK(d.device.device_id >= 0, "from_dlpack: device id ", d.device.device_id, " is negative");
  const Device device = d.device.device_type == kDLCUDA ? Device::cuda(d.device.device_id) : Device::cpu();
  PyCapsule_SetName(cap, "used_dltensor");  // checked: the deleter is ours to call now
  Storage storage = Storage::wrap(reinterpret_cast<void*>(first), static_cast<size_t>(layout.extent), device, [m] {
    if (m->deleter == nullptr || !Py_IsInitialized()) return;  // at exit: the producer has gone
    py::gil_scoped_acquire gil;                                // a producer's deleter may touch Python objects
    m->deleter(m);
  });
  return Tensor::from_storage(storage, layout.shape, layout.strides, 0, dtype);
}

namespace {

// tensor_of_any, with `what()` (the name of the argument) made only when an
// error or tensor_of needs it: coppice.torch's calls take four DLPack
// capsules each and name none of them unless one is refused.
template <typename What>
Tensor any_to_tensor(const py::object& o, const What& what) {
  if (PyCapsule_CheckExact(o.ptr())) {  // a bare DLPack capsule (torch.utils.dlpack.to_dlpack's)
    try {
      return from_dlpack(o);
    } catch (const Error& e) { fail(what(), ": ", e.what()); }
  }
  if (py::isinstance<Tensor>(o) || py::isinstance<py::array>(o) || !py::hasattr(o, "__dlpack__")) {
    return tensor_of(o, what());
  }
  try {
    return from_dlpack(o);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_Exception)) throw;  // KeyboardInterrupt, SystemExit: as they are
    const std::string message =
        str_cat(what(), ": ", type_name_of(o), ".__dlpack__() raised ", describe_python_error(e));
    py::raise_from(e, coppice_error_type().ptr(), message.c_str());
    throw py::error_already_set();
  } catch (const Error& e) { fail(what(), ": ", e.what()); }
}

}  // namespace

Tensor tensor_of_any(const py::object& o, const std::string& what) {
  return any_to_tensor(o, [&] { return what; });
}

Tensor tensor_of_any(const py::object& o, std::string_view op, std::string_view argument) {
  return any_to_tensor(o, [&] { return str_cat(op, ": ", argument); });
}

}  // namespace coppice::python

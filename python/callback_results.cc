// What Python code called by the library returned, checked before the
// library uses it: its type, dtype, shape and values, and None. A bad value
// is a coppice.Error naming the callback (`who`), what it returned and what
// it must return, never a failed cast deep in the library. Called with the
// GIL held; a NumPy conversion that fails is reported, not raised, so that
// it is not mistaken for an exception of the user's code.
#include <string>

#include "python/bindings.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice::python {
namespace {

// "int", "None", "a float64 array of shape [2, 3]": what a callback returned, for a message.
std::string describe_value(const py::handle& o) {
  if (!py::isinstance<py::array>(o)) return type_name_of(o);
  const auto a = py::reinterpret_borrow<py::array>(o);
  Shape shape(a.shape(), a.shape() + a.ndim());
  return str_cat("a ", py::str(a.dtype()).cast<std::string>(), " array of shape ", shape_to_string(shape));
}

// numpy.asarray(r), or a coppice.Error naming `who` (a ragged list, an __array__ that raises).
py::array returned_array(const py::object& r, const std::string& who, const std::string& must) {
  COPPICE_CHECK(!r.is_none(), who, " returned None; it must return ", must);
  try {
    return py::module_::import("numpy").attr("asarray")(r);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_Exception)) throw;  // KeyboardInterrupt, SystemExit: as they are
    fail(who, " returned ", type_name_of(r), ", which is not an array (numpy.asarray raised ", describe_python_error(e),
         "); it must return ", must);
  }
}

char kind_of(const py::array& a) { return a.dtype().kind(); }

}  // namespace

std::vector<int64_t> positions_returned(const py::object& r, const std::string& who, int64_t k) {
  const std::string must = str_cat(k, " positions among the candidates (a 1-D integer array or list)");
  const py::array a = returned_array(r, who, must);
  if (a.size() == 0 && a.ndim() == 1) return {};  // nothing to grow ([] is float64 to NumPy)
  const char kind = kind_of(a);
  COPPICE_CHECK(kind != 'b', who, " returned ", describe_value(a), " (a mask?); it must return ", must,
                ", e.g. numpy.flatnonzero(mask)");
  COPPICE_CHECK(a.ndim() == 1, who, " returned ", describe_value(a), "; it must return ", must);
  COPPICE_CHECK(kind == 'i' || kind == 'u', who, " returned ", describe_value(a), "; it must return ", must);
  // int64 values (a uint64 past int64 becomes negative: no candidate, refused by the updater).
  const auto positions = py::array_t<int64_t, py::array::c_style>(a.attr("astype")("int64"));
  return std::vector<int64_t>(positions.data(), positions.data() + positions.size());
}

Tensor scores_returned(const py::object& r, const std::string& who) {
  const std::string must = "scores (a numeric array, larger survives)";
  const py::array a = returned_array(r, who, must);
  const char kind = kind_of(a);
  COPPICE_CHECK(kind == 'f' || kind == 'i' || kind == 'u' || kind == 'b', who, " returned ", describe_value(a),
                "; it must return ", must);
  const auto scores = py::array_t<double, py::array::c_style>(a.attr("astype")("float64"));
  // NaN has no rank: sorting by it is undefined behaviour.
  const double* v = scores.data();
  for (py::ssize_t i = 0; i < scores.size(); ++i) {
    COPPICE_CHECK(v[i] == v[i], who, " returned a NaN score at flat index ", i, " (of ", scores.size(),
                  "); scores must be numbers");
  }
  return from_numpy(scores, who).clone();  // the library's own copy: no NumPy memory outlives the call
}

Tensor mask_returned(const py::object& r, const std::string& who, const Shape& shape) {
  const std::string must = str_cat("a bool array of the input's shape ", shape_to_string(shape));
  COPPICE_CHECK(py::isinstance<py::array>(r) && kind_of(py::reinterpret_borrow<py::array>(r)) == 'b', who, " returned ",
                py::isinstance<py::array>(r) ? str_cat("an array of ", py::str(r.attr("dtype")).cast<std::string>())
                                             : type_name_of(r),
                "; it must return ", must);
  const Tensor mask = from_numpy(py::reinterpret_borrow<py::array>(r), who).clone();  // the library's own copy
  COPPICE_CHECK(mask.shape() == shape, who, " returned shape ", shape_to_string(mask.shape()),
                " for an input of shape ", shape_to_string(shape));
  return mask;
}

Variable variable_returned(const py::object& r, const std::string& who) {
  COPPICE_CHECK(py::isinstance<Variable>(r), who, " returned ", describe_value(r),
                "; it must return a coppice.Variable (what coppice's functions return for a Variable input)");
  return r.cast<Variable>();
}

bool keep_going_returned(const py::object& r, const std::string& who) {
  if (r.is_none()) return true;
  const bool is_bool = py::isinstance<py::bool_>(r) || py::isinstance(r, py::module_::import("numpy").attr("bool_"));
  COPPICE_CHECK(is_bool || py::isinstance<py::int_>(r), who, " returned ", describe_value(r),
                "; it must return True or None to go on, False to stop");
  return PyObject_IsTrue(r.ptr()) == 1;
}

}  // namespace coppice::python

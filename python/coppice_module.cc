// The Python module coppice._coppice (python/coppice/__init__.py re-exports
// it). Each part lives in its own file (python/bindings.h lists them); this
// one makes the module, its exception, and calls each part in the order
// their types refer to each other. Built by tools/wheel (a shared object:
// Debian's shared system libraries, --define=system_libs=shared).
#include <pybind11/pybind11.h>

#include "python/bindings.h"
#include "tensor/error.h"

PYBIND11_MODULE(_coppice, m) {
  namespace py = pybind11;
  using namespace coppice::python;
  m.doc() = "Coppice: sparse training (C++ runtime)";
  // Every coppice::Error (misuse of an op, a bad argument) becomes coppice.Error with its message.
  set_coppice_error_type(py::register_exception<coppice::Error>(m, "Error", PyExc_RuntimeError));
  // Registered after it, so tried first: an Error that carries a Python exception raises that exception.
  install_error_translation();
  bind_tensor(m);
  bind_autograd(m);
  bind_sparsity(m);
  bind_nn(m);
  bind_optim(m);
  bind_pattern_update(m);
  bind_extensions(m);
  bind_train(m);
  bind_io(m);
  bind_kernels(m);
  bind_levels(m);
  bind_propagation(m);
}

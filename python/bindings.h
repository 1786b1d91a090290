// What the parts of the Python module coppice._coppice share: Tensors to and
// from NumPy, Python values as Variables, Python objects held by the library,
// Python exceptions raised inside library calls, and the function through
// which each part (bind_*.cc) adds its classes and functions to the module.
//
// The GIL: the library holds it only while it calls Python (a growth policy,
// a sparsifier, a prune criterion, a callback, a Module's forward) and while
// it turns what Python returned into Tensors; long calls (a job, backward, a
// forward, an optimizer step, a mask update) let go of it.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "tensor/tensor.h"

namespace coppice::python {

namespace py = pybind11;

// ---- NumPy (bind_tensor.cc) -------------------------------------------------------------------

// A Tensor on the array's memory (a copy only for negative or unaligned
// strides); the array stays alive while the tensor does.
Tensor from_numpy(const py::array& a);
// An array on the memory of a dense CPU tensor; the tensor stays alive while the array does.
py::array to_numpy(const Tensor& t);
// The same, read-only: what user code called by the library may look at but not write through.
py::array to_numpy_readonly(const Tensor& t);
// A Tensor as is, else numpy.asarray of the object on its memory.
Tensor tensor_of(const py::object& o);
// t dense on the CPU, f32 or f64 (other dtypes as f32): what user code is handed as NumPy.
Tensor host_float(const Tensor& t);

// ---- Variables (bind_autograd.cc) -------------------------------------------------------------

// A Variable as is; anything tensor_of takes as a constant (no gradient).
Variable variable_of(const py::object& o);

// ---- Python objects and exceptions inside the library (python_errors.cc) ---------------------

// A Python object that the library may copy and drop on any thread, with or
// without the GIL (the last owner takes the GIL to release it).
using PyRef = std::shared_ptr<py::object>;
PyRef hold(py::object o);

// For user code called by the library: keeps the Python exception `e` (with
// its traceback) and throws coppice::Error("<who> (Python) raised: ..."). The
// call into the library that led there raises the kept exception instead of
// that Error (python_errors.cc: the translator, or raise_kept_python_error).
[[noreturn]] void fail_from_python(const std::string& who, py::error_already_set& e);
// Keeps `e` for the same purpose without throwing (a callback that returns false instead).
void keep_python_error(py::error_already_set& e);
// Raises the kept Python exception, if any, with `context` as a note (Python
// 3.11's add_note: where in the library it happened); returns when there is none.
void raise_kept_python_error(const std::string& context);
// Forgets a kept exception (before a call that starts afresh).
void clear_kept_python_error();
// Registers the translator that raises a kept Python exception in place of the
// coppice::Error that carried it (after coppice.Error is registered, so it runs first).
void install_error_translation();

// ---- the parts of the module ------------------------------------------------------------------

void bind_tensor(py::module_& m);      // Tensor, NumPy and DLPack, formats
void bind_autograd(py::module_& m);    // Variable, no_grad, differentiable functions, gradcheck
void bind_sparsity(py::module_& m);    // sparsifiers, SparsifyContext, SparsityBuilder
void bind_nn(py::module_& m);          // coppice.nn: Module, the layers, the model zoo
void bind_optim(py::module_& m);       // coppice.optim: SGD, Adam, AdamW, clipping, MaskUpdater
void bind_extensions(py::module_& m);  // growth policies, sparsifiers and prune criteria written in Python
void bind_train(py::module_& m);       // coppice.train

// The prune criterion registered in Python under `name` as a PruneScoreFn
// (optim/prune.h), or false when there is none (bind_extensions.cc).
bool python_prune_criterion(const std::string& name, std::function<Tensor(const Tensor&, int64_t)>* out);
std::vector<std::string> python_prune_criteria();

}  // namespace coppice::python

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
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace coppice::python {

namespace py = pybind11;

// ---- one Python object per Variable (bind_autograd.cc) ----------------------------------------
//
// A Variable is a handle: many C++ copies share one variable. Every Variable
// that goes to Python goes through the caster below, which hands back the
// live Python object already wrapping that variable when there is one, so a
// parameter a user holds, the one model.parameters() gives and the one in an
// optimizer's param_groups are the same object (`is`), before and after a
// mask update (which keeps the variable: Variable::set_value).

// The live Python object wrapping `v`'s variable (a new reference), or a null handle.
py::handle existing_variable_object(const Variable& v);
// Notes `inside`, the Variable held by a live Python object, as its variable's object.
void remember_variable_object(const Variable* inside);

}  // namespace coppice::python

namespace pybind11::detail {

// Declared before any use (every part includes this file): a Variable cast to
// Python is its variable's existing object where one is alive; a Variable
// loaded from Python marks that object as its variable's.
template <>
class type_caster<coppice::Variable> : public type_caster_base<coppice::Variable> {
  using base = type_caster_base<coppice::Variable>;

 public:
  bool load(handle src, bool convert) {
    if (!base::load(src, convert)) return false;
    coppice::python::remember_variable_object(static_cast<const coppice::Variable*>(value));
    return true;
  }
  static handle cast(const coppice::Variable& src, return_value_policy policy, handle parent) {
    if (handle h = coppice::python::existing_variable_object(src)) return h;
    return remembered(base::cast(src, policy, parent));
  }
  static handle cast(coppice::Variable&& src, return_value_policy policy, handle parent) {
    if (handle h = coppice::python::existing_variable_object(src)) return h;
    return remembered(base::cast(std::move(src), policy, parent));
  }
  static handle cast(const coppice::Variable* src, return_value_policy policy, handle parent) {
    if (src == nullptr) return none().release();
    if (handle h = coppice::python::existing_variable_object(*src)) return h;
    return remembered(base::cast(src, policy, parent));
  }

 private:
  static handle remembered(handle h) {
    if (h) {
      base inside;
      if (inside.load(h, /*convert=*/false)) {
        coppice::python::remember_variable_object(static_cast<const coppice::Variable*>(inside.value));
      }
    }
    return h;
  }
};

}  // namespace pybind11::detail

namespace coppice::python {

// ---- NumPy (numpy_conversion.cc) and DLPack (dlpack_conversion.cc) ----------------------------
//
// `what` names the argument for errors ("coppice.tensor: data"): every
// conversion that cannot be made is a coppice.Error naming it.

// numpy.asarray(o): a ragged list, an __array__ that raises, anything NumPy
// refuses is a coppice.Error naming `what`, NumPy's exception its __cause__.
py::array array_of(const py::object& o, const std::string& what);
// A Tensor on the array's memory, read-only where the array is; a native,
// aligned copy for foreign byte order, unaligned memory or negative or
// unaligned strides. The array stays alive while the tensor does.
Tensor from_numpy(const py::array& a, const std::string& what);
// A Tensor as is, else from_numpy(array_of(o)).
Tensor tensor_of(const py::object& o, const std::string& what);
// An array on the memory of a dense CPU tensor (read-only where the tensor's
// memory is); the tensor stays alive while the array does.
py::array to_numpy(const Tensor& t);
// The same, read-only: what user code called by the library may look at but not write through.
py::array to_numpy_readonly(const Tensor& t);
// t dense on the CPU, f32 or f64 (other dtypes as f32): what user code is handed as NumPy.
Tensor host_float(const Tensor& t);
// The same memory as the dense tensor t, flagged read-only (an index part
// handed to Python: the library trusts it, so Python may not write it).
Tensor read_only_view(const Tensor& t);
// Throws naming `what` when t (or a part of a sparse t) is on read-only memory:
// before a call that writes it in place.
void check_writable(const Tensor& t, const std::string& what);
// DLPack export (a read-only tensor is refused: DLPack 0.8 cannot mark it) and
// import (every dimension, stride and pointer checked before the capsule is claimed).
py::capsule to_dlpack(const Tensor& t);
Tensor from_dlpack(const py::object& obj);
// A Tensor as is; a DLPack producer other than a NumPy array (a PyTorch
// tensor, on the CPU or a GPU) or an unused DLPack capsule through
// from_dlpack, on its memory; anything else through tensor_of. A refusal (the producer's own, a PyTorch tensor
// that requires grad, or from_dlpack's) is a coppice.Error naming `what`.
Tensor tensor_of_any(const py::object& o, const std::string& what);
// The same, naming "<op>: <argument>" (made only when needed: the hot path's form).
Tensor tensor_of_any(const py::object& o, std::string_view op, std::string_view argument);

// ---- Variables (bind_autograd.cc) -------------------------------------------------------------

// A Variable as is; anything tensor_of takes as a constant (no gradient).
Variable variable_of(const py::object& o, const std::string& what);

// The GELU form in PyTorch's spelling: approximate "none" (the exact, erf
// GELU) or "tanh" (GPT-2's approximation); anything else a ValueError naming `who`.
GeluForm gelu_form_of(const std::string& approximate, const char* who);

// ---- what Python callbacks return, checked (callback_results.cc) ------------------------------
//
// `who` names the callback ("growth policy 'mine'"); each refusal is a
// coppice.Error naming it, what it returned and what it must return.

// A growth policy's k positions: a 1-D integer array or list (None, other
// shapes, bool masks and floats refused).
std::vector<int64_t> positions_returned(const py::object& r, const std::string& who, int64_t k);
// A prune criterion's scores as an f64 tensor of the library's own (NaN refused; the shape is the caller's to check).
Tensor scores_returned(const py::object& r, const std::string& who);
// A sparsifier's keep mask: a bool array of `shape`, copied.
Tensor mask_returned(const py::object& r, const std::string& who, const Shape& shape);
// A Module's forward: a coppice.Variable.
Variable variable_returned(const py::object& r, const std::string& who);
// A coppice.train callback's answer: None or true goes on, false stops (bool or int; nothing else).
bool keep_going_returned(const py::object& r, const std::string& who);

// ---- Python objects and exceptions inside the library (python_errors.cc) ---------------------

// "KeyError: 'stop here'": one line (pybind11's what() adds the traceback).
std::string describe_python_error(const py::error_already_set& e);
// The name of o's type ("int", "list"), "None" for None: for messages.
std::string type_name_of(const py::handle& o);
// coppice.Error, as registered by the module (for errors raised with a __cause__).
void set_coppice_error_type(py::object type);
py::handle coppice_error_type();

// A Python object that the library may copy and drop on any thread, with or
// without the GIL (the last owner takes the GIL to release it).
using PyRef = std::shared_ptr<py::object>;
PyRef hold(py::object o);

// For user code called by the library: keeps the Python exception `e` (with
// its traceback) and throws coppice::Error("<who> (Python) raised: ..."). The
// call into the library that led there raises the kept exception instead of
// that Error (python_errors.cc: the translator, or raise_kept_python_error).
[[noreturn]] void fail_from_python(const std::string& who, py::error_already_set& e);
// The kept exception is the calling thread's own (python_errors.cc).
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

void bind_tensor(py::module_& m);       // Tensor, NumPy and DLPack, formats
void bind_autograd(py::module_& m);     // Variable, no_grad, differentiable functions, gradcheck
void bind_sparsity(py::module_& m);     // sparsifiers, SparsifyContext, SparsityBuilder
void bind_nn(py::module_& m);           // coppice.nn: Module, the layers, the model zoo
void bind_optim(py::module_& m);        // coppice.optim: SGD, Adam, AdamW, clipping, MaskUpdater
void bind_extensions(py::module_& m);   // growth policies, sparsifiers and prune criteria written in Python
void bind_train(py::module_& m);        // coppice.train
void bind_io(py::module_& m);           // coppice.save and coppice.load (safetensors, any format)
void bind_kernels(py::module_& m);      // coppice.kernels: a linear's products on plain tensors (coppice.torch's)
void bind_levels(py::module_& m);       // coppice.levels: formats declared by their levels
void bind_propagation(py::module_& m);  // coppice.propagate: sparsity attributes through a traced step
// coppice.optim.PatternUpdater, GmpPruner, gmp_density_at, prune_to_density and coppice.nm_mask: the mask
// updates' selections over plain tensors (after bind_optim, whose submodule it adds to)
void bind_pattern_update(py::module_& m);

// The prune criterion registered in Python under `name` as a PruneScoreFn
// (optim/prune.h), or false when there is none (bind_extensions.cc).
bool python_prune_criterion(const std::string& name, std::function<Tensor(const Tensor&, int64_t)>* out);
std::vector<std::string> python_prune_criteria();

}  // namespace coppice::python

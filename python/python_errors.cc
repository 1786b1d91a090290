// Python exceptions raised in user code that the library called: the library
// sees a coppice::Error (it unwinds through C++ that knows nothing of Python,
// and may add context on the way); the Python caller gets the original
// exception back, with its traceback, and the library's message as a note.
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "python/bindings.h"
#include "tensor/error.h"

namespace coppice::python {
namespace {

// Marks the Errors that carry a kept Python exception, so that an unrelated
// Error never raises a stale one.
constexpr const char* kRaisedMarker = " (Python) raised: ";

// One slot: the first exception of a call wins (a run stops at it).
struct KeptError {
  std::mutex mu;
  std::exception_ptr error;
};
KeptError& kept() {
  static KeptError* k = new KeptError();  // never destroyed: exceptions may be kept until exit
  return *k;
}

std::exception_ptr take_kept() {
  std::lock_guard<std::mutex> lock(kept().mu);
  return std::exchange(kept().error, nullptr);
}

// Adds `note` to the Python exception that `p` holds (an error_already_set),
// where Python supports notes (3.11), and rethrows it.
[[noreturn]] void rethrow_with_note(const std::exception_ptr& p, const std::string& note) {
  try {
    std::rethrow_exception(p);
  } catch (py::error_already_set& e) {
    if (!note.empty() && py::hasattr(e.value(), "add_note")) e.value().attr("add_note")(note);
    throw;
  }
}

// "KeyError: 'stop here'": one line (pybind11's what() adds the traceback).
std::string describe(const py::error_already_set& e) {
  return str_cat(py::str(e.type().attr("__name__")).cast<std::string>(), ": ", py::str(e.value()).cast<std::string>());
}

}  // namespace

PyRef hold(py::object o) {
  return PyRef(new py::object(std::move(o)), [](py::object* p) {
    if (!Py_IsInitialized()) return;  // at exit: Python has gone, and the object with it
    py::gil_scoped_acquire gil;
    delete p;
  });
}

void keep_python_error(py::error_already_set& e) {
  std::lock_guard<std::mutex> lock(kept().mu);
  if (!kept().error) kept().error = std::make_exception_ptr(e);
}

void fail_from_python(const std::string& who, py::error_already_set& e) {
  keep_python_error(e);
  throw Error(str_cat(who, kRaisedMarker, describe(e)));
}

void raise_kept_python_error(const std::string& context) {
  const std::exception_ptr p = take_kept();
  if (!p) return;
  rethrow_with_note(p, context);
}

void clear_kept_python_error() { take_kept(); }

void install_error_translation() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      if (what.find(kRaisedMarker) == std::string::npos) throw;  // not ours: the next translator (coppice.Error)
      const std::exception_ptr python = take_kept();
      if (!python) throw;
      try {
        rethrow_with_note(python, what);
      } catch (py::error_already_set& raised) {
        raised.restore();  // the original exception, with its traceback
      }
    }
  });
}

}  // namespace coppice::python

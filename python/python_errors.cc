// Python exceptions raised in user code that the library called: the library
// sees a coppice::Error (it unwinds through C++ that knows nothing of Python,
// and may add context on the way); the Python caller gets the original
// exception back, with its traceback, and the library's message as a note.
//
// The kept exception is the thread's own: the library calls user code on the
// thread of the Python call that led there, so threads that call into the
// library at once each get their own exception back, never another's. And it
// is taken only by the Error that carries its message, so an exception the
// library swallowed is never raised for an unrelated error later.
#include <exception>
#include <string>
#include <utility>

#include "python/bindings.h"
#include "tensor/error.h"

namespace coppice::python {
namespace {

// Marks the Errors that carry a kept Python exception, so that an unrelated
// Error never raises a stale one.
constexpr const char* kRaisedMarker = " (Python) raised: ";

struct KeptError {
  std::exception_ptr error;
  std::string message;  // the text of the Error that carries it; empty: any (a callback that returned false)
  ~KeptError() {
    // At thread exit (or after Python has gone) the exception is not ours to
    // free: that needs the GIL, which may be unsafe to take there. Only an
    // exception that the library swallowed is left here: let it go unfreed.
    if (error) new std::exception_ptr(std::move(error));
  }
};
KeptError& kept() {
  thread_local KeptError k;
  return k;
}

std::exception_ptr take_kept() {
  kept().message.clear();
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

py::object& error_type() {
  static py::object* type = new py::object();  // never destroyed: the module's exception lives until exit
  return *type;
}

}  // namespace

std::string describe_python_error(const py::error_already_set& e) {
  return str_cat(py::str(e.type().attr("__name__")).cast<std::string>(), ": ", py::str(e.value()).cast<std::string>());
}

std::string type_name_of(const py::handle& o) {
  if (o.is_none()) return "None";
  return py::str(py::type::handle_of(o).attr("__name__")).cast<std::string>();
}

void set_coppice_error_type(py::object type) { error_type() = std::move(type); }
py::handle coppice_error_type() { return error_type(); }

PyRef hold(py::object o) {
  return PyRef(new py::object(std::move(o)), [](py::object* p) {
    if (!Py_IsInitialized()) return;  // at exit: Python has gone, and the object with it
    py::gil_scoped_acquire gil;
    delete p;
  });
}

void keep_python_error(py::error_already_set& e) {
  if (!kept().error) kept().error = std::make_exception_ptr(e);
}

void fail_from_python(const std::string& who, py::error_already_set& e) {
  const std::string message = str_cat(who, kRaisedMarker, describe_python_error(e));
  kept().error = std::make_exception_ptr(e);  // this call's exception (one left from an earlier call is stale)
  kept().message = message;
  throw Error(message);
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
      const bool carried = !kept().message.empty() && what.find(kept().message) != std::string::npos;
      const std::exception_ptr python = take_kept();
      if (!python || !carried) throw;  // another call's, swallowed by the library: dropped, this Error as it is
      try {
        rethrow_with_note(python, what);
      } catch (py::error_already_set& raised) {
        raised.restore();  // the original exception, with its traceback
      }
    }
  });
}

}  // namespace coppice::python

// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Status to Python exception (errors.h): ThrowIfError, ThrowInvalid and the translator
// from StatusError to the layerps.errors classes.
#include "errors.h"

#include <pybind11/pybind11.h>

#include <exception>
#include <string>

namespace py = pybind11;

namespace layerps_python {
namespace {

// The Python class for a status code, from layerps.errors (imported lazily so that the
// module also loads on its own; then RuntimeError is used).
PyObject* ErrorClassFor(ps::StatusCode code) {
  try {
    py::object cls =
        py::module_::import("layerps.errors").attr("error_class")(static_cast<int>(code));
    return cls.release().ptr();  // a new reference, released by the caller
  } catch (py::error_already_set&) {
    PyErr_Clear();
    Py_INCREF(PyExc_RuntimeError);
    return PyExc_RuntimeError;
  }
}

void TranslateStatusError(const StatusError& e) {
  PyObject* cls = ErrorClassFor(e.status().code());
  try {
    // LayerPSError subclasses carry the code in their class; RuntimeError gets the name.
    const std::string text =
        cls == PyExc_RuntimeError ? e.status().ToString() : e.status().message();
    py::object exc = py::reinterpret_borrow<py::object>(cls)(text);
    PyErr_SetObject(cls, exc.ptr());
  } catch (py::error_already_set& err) {
    err.restore();
  }
  Py_DECREF(cls);
}

}  // namespace

void ThrowIfError(const ps::Status& s) {
  if (!s.ok()) throw StatusError(s);
}

[[noreturn]] void ThrowInvalid(const std::string& message) {
  throw StatusError(ps::InvalidArgument(message));
}

void RegisterStatusTranslator() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      TranslateStatusError(e);
    }
  });
}

}  // namespace layerps_python

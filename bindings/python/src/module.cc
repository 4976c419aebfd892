// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// layerps._core: a thin pybind11 layer over the public C++ API (include/ps/*.h only).
//
// Contract of this layer:
//  - Every non-OK ps::Status becomes a Python exception of the class that
//    layerps.errors.error_class(code) names (LayerPSError and its subclasses), carrying
//    the Status message; this is the only place where a Status turns into an exception.
//  - The GIL is released around every call that can block (Start, Join, Stop, Wait,
//    Barrier, DeclareTable) and around request submission.
//  - Arrays are used in place: float32 C-contiguous values and 64-bit integer keys are
//    passed to the Worker without a copy. Anything else is refused here with
//    InvalidArgument (the pure-Python layer converts what it may convert first).
//  - A Handle holds references to every array of its request until the request has
//    completed; a Handle dropped while its request is in flight parks those references on
//    its worker, which releases them once the request has completed (or the worker
//    stopped), so memory under an in-flight request is never freed.
//
// Where: errors.* (Status to exception), timeouts.h, handles.* (Handle and the parked
// requests), worker.* (PyWorker, WorkerOf, SubmitOn), and one bind file per subject
// (bind.h) that the module below calls in order.
#include <pybind11/pybind11.h>

#include "bind.h"
#include "errors.h"
#include "ps/version.h"

PYBIND11_MODULE(_core, m) {
  using namespace layerps_python;  // NOLINT: the module's own helpers
  m.doc() = "LayerPS C++ core (internal: use the layerps package)";
  // The package's version comes from here: one source (the CMake project() version).
  m.attr("__version__") = ps::Version();
  m.attr("__commit__") = ps::BuildCommit();

  RegisterStatusTranslator();

  BindOptions(m);
  BindNodes(m);
  BindHandle(m);
  BindCollectives(m);
  BindWorker(m);
  BindDevice(m);
  BindTrainer(m);
}

// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// What the binding's translation units share (defined in module.cc): the Status-to-
// exception path and access to a Python Worker's C++ worker.
#ifndef LAYERPS_PYTHON_CORE_H_
#define LAYERPS_PYTHON_CORE_H_

#include <pybind11/pybind11.h>

#include <functional>
#include <string>

#include "ps/ps.h"

namespace layerps_python {

// Raises the layerps.errors class of the status (no-op when OK).
void ThrowIfError(const ps::Status& s);
[[noreturn]] void ThrowInvalid(const std::string& message);
// The ps::Worker inside a layerps._core.Worker object (InvalidArgument for anything else).
ps::Worker& WorkerOf(pybind11::handle core_worker);

// Registers layerps._core.Trainer (trainer.cc).
void BindTrainer(pybind11::module_& m);
// Registers the typed collectives (collectives.cc).
void BindCollectives(pybind11::module_& m);

// Starts a request of a layerps._core.Worker with the GIL released (`start` must not
// touch Python objects) and returns its layerps._core.Handle: it keeps `keep` alive until
// the request completed, and wait() returns `result`.
pybind11::object SubmitOn(pybind11::handle core_worker, std::string what, pybind11::object keep,
                          pybind11::object result,
                          const std::function<ps::Ticket(ps::Worker&)>& start);

}  // namespace layerps_python

#endif  // LAYERPS_PYTHON_CORE_H_

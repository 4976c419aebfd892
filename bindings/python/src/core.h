// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// What the binding's translation units share (defined in module.cc): the Status-to-
// exception path and access to a Python Worker's C++ worker.
#ifndef LAYERPS_PYTHON_CORE_H_
#define LAYERPS_PYTHON_CORE_H_

#include <pybind11/pybind11.h>

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

}  // namespace layerps_python

#endif  // LAYERPS_PYTHON_CORE_H_

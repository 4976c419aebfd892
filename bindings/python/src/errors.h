// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Status to Python exception: every non-OK ps::Status becomes a Python exception of the
// class that layerps.errors.error_class(code) names (LayerPSError and its subclasses),
// carrying the Status message; this is the only place where a Status turns into an
// exception. Depends on nothing else in the binding.
#ifndef LAYERPS_PYTHON_ERRORS_H_
#define LAYERPS_PYTHON_ERRORS_H_

#include <stdexcept>
#include <string>
#include <utility>

#include "ps/status.h"

namespace layerps_python {

// A non-OK Status on its way to Python.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(ps::Status status)
      : std::runtime_error(status.ToString()), status_(std::move(status)) {}
  const ps::Status& status() const { return status_; }

 private:
  ps::Status status_;
};

// Raises the layerps.errors class of the status (no-op when OK).
void ThrowIfError(const ps::Status& s);
[[noreturn]] void ThrowInvalid(const std::string& message);

// Registers the translator that turns a StatusError into its layerps.errors class (once,
// when the module loads).
void RegisterStatusTranslator();

}  // namespace layerps_python

#endif  // LAYERPS_PYTHON_ERRORS_H_

// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Timeouts as Python passes them (seconds, or None for no limit of our own) in
// milliseconds, for the worker, its Handles and the nodes.
#ifndef LAYERPS_PYTHON_TIMEOUTS_H_
#define LAYERPS_PYTHON_TIMEOUTS_H_

#include <chrono>
#include <cstdint>
#include <optional>

#include "errors.h"

namespace layerps_python {

using Millis = std::chrono::milliseconds;
// "No limit of our own" for Barrier/Join: 12 days (a time point this far ahead cannot overflow).
constexpr Millis kNoLimit(int64_t{1} << 30);

// Converts a timeout in seconds (None: no limit of our own) to milliseconds.
inline Millis ToMillis(std::optional<double> seconds, Millis none_value) {
  if (!seconds) return none_value;
  if (!(*seconds >= 0)) ThrowInvalid("timeout must be >= 0 seconds (or None)");
  const double ms = *seconds * 1000.0;
  if (ms > 1e12) return none_value;
  return Millis(static_cast<int64_t>(ms + 0.5));
}

}  // namespace layerps_python

#endif  // LAYERPS_PYTHON_TIMEOUTS_H_

// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Status codes as they travel in replies (data headers, control replies): an int32 that
// came from the network is only trusted after it is mapped onto a known code.
#ifndef PS_COMMON_STATUS_WIRE_H_
#define PS_COMMON_STATUS_WIRE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "ps/status.h"

namespace ps {

// The code a peer sent, or kInternal for a value outside StatusCode. No peer reports
// kTimeout (it means "still in flight: wait again" to a caller of Wait, Barrier or
// DeclareTable, whose own deadline is the only source of it): one on the wire is
// kUnavailable, so a finished call never looks unfinished.
inline StatusCode StatusCodeFromWire(int64_t code) {
  if (code < 0 || code > static_cast<int64_t>(StatusCode::kIoError)) return StatusCode::kInternal;
  if (code == static_cast<int64_t>(StatusCode::kTimeout)) return StatusCode::kUnavailable;
  return static_cast<StatusCode>(code);
}

// A status received from a peer: OK for 0, else the clamped code with `message`.
inline Status StatusFromWire(int64_t code, std::string message) {
  if (code == 0) return Status::OK();
  return Status(StatusCodeFromWire(code), std::move(message));
}

}  // namespace ps

#endif  // PS_COMMON_STATUS_WIRE_H_

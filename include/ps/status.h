// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// Status and StatusOr<T>: how every LayerPS call reports a failure the network, the
// disk or the caller can cause. Assertions are kept for LayerPS's own invariants only.
//
// The codes, what causes them and whether a retry helps are listed in docs/errors.md.
//
// Thread-safety: Status and StatusOr are values; distinct objects may be used from
// distinct threads, a shared one must not be mutated concurrently.
#ifndef PS_STATUS_H_
#define PS_STATUS_H_

#include <cassert>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

namespace ps {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // the caller passed something malformed; retry will not help
  kNotFound = 2,            // unknown table, node or key range
  kAlreadyExists = 3,       // a table name declared again with a different spec
  kFailedPrecondition = 4,  // the object is not in a state for this call (not started, stopped)
  kTimeout = 5,             // the deadline passed; the operation may still complete
  kUnavailable = 6,         // a peer is dead or unreachable; retry after the cluster recovers
  kPermissionDenied = 7,    // wrong cluster token, or a message from an unknown peer
  kProtocolError = 8,       // a malformed or incompatible message arrived
  kResourceExhausted = 9,   // a bound (queue, message size, in-flight requests) was hit
  kAborted = 10,            // the cluster is shutting down
  kInternal = 11,           // a LayerPS bug; please report it
  kIoError = 12,            // the disk or the OS refused
};

class Status;
namespace internal {
// Prints the status and aborts: StatusOr::value() was called on an error.
[[noreturn]] void DieOnBadAccess(const Status& status);
}  // namespace internal

// Returns a stable name such as "InvalidArgument".
const char* StatusCodeName(StatusCode code);

class Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  // The message without the code name; empty when OK.
  const std::string& message() const;
  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(const std::string& context) const;

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;  // null when OK; immutable once built
};

inline bool operator==(const Status& a, const Status& b) {
  return a.code() == b.code() && a.message() == b.message();
}
inline std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

// Shorthands for the common codes.
Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status AlreadyExists(std::string message);
Status FailedPrecondition(std::string message);
Status Timeout(std::string message);
Status Unavailable(std::string message);
Status PermissionDenied(std::string message);
Status ProtocolError(std::string message);
Status ResourceExhausted(std::string message);
Status Aborted(std::string message);
Status Internal(std::string message);
Status IoError(std::string message);

// A value or the Status that explains why there is none.
template <typename T>
class StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Internal("StatusOr built from an OK status without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // Precondition: ok(). Calling it on an error is a programming error: it aborts with
  // the status, in every build.
  const T& value() const& {
    CheckValue();
    return *value_;
  }
  T& value() & {
    CheckValue();
    return *value_;
  }
  T&& value() && {
    CheckValue();
    return std::move(*value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  void CheckValue() const {
    if (!value_) internal::DieOnBadAccess(status_);
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace ps

// Evaluates an expression returning Status and returns it from the caller if not OK.
#define PS_RETURN_IF_ERROR(expr)                     \
  do {                                               \
    ::ps::Status ps_status_tmp_ = (expr);            \
    if (!ps_status_tmp_.ok()) return ps_status_tmp_; \
  } while (0)

#endif  // PS_STATUS_H_

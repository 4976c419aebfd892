"""The exceptions of LayerPS: one class per C++ ``ps::StatusCode``.

Every failure a C++ call reports as a ``ps::Status`` reaches Python as an instance of the
class for its code, all subclasses of :class:`LayerPSError`. Some also derive from the
matching built-in exception so that generic handlers work::

    InvalidArgumentError  -> ValueError      (bad dtype, shape, size, option...)
    NotFoundError         -> LookupError
    TimeoutError          -> builtins.TimeoutError
    UnavailableError      -> ConnectionError (a peer is dead or unreachable)
"""

import builtins

__all__ = [
    "LayerPSError", "InvalidArgumentError", "NotFoundError", "AlreadyExistsError",
    "FailedPreconditionError", "TimeoutError", "UnavailableError", "PermissionDeniedError",
    "ProtocolError", "ResourceExhaustedError", "AbortedError", "InternalError", "IoError",
    "error_class",
]


class LayerPSError(Exception):
    """Base class of every LayerPS error. ``code`` is the C++ status code's name."""

    code = "Unknown"
    code_value = -1
    retryable = False

    def __str__(self):
        # The code leads the message ("Timeout: ..."), except where the class's own name is
        # the code (IoError, ProtocolError): a traceback prints the class name before the
        # message, and "IoError: IoError: ..." says it twice.
        msg = super().__str__()
        if type(self).__name__ == self.code:
            return msg or self.code
        return f"{self.code}: {msg}" if msg else self.code


class InvalidArgumentError(LayerPSError, ValueError):
    """The caller passed something malformed (dtype, shape, size, option); nothing was sent."""
    code, code_value = "InvalidArgument", 1


class NotFoundError(LayerPSError, LookupError):
    """Unknown table, node or key range."""
    code, code_value = "NotFound", 2


class AlreadyExistsError(LayerPSError):
    """A table name declared again with a different spec."""
    code, code_value = "AlreadyExists", 3


class FailedPreconditionError(LayerPSError):
    """The object is not in a state for this call (not started, stopped)."""
    code, code_value = "FailedPrecondition", 4


class TimeoutError(LayerPSError, builtins.TimeoutError):  # noqa: A001 (shadows on purpose)
    """The deadline passed; the operation may still complete (wait again)."""
    code, code_value, retryable = "Timeout", 5, True


class UnavailableError(LayerPSError, ConnectionError):
    """A peer is dead or unreachable; retry after the cluster recovers."""
    code, code_value, retryable = "Unavailable", 6, True


class PermissionDeniedError(LayerPSError):
    """Wrong cluster token, or a message from an unknown peer."""
    code, code_value = "PermissionDenied", 7


class ProtocolError(LayerPSError):
    """A malformed or incompatible message arrived."""
    code, code_value = "ProtocolError", 8


class ResourceExhaustedError(LayerPSError):
    """A bound (queue, message size, in-flight requests) was hit."""
    code, code_value, retryable = "ResourceExhausted", 9, True


class AbortedError(LayerPSError):
    """The cluster is shutting down (or the worker was stopped)."""
    code, code_value = "Aborted", 10


class InternalError(LayerPSError):
    """A LayerPS bug; please report it."""
    code, code_value = "Internal", 11


class IoError(LayerPSError, OSError):
    """The disk or the OS refused."""
    code, code_value = "IoError", 12


_BY_CODE = {c.code_value: c for c in (
    InvalidArgumentError, NotFoundError, AlreadyExistsError, FailedPreconditionError,
    TimeoutError, UnavailableError, PermissionDeniedError, ProtocolError,
    ResourceExhaustedError, AbortedError, InternalError, IoError)}


def error_class(code):
    """The exception class for a C++ status code (an int); LayerPSError if unknown."""
    return _BY_CODE.get(int(code), LayerPSError)

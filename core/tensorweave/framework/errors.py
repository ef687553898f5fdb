"""The error hierarchy of tensorweave, mirroring ``tf.errors``.

Every error a user can hit while building or running a graph is one of these classes.
Messages name the node, op type, device or tensor involved and say what was expected.
``InvalidArgumentError`` is also a ``ValueError`` and ``NotFoundError`` also a
``LookupError`` so that code written against plain Python exceptions keeps working.
"""

from __future__ import annotations

OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16


class OpError(Exception):
    """Base class of all tensorweave runtime and graph errors.

    ``node_def`` is the name of the node that failed (or None), ``op`` its Operation when
    known, ``error_code`` one of the canonical codes above.
    """

    error_code = UNKNOWN

    def __init__(self, message: str, node_def=None, op=None, error_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.node_def = node_def
        self.op = op
        if error_code is not None:
            self.error_code = error_code

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # keep errors copyable/pickle-able within one process (e.g. by pytest)
        return (type(self), (self.message, self.node_def, None, self.error_code))


class CancelledError(OpError):
    error_code = CANCELLED


class UnknownError(OpError):
    error_code = UNKNOWN


class InvalidArgumentError(OpError, ValueError):
    error_code = INVALID_ARGUMENT


class DeadlineExceededError(OpError):
    error_code = DEADLINE_EXCEEDED


class NotFoundError(OpError, LookupError):
    error_code = NOT_FOUND


class AlreadyExistsError(OpError):
    error_code = ALREADY_EXISTS


class PermissionDeniedError(OpError):
    error_code = PERMISSION_DENIED


class UnauthenticatedError(OpError):
    error_code = UNAUTHENTICATED


class ResourceExhaustedError(OpError):
    error_code = RESOURCE_EXHAUSTED


class FailedPreconditionError(OpError):
    error_code = FAILED_PRECONDITION


class AbortedError(OpError):
    error_code = ABORTED


class OutOfRangeError(OpError):
    error_code = OUT_OF_RANGE


class UnimplementedError(OpError):
    error_code = UNIMPLEMENTED


class InternalError(OpError):
    error_code = INTERNAL


class UnavailableError(OpError):
    error_code = UNAVAILABLE


class DataLossError(OpError):
    error_code = DATA_LOSS


class PluginConflictError(AlreadyExistsError):
    """Two plugin distributions registered the same op, kernel key, transport or device type."""


_CODE_TO_CLASS = {
    cls.error_code: cls
    for cls in (
        CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError,
        NotFoundError, AlreadyExistsError, PermissionDeniedError, UnauthenticatedError,
        ResourceExhaustedError, FailedPreconditionError, AbortedError, OutOfRangeError,
        UnimplementedError, InternalError, UnavailableError, DataLossError,
    )
}


def exception_type_from_error_code(code: int) -> type[OpError]:
    """The error class for a canonical code (used when errors cross a process boundary)."""
    return _CODE_TO_CLASS.get(code, UnknownError)


def error_code_from_exception_type(cls: type) -> int:
    return getattr(cls, "error_code", UNKNOWN)

"""How a failed gRPC call becomes a ``tw.errors`` exception on the client.

gRPC's status codes are the canonical codes ``tw.errors`` uses, so every code maps to the
error class with the same number; the message names the method and the peer and says what
happened in words for the failures a transport itself reports (unreachable peer, timeout,
refused token, oversize message).
"""

from __future__ import annotations

import grpc

from tensorweave.framework import errors

_WHAT = {
    grpc.StatusCode.UNAVAILABLE: "the peer cannot be reached or the connection broke",
    grpc.StatusCode.DEADLINE_EXCEEDED: "no reply before the deadline",
    grpc.StatusCode.UNAUTHENTICATED: "the server refused the auth token (check the cluster's token)",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "a message is over the size limit (security.max_message_bytes)",
    grpc.StatusCode.UNIMPLEMENTED: "the server does not serve this method",
    grpc.StatusCode.CANCELLED: "the call was cancelled",
}


def to_op_error(err: grpc.RpcError, method: str, address: str, timeout: float | None = None) -> errors.OpError:
    """The tw.errors exception for a failed call of ``method`` to ``address``."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    what = _WHAT.get(code, "the call failed")
    if code is grpc.StatusCode.DEADLINE_EXCEEDED and timeout is not None:
        what += f" ({timeout:g} s)"
    cls = errors.exception_type_from_error_code(code.value[0]) if code is not None else errors.UnknownError
    name = code.name if code is not None else "UNKNOWN"
    return cls(f"grpc transport: {method} to {address}: {what} [{name}: {details}]")
